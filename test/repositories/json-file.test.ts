import { execFileSync } from 'node:child_process'
import { mkdtemp, mkdir, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import fc from 'fast-check'
import { MAX_FILE_BYTES, readJsonFile } from '../../src/repositories/json-file.js'
import { JsonChecker, MAX_DEPTH } from '../../src/repositories/json-syntax.js'

let dir: string
beforeEach(async () => { dir = await mkdtemp(join(tmpdir(), 'json-file-')) })
afterEach(() => rm(dir, { recursive: true, force: true }))

/** What readJsonFile says of a file holding `content`. */
async function read (content: string | Buffer) {
  const path = join(dir, 'data.json')
  await writeFile(path, content)
  return readJsonFile(path, 'data.json').then((value) => ({ value }), (error: Error) => ({ message: error.message }))
}

describe('reading a JSON data file', () => {
  it('parses a valid file', async () => {
    expect(await read('[{"a": "é", "b": [1, 2.5e3, null, true]}]')).toEqual({ value: [{ a: 'é', b: [1, 2500, null, true] }] })
  })

  it('skips a UTF-8 byte order mark, as RFC 8259 allows', async () => {
    expect(await read(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('[1]')]))).toEqual({ value: [1] })
  })

  it.each([
    ['a stray byte', Buffer.from([0x5b, 0x22, 0x61, 0xff, 0x22, 0x5d]), 3],
    ['a sequence cut short', Buffer.from([0x5b, 0x22, 0xc3, 0x22, 0x5d]), 2],
    ['an overlong form', Buffer.from([0x5b, 0x22, 0xc0, 0xaf, 0x22, 0x5d]), 2],
    ['an encoded surrogate', Buffer.from([0x5b, 0x22, 0xed, 0xa0, 0x80, 0x22, 0x5d]), 2],
    ['after a byte order mark, counted from the start of the file', Buffer.from([0xef, 0xbb, 0xbf, 0x5b, 0x22, 0xff, 0x22, 0x5d]), 5]
  ])('refuses bytes that are not UTF-8 (%s), naming the byte offset', async (_case, bytes, offset) => {
    expect(await read(bytes)).toEqual({ message: `data.json: not valid UTF-8 at byte ${offset}` })
  })

  it.each([
    ['a missing comma', '[{"name": "a",\n  "slug": "b"\n  "x": 1}]', "line 3, column 3 ([0].slug): expected ',' or '}'"],
    ['a trailing comma', '[1, 2,]', 'line 1, column 7 ([2]): expected a value'],
    ['a single-quoted name', "{'a': 1}", 'line 1, column 2: expected a property name in double quotes'],
    ['a missing colon', '{"a" 1}', "line 1, column 6 (a): expected ':' after a property name"],
    ['an unclosed string', '["abc', 'line 1, column 6 ([0]): a string that is never closed'],
    ['a raw line break in a string', '["a\nb"]', 'line 1, column 4 ([0]): a control character inside a string'],
    ['a bad escape', '["a\\x"]', 'line 1, column 4 ([0]): an invalid escape sequence'],
    ['a leading zero', '[01]', "line 1, column 3 ([0]): expected ',' or ']'"],
    ['a fraction without digits', '[1.]', "line 1, column 3 ([0]): expected ',' or ']'"],
    ['a minus alone', '[-]', 'line 1, column 2 ([0]): expected a value'],
    ['a misspelt literal', '[tru]', 'line 1, column 2 ([0]): expected a value'],
    ['a byte that is no UTF-8 where a value belongs', Buffer.from([0x5b, 0xff, 0x5d]), 'line 1, column 2 ([0]): expected a value'],
    ['a comment', '[1] // done', 'line 1, column 5: unexpected text after the end of the value'],
    ['an empty file', '', 'line 1, column 1: the text ends where a value is expected'],
    ['a file cut short', '[{"a": [1, 2', "line 1, column 13 ([0].a[1]): expected ',' or ']'"],
    ['wide characters before the fault', '["ééé" x]', "line 1, column 8 ([0]): expected ',' or ']'"],
    ['a name that is no identifier, quoted on one line', '[{"two\\nlines": }]', 'line 1, column 17 ([0]["two\\nlines"]): expected a value'],
    ['a long name, cut', `[{"${'n'.repeat(1000)}": }]`, `line 1, column 1007 ([0]["${'n'.repeat(32)}…"]): expected a value`],
    ['a fault deeper than a path shows', '[{"a": [{"b": [{"c": x}]}]}]', 'line 1, column 22 ([0].a[0].b…): expected a value']
  ])('locates a syntax error (%s) by line and column, and the record and field it is in, without quoting the text', async (_case, text, where) => {
    expect(await read(text)).toEqual({ message: `data.json: not valid JSON at ${where}` })
  })

  it('reads nesting 100,000 deep without overflowing the stack, and locates a fault past the depth a message shows', async () => {
    expect(await read(`${'['.repeat(100_000)}${']'.repeat(100_000)}`)).toHaveProperty('value')
    expect(await read(`${'['.repeat(100_000)}x${']'.repeat(100_000)}`)).toEqual({ message: `data.json: nested deeper than ${MAX_DEPTH} levels at line 1, column ${MAX_DEPTH + 1}` })
    // Brackets inside strings do not count.
    expect(await read(`["${'['.repeat(1000)}\\"[["]`)).toEqual({ value: [`${'['.repeat(1000)}"[[`] })
  })

  it('locates a fault past the first MiB as a single pass over the whole text does, characters cut between windows included', async () => {
    // 'é' is two bytes: shifted by one byte each time, one of them falls across the end of a MiB.
    for (const shift of [0, 1]) {
      const text = `[${' '.repeat(shift)}"${'é'.repeat(800_000)}", {"slug": }]`
      const whole = new JsonChecker()
      whole.write(Buffer.from(text))
      expect(await read(text)).toEqual({ message: `data.json: ${whole.end()!}` })
    }
  })

  it('refuses a file over the limit with one line naming the file, its size and the limit, before reading it', async () => {
    const path = join(dir, 'keys.json')
    await writeFile(path, Buffer.alloc(MAX_FILE_BYTES + 1, 0x20))
    await expect(readJsonFile(path, 'keys.json')).rejects.toThrow(`keys.json: ${MAX_FILE_BYTES + 1} bytes, over the limit of ${MAX_FILE_BYTES} (8 MiB) for a data file: larger data belongs in PostgreSQL`)
  })

  it('refuses a named pipe in place of the file at once, instead of waiting for a writer', async () => {
    const path = join(dir, 'pipe.json')
    execFileSync('mkfifo', [path])
    await expect(readJsonFile(path, 'pipe.json')).rejects.toThrow(`pipe.json: ${path} is not a regular file (a named pipe)`)
  })

  it('refuses a directory, and names a missing file', async () => {
    await mkdir(join(dir, 'folder.json'))
    await expect(readJsonFile(join(dir, 'folder.json'), 'folder.json')).rejects.toThrow(/^folder\.json: .* is not a regular file \(a directory\)$/)
    await expect(readJsonFile(join(dir, 'none.json'), 'none.json')).rejects.toThrow(/^none\.json: cannot read .*none\.json \(ENOENT\)$/)
  })

  it('follows a symbolic link to a regular file (Kubernetes mounts are links)', async () => {
    await writeFile(join(dir, 'real.json'), '[true]')
    await symlink(join(dir, 'real.json'), join(dir, 'link.json'))
    expect(await readJsonFile(join(dir, 'link.json'), 'link.json')).toEqual([true])
  })
})

