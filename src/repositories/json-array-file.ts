import { isUtf8 } from 'node:buffer'
import { open, rename, rm, type FileHandle } from 'node:fs/promises'
import { JsonChecker, bomLength, isSpace } from './json-syntax.js'
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

// Where the splitter is: before the array's `[`, after it, after a comma, in an element, after an
// element, after the `]`.
const BEFORE = 0
const OPENED = 1
const NEXT_VALUE = 2
const IN_ELEMENT = 3
const AFTER_ELEMENT = 4
const CLOSED = 5

/**
 * Cuts the bytes of a top-level JSON array into its elements, a chunk at a time: it follows strings
 * and brackets only, and leaves the elements themselves to JSON.parse. It checks what lies between
 * them (one comma, spaces) and around the array (spaces, a byte order mark first). It only ever says
 * "not as expected": the message locating a fault is the JsonChecker's, as for a file the server reads.
 */
class ArraySplitter {
  state = BEFORE
  /** The elements whole so far. */
  count = 0
  failed = false
  notArray = false
  private depth = 0
  private inString = false
  private escaped = false
  /** Per chunk: where the first element that starts in it starts, where its first and last whole elements end. */
  firstStart = -1
  firstEnd = -1
  lastEnd = -1
  /** Where the element still open at the chunk's end started in it; -1 when it started in an earlier chunk. */
  openStart = -1

  /** Reads `bytes`, the next chunk (`first`: the file's first). */
  write (bytes: Buffer, first: boolean) {
    this.firstStart = this.firstEnd = this.lastEnd = this.openStart = -1
    const n = bytes.length
    let i = first ? bomLength(bytes) : 0
    while (i < n && !this.failed) {
      const c = bytes[i]!
      if (this.state === IN_ELEMENT) {
        if (this.inString) {
          // Most of a file: the bytes of strings, in a tight loop.
          if (this.escaped) this.escaped = false
          else if (c === 0x5c) this.escaped = true
          else if (c === 0x22) {
            this.inString = false
            if (this.depth === 0) this.endElement(i + 1, AFTER_ELEMENT)
          }
          i++
          while (i < n && this.inString && !this.escaped) {
            const d = bytes[i]!
            if (d === 0x22 || d === 0x5c) break
            i++
          }
          continue
        }
        if (c === 0x22) this.inString = true
        else if (c === 0x7b || c === 0x5b) this.depth++
        else if (c === 0x7d || c === 0x5d) {
          if (this.depth > 0) {
            if (--this.depth === 0) this.endElement(i + 1, AFTER_ELEMENT)
          } else if (c === 0x5d) {
            // A number or a literal, ended by the array's end.
            this.endElement(i, CLOSED)
          } else {
            this.failed = true
          }
        } else if (this.depth === 0 && (c === 0x2c || isSpace(c))) {
          this.endElement(i, c === 0x2c ? NEXT_VALUE : AFTER_ELEMENT)
        }
        i++
        continue
      }
      if (!isSpace(c)) {
        if (this.state === BEFORE) {
          if (c === 0x5b) this.state = OPENED
          else this.notArray = this.failed = true
        } else if (this.state === AFTER_ELEMENT) {
          if (c === 0x2c) this.state = NEXT_VALUE
          else if (c === 0x5d) this.state = CLOSED
          else this.failed = true
        } else if (this.state === CLOSED || c === 0x2c || (c === 0x5d && this.state === NEXT_VALUE)) {
          this.failed = true
        } else if (c === 0x5d) {
          this.state = CLOSED
        } else {
          // An element starts.
          this.state = IN_ELEMENT
          if (this.firstStart < 0) this.firstStart = i
          this.openStart = i
          this.inString = c === 0x22
          this.depth = c === 0x7b || c === 0x5b ? 1 : 0
        }
      }
      i++
    }
    if (this.state !== IN_ELEMENT) this.openStart = -1
  }

  private endElement (end: number, next: number) {
    this.count++
    if (this.firstEnd < 0) this.firstEnd = end
    this.lastEnd = end
    this.openStart = -1
    this.state = next
  }
}

