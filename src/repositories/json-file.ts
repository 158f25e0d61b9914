import { constants } from 'node:fs'
import { open, rename, writeFile, type FileHandle } from 'node:fs/promises'
import { isUtf8 } from 'node:buffer'
import { JsonChecker, MAX_DEPTH, UTF8_BOM } from './json-syntax.js'

/**
 * The largest file read: 256 MiB, twice an organization of a million members (130 MB). The other
 * files are read whole, and V8 cannot hold a string of 512 MiB at all; organizations.json is read
 * in slices (organizations-file.ts), but its members are held serialized, as large as the file.
 */
const MAX_FILE_BYTES = 256 * 1024 * 1024

const KINDS: Array<[keyof FileKindTests, string]> = [
  ['isDirectory', 'a directory'],
  ['isFIFO', 'a named pipe'],
  ['isSocket', 'a socket'],
  ['isCharacterDevice', 'a character device'],
  ['isBlockDevice', 'a block device']
]
type FileKindTests = Pick<Awaited<ReturnType<FileHandle['stat']>>, 'isDirectory' | 'isFIFO' | 'isSocket' | 'isCharacterDevice' | 'isBlockDevice'>

/**
 * Reads and parses one JSON data file. Throws an Error whose message is one line that names the
 * file (`label`) and says what is wrong and where (byte offset, or line and column); it never
 * quotes the file's content, which may hold key hashes.
 *
 * - Only a regular file is read (a symbolic link to one is fine: Kubernetes mounts are links). It is
 *   opened without blocking, so that a named pipe in its place is refused instead of waiting forever.
 * - At most MAX_FILE_BYTES.
 * - UTF-8 only (RFC 8259 section 8.1): invalid bytes are refused, not read as U+FFFD. A leading byte
 *   order mark is skipped, as the RFC allows: editors on Windows write one.
 * - Nesting deeper than MAX_DEPTH is refused.
 * - The text is checked (JsonChecker) before JSON.parse sees it: not every Node.js version's
 *   JSON.parse message gives a position, its message quotes the text, and a parse that fails at the
 *   end of a large file has built most of its objects first.
 */
export async function readJsonFile (path: string, label: string): Promise<unknown> {
  const bytes = await readRegularFile(path, label)
  const checker = new JsonChecker()
  checker.write(bytes)
  const fault = checker.end()
  if (fault !== undefined) throw new Error(`${label}: ${fault}`)
  return JSON.parse(bytes.toString('utf8', UTF8_BOM.every((byte, i) => bytes[i] === byte) ? UTF8_BOM.length : 0))
}

async function readRegularFile (path: string, label: string): Promise<Buffer> {
  const handle = await openRegularFile(path, label)
  try {
    return await handle.readFile()
  } finally {
    await handle.close()
  }
}

/**
 * Opens a data file to read: a regular file (or a link to one) of at most MAX_FILE_BYTES, or an
 * Error naming the file and what is wrong.
 */
export async function openRegularFile (path: string, label: string): Promise<FileHandle> {
  let handle: FileHandle
  try {
    // O_NONBLOCK: opening a named pipe would otherwise wait for a writer.
    handle = await open(path, constants.O_RDONLY | constants.O_NONBLOCK)
  } catch (err) {
    throw new Error(`${label}: cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? String(err)})`)
  }
  try {
    const stat = await handle.stat()
    if (!stat.isFile()) {
      const kind = KINDS.find(([test]) => stat[test]())?.[1] ?? 'not a file'
      throw new Error(`${label}: ${path} is not a regular file (${kind})`)
    }
    if (stat.size > MAX_FILE_BYTES) {
      throw new Error(`${label}: ${stat.size} bytes, over the limit of ${MAX_FILE_BYTES} (${MAX_FILE_BYTES / 1024 / 1024} MiB)`)
    }
    return handle
  } catch (error) {
    await handle.close()
    throw error
  }
}

/** Writes a data file whole: written beside it, then renamed over it, so a server reading the folder never sees half of it. */
export async function writeJsonFile (path: string, value: unknown) {
  await writeFile(`${path}.tmp`, JSON.stringify(value, null, 2) + '\n')
  await rename(`${path}.tmp`, path)
}