describe('the JSON reader against JSON.parse, on generated texts', () => {
  const verdictOf = (text: string) => {
    try {
      return { value: JSON.parse(text) as unknown }
    } catch {
      return { refused: true }
    }
  }
  const readText = async (text: string) => {
    const result = await read(text)
    return 'value' in result ? result : { refused: true as const, message: result.message }
  }

  it('reads every valid text as JSON.parse does', async () => {
    await fc.assert(fc.asyncProperty(fc.json(), async (text) => {
      expect(await readText(text)).toStrictEqual(verdictOf(text))
    }), { numRuns: 200 })
  })

  it('refuses what JSON.parse refuses, with a located message that never quotes the text', async () => {
    // Valid texts spoiled at one place, and texts made of JSON's own characters.
    const spoiled = fc.tuple(fc.json(), fc.nat(), fc.constantFrom('', ',', ']', '}', '"', ':', 'x', '\\', '\n', '-', '.', 'e')).map(([text, at, insert]) => {
      const cut = at % (text.length + 1)
      return text.slice(0, cut) + insert + text.slice(cut + (insert === '' ? 1 : 0))
    })
    const symbols = fc.array(fc.constantFrom('[', ']', '{', '}', '"', ':', ',', '1', '-', 'e', '.', 'true', 'nul', ' ', '\\', 'é')).map((parts) => parts.join(''))
    await fc.assert(fc.asyncProperty(fc.oneof(spoiled, symbols), async (text) => {
      const verdict = verdictOf(text)
      const result = await readText(text)
      if ('value' in verdict) expect(result).toStrictEqual(verdict)
      else expect('message' in result && result.message).toMatch(/^data\.json: (not valid JSON at line \d+, column \d+|nested deeper than \d+ levels at line \d+, column \d+)/)
    }), { numRuns: 300 })
  })
})
