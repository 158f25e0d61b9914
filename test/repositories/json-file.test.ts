import { execFileSync } from 'node:child_process'
import { mkdtemp, mkdir, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { readJsonArray, readJsonFile } from '../../src/repositories/json-file.js'
import { MAX_DEPTH } from '../../src/repositories/json-syntax.js'

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

  it(`refuses nesting deeper than ${MAX_DEPTH} levels, even 100,000 deep, without overflowing the stack`, async () => {
    expect(await read(`${'['.repeat(100_000)}${']'.repeat(100_000)}`)).toEqual({ message: `data.json: nested deeper than ${MAX_DEPTH} levels at line 1, column ${MAX_DEPTH + 1}` })
    expect(await read(`${'['.repeat(MAX_DEPTH)}${']'.repeat(MAX_DEPTH)}`)).toHaveProperty('value')
    // Brackets inside strings do not count.
    expect(await read(`["${'['.repeat(1000)}\\"[["]`)).toEqual({ value: [`${'['.repeat(1000)}"[[`] })
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

describe('reading a large JSON array a batch at a time', () => {
  /** The batches readJsonArray hands over for `content`, and what it read whole instead, if anything. */
  async function batches (content: string) {
    const path = join(dir, 'data.json')
    await writeFile(path, content)
    const handed: unknown[][] = []
    const whole = await readJsonArray(path, 'data.json', (values) => { handed.push(values) })
    return { handed, whole }
  }

  it('hands over every element of a file of many batches, in order, never reading it whole', async () => {
    const records = Array.from({ length: 5000 }, (_, i) => ({ name: `key-${i}`, note: 'x'.repeat(40), nested: [i, { i }] }))
    const { handed, whole } = await batches(JSON.stringify(records))
    expect(whole).toBeUndefined()
    expect(handed.length).toBeGreaterThan(2)
    expect(handed.flat()).toEqual(records)
  })

  it.each([
    ['a repeated comma between batches', (text: string) => text.replace('},{"name":"key-4000"', '},,{"name":"key-4000"')],
    ['a trailing comma', (text: string) => text.replace(/]$/, ',]')],
    ['a missing comma', (text: string) => text.replace('},{"name":"key-4000"', '}{"name":"key-4000"')]
  ])('leaves %s to the whole read, which says where it is', async (_, spoil) => {
    const records = Array.from({ length: 5000 }, (_, i) => ({ name: `key-${i}`, note: 'x'.repeat(40) }))
    const path = join(dir, 'data.json')
    await writeFile(path, spoil(JSON.stringify(records)))
    await expect(readJsonArray(path, 'data.json', () => {})).rejects.toThrow(/^data\.json: not valid JSON at line 1, column \d+/)
  })

  it('hands over numbers and literals that the end of a read cuts in two', async () => {
    const values = Array.from({ length: 150_000 }, (_, i) => i % 10 === 0 ? null : 10_000_000 + i)
    // The file is read 1 MiB at a time: spaces move a value across the end of the first read.
    let text = JSON.stringify(values)
    while (/[,\] ]/.test(text.slice(1024 * 1024 - 1, 1024 * 1024 + 1))) text = `[ ${text.slice(1)}`
    const { handed, whole } = await batches(text)
    expect(whole).toBeUndefined()
    expect(handed.flat()).toEqual(values)
  })

  it('hands over strings that are elements, of one batch or of many', async () => {
    for (const values of [['a'], Array.from({ length: 20_000 }, (_, i) => `value "${i}" ], {`)]) {
      const { handed, whole } = await batches(JSON.stringify(values))
      expect(whole).toBeUndefined()
      expect(handed.flat()).toEqual(values)
    }
  })

  it.each([
    ['an object', '{"keys": [{"name": "a"}]}', {}],
    ['a string', ' "abc" ', 'abc'],
    ['a number', '12.5e1\n', 125],
    ['null', 'null', null]
  ])('answers a file that is valid JSON but not an array (%s) with a stand-in of the same type, for the schema to name', async (_case, text, value) => {
    expect(await batches(text)).toEqual({ handed: [], whole: value })
  })

  it('answers a long string with its first characters, more than a message quotes, without reading it whole', async () => {
    const { whole } = await batches(`"${'\\u00e9'.repeat(100)}${'x'.repeat(10_000_000)}"`)
    expect(whole).toMatch(new RegExp(`^${'é'.repeat(100)}x+$`))
    expect((whole as string).length).toBeLessThan(1024)
  })

  it('refuses an element of more than 1 MiB before it parses it, naming it', async () => {
    const path = join(dir, 'data.json')
    await writeFile(path, `[1, "two", {"name": "${'k'.repeat(3 * 1024 * 1024)}"}, 4]`)
    await expect(readJsonArray(path, 'data.json', () => {})).rejects.toThrow(/^data\.json: \[2\]: a record of more than 1 MiB$/)
  })
})