/** The elements of an array file are parsed this many bytes at a time: one JSON.parse a batch, small enough to die young. */
const ARRAY_BATCH_BYTES = 64 * 1024
const ARRAY_WINDOW_BYTES = 1024 * 1024

/**
 * The largest record (an element of an array file, a member of organizations.json) read: refused
 * before it is parsed, so that a record of a hundred megabytes costs a window, not several copies of
 * itself. The schemas bound every string of a record to at most 2,048 characters: a valid record takes
 * a few KiB, escapes and all.
 */
export const MAX_RECORD_BYTES = 1024 * 1024

/**
 * Reads a file that holds a JSON array a batch of elements at a time, handing each batch to
 * `onBatch` with the index of its first element: a file of a million records is never one string,
 * one JSON.parse nor a million objects at once, and the event loop gets a turn between windows.
 * Anything the scan does not expect (bad syntax, bad UTF-8, not an array, nesting too deep) is left
 * to readRefusedFile, which says where; a file that is valid JSON but not an array is answered as a
 * stand-in (the caller validates it as usual), and undefined when the elements were all handed over.
 */
export async function readJsonArray (path: string, label: string, onBatch: (values: unknown[], first: number) => void | Promise<void>): Promise<unknown> {
  const handle = await openRegularFile(path, label)
  try {
    return await scanArray(handle, label, onBatch) ? undefined : await readRefusedFile(handle, label)
  } finally {
    await handle.close()
  }
}

/** A window of readRefusedFile: checked in a few milliseconds, and the event loop gets a turn between reads. */
const CHECK_WINDOW_BYTES = 1024 * 1024
/** The bytes of a stand-in for a value that is not an array: more than a message quotes of it (80 characters). */
const STAND_IN_BYTES = 1024

/**
 * Says why a scan refused a data file (readJsonArray, organizations-file.ts): reads it again a
 * window at a time through a JsonChecker, in memory bounded whatever the file's size, and throws an
 * Error that names the file and its first fault. A file that is valid JSON but not an array is
 * answered as a stand-in of the same type for the caller's schema to name without reading it whole:
 * an object as `{}` (a message names an object, never quotes it), a string or a number from its first
 * STAND_IN_BYTES. A valid array is one the scan reads: the file changed while it was read, and
 * is refused as such (files.ts reads a file again when it changed during a read).
 */
export async function readRefusedFile (handle: FileHandle, label: string): Promise<unknown> {
  const checker = new JsonChecker()
  const window = Buffer.allocUnsafe(CHECK_WINDOW_BYTES)
  for (let position = 0; ;) {
    const { bytesRead } = await handle.read(window, 0, window.length, position)
    if (bytesRead === 0 || !checker.write(window.subarray(0, bytesRead))) break
    position += bytesRead
  }
  const fault = checker.end()
  if (fault !== undefined) throw new Error(`${label}: ${fault}`)
  const { bytesRead } = await handle.read(window, 0, STAND_IN_BYTES, checker.valueAt)
  if (window[0] === 0x7b) return {}
  if (window[0] === 0x5b) throw new Error(`${label}: changed while it was read`)
  return scalarOf(window.toString('utf8', 0, bytesRead))
}

/** The scalar a text starts with: whole, or a string or a number cut to what fits (never inside an escape). */
function scalarOf (text: string): unknown {
  for (let end = text.length; end > 0; end--) {
    for (const candidate of [text.slice(0, end), `${text.slice(0, end)}"`]) {
      try {
        return JSON.parse(candidate)
      } catch {
        // Cut inside an escape or an exponent: one character shorter.
      }
    }
  }
  return undefined
}

/**
 * False when the file is not what the scan expects (then nothing, or only whole batches, were handed
 * over); throws an Error naming an element larger than MAX_RECORD_BYTES.
 */
