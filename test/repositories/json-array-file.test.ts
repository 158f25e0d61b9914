import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import fc from 'fast-check'
import { JsonArrayWriter, MAX_ELEMENT_BYTES, NotAnArray, readJsonArray } from '../../src/repositories/json-array-file.js'
import { readJsonFile, writeJsonFile } from '../../src/repositories/json-file.js'
import { MAX_DEPTH } from '../../src/repositories/json-syntax.js'

let dir: string
beforeEach(async () => { dir = await mkdtemp(join(tmpdir(), 'json-array-file-')) })
afterEach(() => rm(dir, { recursive: true, force: true }))

/** What readJsonArray hands over for a file holding `content`: the elements, or what it throws. */
async function stream (content: string | Buffer) {
  const path = join(dir, 'data.json')
  await writeFile(path, content)
  const elements: unknown[] = []
  try {
    for await (const batch of readJsonArray(path, 'data.json')) elements.push(...batch)
    return { value: elements as unknown }
  } catch (error) {
    if (error instanceof NotAnArray) return { notArray: error.value }
    return { message: (error as Error).message }
  }
}

/** What the server's reader makes of the same file, in the terms of `stream`: an object that is no array is named, never read. */
async function whole (content: string | Buffer) {
  const path = join(dir, 'data.json')
  await writeFile(path, content)
  try {
    const value = await readJsonFile(path, 'data.json')
    if (Array.isArray(value)) return { value }
    return { notArray: value !== null && typeof value === 'object' ? {} : value }
  } catch (error) {
    return { message: (error as Error).message }
  }
}

/** A string element that ends `shift` bytes before or after the end of the first read (64 KiB), to put what follows it across reads. */
const padding = (shift: number) => JSON.stringify('p'.repeat(64 * 1024 - 3 + shift))

describe('reading a JSON array a read at a time', () => {
  it('hands over the elements JSON.parse finds, whatever they are', async () => {
    const text = '\ufeff [ {"a": "é\\"]}", "b": [1, {"c": null}]}, "x\\\\", -1.5e3, true, null, [], {} ]\n'
    expect(await stream(Buffer.from(text))).toEqual({ value: JSON.parse(text.slice(1)) })
    expect(await stream('[]')).toEqual({ value: [] })
  })

  it('reads elements cut between two reads, at every byte of the cut', async () => {
    const rest = '{"name": "a\\"b\\\\", "list": [1, [2, "]"]]}, "é\\u00e9", 12345, false]'
    for (let shift = -40; shift <= 40; shift++) {
      const text = `[${padding(shift)}, ${rest}`
      expect(await stream(text), `shift ${shift}`).toEqual({ value: JSON.parse(text) })
    }
  })

  it('refuses a file as the server refuses it, with the same message, the fault past the first read included', async () => {
    for (const text of ['[1, 2,]', '[1 2]', '[01]', '["a\\x"]', '[{"a": }]', '[1] x', '[1]]', '', '  ', '[', '[1,', '["abc', '[tru]', '{"a": 1', 'nul']) {
      expect(await stream(text), text).toEqual(await whole(text))
      const far = text.startsWith('[') ? `[${padding(0)}, ${text.slice(1)}` : text
      expect(await stream(far), far).toEqual(await whole(far))
    }
    const bytes = Buffer.from(`[${padding(5)}, "éé"]`)
    bytes[bytes.length - 4] = 0xff
    expect(await stream(bytes)).toEqual({ message: `data.json: not valid UTF-8 at byte ${bytes.length - 4}` })
  })

  it('says what a valid file that is no array holds: an object without its content, a scalar as it is', async () => {
    expect(await stream('{"keys": [1, 2]}')).toEqual({ notArray: {} })
    expect(await stream(' "text" ')).toEqual({ notArray: 'text' })
    expect(await stream('\ufeff42')).toEqual({ notArray: 42 })
    expect(await stream('null')).toEqual({ notArray: null })
  })

  it('refuses an element nested deeper than the checker follows (no record is), where the server reads it and refuses the record', async () => {
    const deep = `[1, ${'['.repeat(MAX_DEPTH)}${']'.repeat(MAX_DEPTH)}]`
    expect(await stream(deep)).toEqual({ message: `data.json: nested deeper than ${MAX_DEPTH} levels at line 1, column ${5 + MAX_DEPTH - 1}` })
    expect(await whole(deep)).toEqual({ value: JSON.parse(deep) })
  })

  it('refuses an element over MAX_ELEMENT_BYTES without holding more of it, naming it', async () => {
    const path = join(dir, 'data.json')
    await writeFile(path, `[1, "${'x'.repeat(MAX_ELEMENT_BYTES + 1)}"]`)
    const read = async () => { for await (const _batch of readJsonArray(path, 'data.json')) { /* read on */ } }
    await expect(read()).rejects.toThrow(`data.json: [1]: an element of more than ${MAX_ELEMENT_BYTES} bytes (64 MiB), the most one record may take`)
  })

  it('refuses a directory and names a missing file as the server does', async () => {
    const read = async (name: string) => { for await (const _batch of readJsonArray(join(dir, name), name)) { /* read on */ } }
    await mkdir(join(dir, 'folder.json'))
    await expect(read('folder.json')).rejects.toThrow(/^folder\.json: .* is not a regular file \(a directory\)$/)
    await expect(read('none.json')).rejects.toThrow(/^none\.json: cannot read .*none\.json \(ENOENT\)$/)
  })
})

