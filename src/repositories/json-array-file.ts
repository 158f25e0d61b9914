import { open, rename, rm, type FileHandle } from 'node:fs/promises'
import { JsonChecker, bomLength } from './json-syntax.js'
import { openDataFile } from './json-file.js'

/**
 * Read 64 KiB at a time: each read's whole elements are one JSON.parse, the parser V8 has natively.
 * Larger reads made larger garbage, collected later (docs/performance.md, "Reading and checking JSON files").
 */
const CHUNK_BYTES = 64 * 1024

/**
 * The largest element read, with room for the largest organization (docs/postgresql.md, "Export and
 * import at gateway scale"). A larger one would be held whole before it is parsed (and a value of some
 * hundreds of MB runs into V8's longest string), so it is refused, naming the element, before it is.
 */
export const MAX_ELEMENT_BYTES = 64 * 1024 * 1024

/** The top-level value of a data file that is valid JSON but no array: what validateRecords names. */
export class NotAnArray extends Error {
  constructor (readonly value: unknown) {
    super('not an array')
  }
}

/**
 * The elements of the JSON array in the file at `path`, a batch at a time, for files of any size:
 * `npm run db -- import`'s reader, where the server reads a file whole (readJsonFile, at most
 * MAX_FILE_BYTES). The file is the same, and so is what is said of it: the same value as JSON.parse
 * of the whole text, and for a text JSON.parse refuses (or that is not UTF-8), the JsonChecker's
 * message naming `label`. The checker reads every byte once, and says where each element of the
 * array starts and ends; JSON.parse makes the elements of each read. One difference: an element
 * nested deeper than MAX_DEPTH (no record is) is refused here. A file whose value is no array
 * throws NotAnArray with the value (an object as `{}`: a message names it, never its content).
 *
 * Memory is a chunk and the element that spans chunks, at most MAX_ELEMENT_BYTES.
 */
export async function * readJsonArray (path: string, label: string): AsyncGenerator<unknown[]> {
  const handle = await openDataFile(path, label, undefined)
  try {
    const checker = new JsonChecker()
    /** The bytes of the element open at the end of the last chunk, from its start. */
    let pending: Buffer[] = []
    let pendingBytes = 0
    let position = 0
    // One buffer read into again and again: what an element open at its end needs is copied out.
    const chunk = Buffer.allocUnsafe(CHUNK_BYTES)
    for (;;) {
      const { bytesRead } = await handle.read(chunk, 0, CHUNK_BYTES, position)
      if (bytesRead === 0) break
      const bytes = chunk.subarray(0, bytesRead)
      const before = checker.elements
      const at = position
      position += bytesRead
      if (!checker.write(bytes)) break
      if (!checker.isArray) continue
      // The element open at the last chunk's end, ended in this one or not, within its bound.
      const openBytes = pendingBytes + (checker.elements > before ? checker.firstEnd - at : checker.openStart >= 0 ? bytes.length : 0)
      if (pending.length > 0 && openBytes > MAX_ELEMENT_BYTES) {
        throw new Error(`${label}: [${before}]: an element of more than ${MAX_ELEMENT_BYTES} bytes (${MAX_ELEMENT_BYTES / 1024 / 1024} MiB), the most one record may take`)
      }
      if (checker.elements > before) {
        const whole = pending.length > 0
          ? Buffer.concat([...pending, bytes.subarray(0, checker.lastEnd - at)])
          : bytes.subarray(checker.firstStart - at, checker.lastEnd - at)
        pending = []
        pendingBytes = 0
        // Checked already: JSON.parse finds the same elements.
        yield JSON.parse(`[${whole.toString('utf8')}]`) as unknown[]
      }
      if (checker.openStart >= 0) {
        const open = Buffer.from(bytes.subarray(Math.max(checker.openStart - at, 0)))
        pending.push(open)
        pendingBytes += open.length
      }
    }
    const fault = checker.end()
    if (fault !== undefined) throw new Error(`${label}: ${fault}`)
    if (checker.isArray) return
    // Valid JSON, no array. An object is named, never shown; a scalar (a string, at most) is read whole.
    if (checker.isObject) throw new NotAnArray({})
    const { buffer } = await handle.read({ buffer: Buffer.alloc((await handle.stat()).size), position: 0 })
    throw new NotAnArray(JSON.parse(buffer.toString('utf8', bomLength(buffer))))
  } finally {
    await handle.close()
  }
}

/** What a writer gathers before it writes: a write a MiB, each awaited, so that the file is the only buffer. */
const WRITE_BYTES = 1024 * 1024

/**
 * Writes a JSON array an element at a time, byte for byte as writeJsonFile writes the whole array
 * (`JSON.stringify(records, null, 2)` and a line break), to `path.tmp`: `commit()` renames it over
 * `path`, `discard()` removes it.
 */
export class JsonArrayWriter {
  private pending = '['
  private count = 0

  private constructor (private readonly path: string, private readonly handle: FileHandle) {}

  static async create (path: string): Promise<JsonArrayWriter> {
    return new JsonArrayWriter(path, await open(`${path}.tmp`, 'w'))
  }

  async write (element: unknown) {
    // JSON.stringify of an element in an array of indent 2: its own text, every line indented once more
    // (a string holds no raw line break: JSON escapes it).
    this.pending += `${this.count++ === 0 ? '\n  ' : ',\n  '}${JSON.stringify(element, null, 2).replaceAll('\n', '\n  ')}`
    if (this.pending.length >= WRITE_BYTES) await this.flush()
  }

  /** Ends the array and renames the file over `path`. */
  async commit () {
    this.pending += this.count === 0 ? ']\n' : '\n]\n'
    await this.flush()
    await this.handle.close()
    await rename(`${this.path}.tmp`, this.path)
  }

  async discard () {
    await this.handle.close().catch(() => {})
    await rm(`${this.path}.tmp`, { force: true })
  }

  private async flush () {
    const bytes = Buffer.from(this.pending)
    this.pending = ''
    // A write may take part of what it is given.
    for (let at = 0; at < bytes.length;) at += (await this.handle.write(bytes, at)).bytesWritten
  }
}