async function scanArray (handle: FileHandle, label: string, onBatch: (values: unknown[], first: number) => void | Promise<void>): Promise<boolean> {
  let window = Buffer.allocUnsafe(ARRAY_WINDOW_BYTES)
  let filled = 0
  let pos = 0
  let first = true
  // -1 before the opening bracket, then the depth inside the array; -2 after its closing bracket.
  let depth = -1
  let inString = false
  let escaped = false
  let batchStart = -1
  let lastEnd = -1
  let count = 0
  let elements = 0
  /** Where the element being read starts; -1 between elements. */
  let elementStart = -1
  // Between the elements of the array: a value just ended (a comma may follow), a comma was just
  // read (a value must follow). A batch's text holds its own commas, not those between batches.
  let afterValue = false
  let afterComma = false
  const flush = async (end: number) => {
    if (batchStart < 0 || lastEnd < 0) return true
    const bytes = window.subarray(batchStart, end)
    if (!isUtf8(bytes)) return false
    let values: unknown[]
    try {
      values = JSON.parse(`[${bytes.toString()}]`) as unknown[]
    } catch {
      return false
    }
    if (values.length !== elements) return false
    await onBatch(values, count)
    count += values.length
    elements = 0
    batchStart = -1
    lastEnd = -1
    return true
  }
  for (;;) {
    const { bytesRead } = await handle.read(window, filled, window.length - filled, null)
    if (bytesRead === 0) break
    filled += bytesRead
    if (first) {
      first = false
      if (UTF8_BOM.every((byte, i) => window[i] === byte)) pos = UTF8_BOM.length
    }
    for (; pos < filled; pos++) {
      let c = window[pos]!
      if (inString) {
        if (escaped) {
          escaped = false
          continue
        }
        // Most of a file: the inside of a string, up to a quote or a backslash, in a tight loop.
        while (c !== 0x22 && c !== 0x5c && ++pos < filled) c = window[pos]!
        if (pos === filled) break
        if (c === 0x5c) {
          escaped = true
          continue
        }
        inString = false
        // A string that is an element of the array ends it (below).
        if (depth !== 0) continue
      } else {
        if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) continue
        if (depth === -2) return false
        if (depth === -1) {
          if (c !== 0x5b) return false
          depth = 0
          continue
        }
        if (depth === 0) {
          if (c === 0x5d) {
            if (afterComma) return false
            depth = -2
            if (!await flush(lastEnd)) return false
            continue
          }
          if (c === 0x2c) {
            if (!afterValue) return false
            afterValue = false
            afterComma = true
            continue
          }
          // An element starts.
          if (afterValue) return false
          afterComma = false
          if (batchStart < 0) batchStart = pos
          elementStart = pos
          elements++
        }
        if (c === 0x22) {
          inString = true
          continue
        } else if (c === 0x7b || c === 0x5b) {
          if (++depth > MAX_DEPTH) return false
          continue
        } else if (c === 0x7d || c === 0x5d) {
          depth--
        } else if (depth === 0) {
          // A number or a literal: to the next delimiter. One the window cuts is read again from its
          // start once the next read has brought the rest (counted twice, it made the batch's count wrong).
          const scalarStart = pos
          while (pos + 1 < filled && !' \t\r\n,]'.includes(String.fromCharCode(window[pos + 1]!))) pos++
          if (pos + 1 === filled) {
            elements--
            pos = scalarStart
            break
          }
        }
      }
      if (depth === 0) {
        // An element ends.
        afterValue = true
        elementStart = -1
        lastEnd = pos + 1
        if (lastEnd - batchStart >= ARRAY_BATCH_BYTES && !await flush(lastEnd)) return false
      }
    }
    if (elementStart >= 0 && filled - elementStart > MAX_RECORD_BYTES) {
      throw new Error(`${label}: [${count + elements - 1}]: a record of more than ${MAX_RECORD_BYTES / 1024 / 1024} MiB`)
    }
    // Keep the elements not parsed yet for the next read.
    const keep = batchStart >= 0 ? batchStart : filled
    const carried = filled - keep
    window = carryOver(window, keep, filled)
    if (batchStart >= 0) {
      lastEnd = lastEnd < 0 ? -1 : lastEnd - keep
      batchStart = 0
    }
    if (elementStart >= 0) elementStart -= keep
    pos -= keep
    filled = carried
  }
  return depth === -2 && !inString
}

/**
 * Moves the bytes from `keep` to `filled` to the start of the window, for the next read to append
 * to; a window more than half full of them is replaced by one twice as large.
 */
export function carryOver (window: Buffer<ArrayBuffer>, keep: number, filled: number): Buffer<ArrayBuffer> {
  const target = (filled - keep) * 2 > window.length ? Buffer.allocUnsafe(window.length * 2) : window
  window.copy(target, 0, keep, filled)
  return target
}