describe('the streaming reader against the server\'s, on generated texts', () => {
  it('reads every valid text as the server does, elements across reads included', async () => {
    await fc.assert(fc.asyncProperty(fc.array(fc.jsonValue()), fc.integer({ min: -20, max: 20 }), fc.constantFrom(undefined, 0, 2, '\t'), async (elements, shift, indent) => {
      const text = JSON.stringify([JSON.parse(padding(shift)), ...elements], null, indent)
      expect(await stream(text)).toStrictEqual(await whole(text))
    }), { numRuns: 150 })
  })

  it('refuses what the server refuses, with the same message', async () => {
    const spoiled = fc.tuple(fc.json(), fc.nat(), fc.constantFrom('', ',', '[', ']', '{', '}', '"', ':', 'x', '\\', '\n', '-', '.', 'e'), fc.boolean()).map(([text, at, insert, far]) => {
      const cut = at % (text.length + 1)
      const spoilt = text.slice(0, cut) + insert + text.slice(cut + (insert === '' ? 1 : 0))
      // Far: after an element that fills the first read.
      return far && spoilt.startsWith('[') ? `[${padding(0)},${spoilt.slice(1)}` : spoilt
    })
    await fc.assert(fc.asyncProperty(spoiled, async (text) => {
      expect(await stream(text)).toStrictEqual(await whole(text))
    }), { numRuns: 300 })
  })
})

describe('writing a JSON array an element at a time', () => {
  it('writes what writeJsonFile writes, byte for byte, and nothing at the path until it commits', async () => {
    await fc.assert(fc.asyncProperty(fc.array(fc.jsonValue(), { maxLength: 20 }), async (elements) => {
      await rm(join(dir, 'streamed.json'), { force: true })
      await writeJsonFile(join(dir, 'whole.json'), elements)
      const writer = await JsonArrayWriter.create(join(dir, 'streamed.json'))
      for (const element of elements) await writer.write(element)
      expect(await readdir(dir)).not.toContain('streamed.json')
      await writer.commit()
      expect((await readFile(join(dir, 'streamed.json'))).equals(await readFile(join(dir, 'whole.json')))).toBe(true)
    }), { numRuns: 100 })
  })

  it('leaves the file there as it was when discarded', async () => {
    await writeFile(join(dir, 'data.json'), '[1]\n')
    const writer = await JsonArrayWriter.create(join(dir, 'data.json'))
    await writer.write({ a: 2 })
    await writer.discard()
    expect(await readdir(dir)).toEqual(['data.json'])
    expect(await readFile(join(dir, 'data.json'), 'utf8')).toBe('[1]\n')
  })
})