/**
 * The elements of the JSON array in the file at `path`, a batch at a time, for files of any size:
 * `npm run db -- import`'s reader, where the server reads a file whole (readJsonFile, at most
 * MAX_FILE_BYTES). The file is the same, and so is what is said of it: the same value as JSON.parse
 * of the whole text, and for a text JSON.parse refuses (or that is not UTF-8), the JsonChecker's
 * message naming `label`, found by a second reading of the file from its start. A file whose value is
 * no array throws NotAnArray with the value (an object as `{}`: a message names it, never its content).
 *
 * Memory is a chunk and the element that spans chunks, at most MAX_ELEMENT_BYTES.
 */
export async function * readJsonArray (path: string, label: string): AsyncGenerator<unknown[]> {
  const handle = await openDataFile(path, label, undefined)
  try {
    const splitter = new ArraySplitter()
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
      const before = splitter.count
      splitter.write(bytes, position === 0)
      position += bytesRead
      if (splitter.failed) break
      // The element open at the last chunk's end, ended in this one or not, within its bound.
      const openBytes = pendingBytes + (splitter.count > before ? splitter.firstEnd : splitter.state === IN_ELEMENT ? bytes.length : 0)
      if (pending.length > 0 && openBytes > MAX_ELEMENT_BYTES) {
        throw new Error(`${label}: [${before}]: an element of more than ${MAX_ELEMENT_BYTES} bytes (${MAX_ELEMENT_BYTES / 1024 / 1024} MiB), the most one record may take`)
      }
      if (splitter.count > before) {
        const whole = pending.length > 0
          ? Buffer.concat([...pending, bytes.subarray(0, splitter.lastEnd)])
          : bytes.subarray(splitter.firstStart, splitter.lastEnd)
        pending = []
        pendingBytes = 0
        const elements = parseElements(whole)
        if (elements?.length !== splitter.count - before) {
          splitter.failed = true
          break
        }
        yield elements
      }
      if (splitter.state === IN_ELEMENT) {
        const open = Buffer.from(splitter.openStart >= 0 ? bytes.subarray(splitter.openStart) : bytes)
        pending.push(open)
        pendingBytes += open.length
      }
    }
    if (!splitter.failed && splitter.state === CLOSED) return
    throw await refusal(handle, label, splitter.notArray)
  } finally {
    await handle.close()
  }
}

/** The elements of a run of whole ones and what lies between them, or undefined when JSON.parse refuses them. */
function parseElements (bytes: Buffer): unknown[] | undefined {
  if (!isUtf8(bytes)) return undefined
  try {
    return JSON.parse(`[${bytes.toString('utf8')}]`) as unknown[]
  } catch {
    return undefined
  }
}

/**
 * Why a file is refused, once the splitter found it is not an array of valid JSON: the JsonChecker's
 * fault, from the start of the file; or, for a valid value that is no array, NotAnArray.
 */
async function refusal (handle: FileHandle, label: string, notArray: boolean): Promise<Error> {
  const checker = new JsonChecker()
  const chunk = Buffer.allocUnsafe(CHUNK_BYTES)
  let first: number | undefined
  for (let position = 0; ;) {
    const { bytesRead } = await handle.read(chunk, 0, CHUNK_BYTES, position)
    if (bytesRead === 0) break
    if (position === 0) first = chunk.subarray(bomLength(chunk), bytesRead).find((byte) => !isSpace(byte))
    position += bytesRead
    if (!checker.write(chunk.subarray(0, bytesRead))) break
  }
  const fault = checker.end()
  if (fault !== undefined || !notArray) return new Error(`${label}: ${fault ?? 'not valid JSON'}`)
  // Valid JSON, no array. An object is named, never shown; a scalar (a string, at most) is read whole.
  if (first === 0x7b) return new NotAnArray({})
  const { buffer } = await handle.read({ buffer: Buffer.alloc((await handle.stat()).size), position: 0 })
  return new NotAnArray(JSON.parse(buffer.toString('utf8', bomLength(buffer))))
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
