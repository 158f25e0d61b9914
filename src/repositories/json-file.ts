import { constants } from 'node:fs'
import { open, rename, writeFile, type FileHandle } from 'node:fs/promises'
import { isUtf8 } from 'node:buffer'

/**
 * The largest file read: 256 MiB, twice an organization of a million members (130 MB). The other
 * files are read whole, and V8 cannot hold a string of 512 MiB at all; organizations.json is read
 * in slices (organizations-file.ts), but its members are held serialized, as large as the file.
 */
const MAX_FILE_BYTES = 256 * 1024 * 1024

/**
 * The deepest nesting of arrays and objects accepted: the data files need 4 levels. Deeper input
 * is refused before anything walks it, since walking it recursively overflows the stack.
 */
export const MAX_DEPTH = 64

export const UTF8_BOM = [0xef, 0xbb, 0xbf]

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
 * - A syntax error is located by our own scan (line and column): not every Node.js version's
 *   JSON.parse message gives a position, and its message quotes the text.
 */
export async function readJsonFile (path: string, label: string): Promise<unknown> {
  const bytes = await readRegularFile(path, label)
  const start = UTF8_BOM.every((byte, i) => bytes[i] === byte) ? UTF8_BOM.length : 0
  if (!isUtf8(bytes.subarray(start))) {
    throw new Error(`${label}: not valid UTF-8 at byte ${start + firstInvalidUtf8Byte(bytes.subarray(start))}`)
  }
  const text = bytes.toString('utf8', start)
  const tooDeep = firstTooDeep(text)
  if (tooDeep >= 0) throw new Error(`${label}: nested deeper than ${MAX_DEPTH} levels at ${lineAndColumn(text, tooDeep)}`)
  try {
    return JSON.parse(text)
  } catch {
    const error = findSyntaxError(text)
    throw new Error(`${label}: not valid JSON at ${lineAndColumn(text, error.at)}: ${error.problem}`)
  }
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

/** `line 3, column 14` of a UTF-16 offset; the column counts characters, as editors do. */
function lineAndColumn (text: string, offset: number): string {
  const lineStart = text.lastIndexOf('\n', offset - 1) + 1
  let line = 1
  for (let i = text.indexOf('\n'); i >= 0 && i < lineStart; i = text.indexOf('\n', i + 1)) line++
  return `line ${line}, column ${[...text.slice(lineStart, offset)].length + 1}`
}

/**
 * The offset of the bracket that opens level MAX_DEPTH + 1, or -1. Linear and without recursion;
 * strings are skipped (brackets inside them do not count). The text may be invalid JSON:
 * JSON.parse judges that after.
 */
function firstTooDeep (text: string): number {
  let depth = 0
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c === 0x22) {
      // To the closing quote: one preceded by an even number of backslashes.
      for (;;) {
        i = text.indexOf('"', i + 1)
        if (i < 0) return -1
        let backslashes = 0
        while (text.charCodeAt(i - 1 - backslashes) === 0x5c) backslashes++
        if (backslashes % 2 === 0) break
      }
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > MAX_DEPTH) return i
    } else if (c === 0x5d || c === 0x7d) {
      depth--
    }
  }
  return -1
}

/** Where a UTF-8 sequence first goes wrong (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF). */
function firstInvalidUtf8Byte (bytes: Uint8Array): number {
  for (let i = 0; i < bytes.length;) {
    const lead = bytes[i]!
    if (lead < 0x80) { i++; continue }
    const length = lead >= 0xc2 && lead <= 0xdf ? 2 : lead >= 0xe0 && lead <= 0xef ? 3 : lead >= 0xf0 && lead <= 0xf4 ? 4 : 0
    if (length === 0) return i
    // The second byte's range depends on the lead byte (this is what excludes the overlong forms,
    // the surrogates and what lies past U+10FFFF); the others are plain continuation bytes.
    const low = lead === 0xe0 ? 0xa0 : lead === 0xf0 ? 0x90 : 0x80
    const high = lead === 0xed ? 0x9f : lead === 0xf4 ? 0x8f : 0xbf
    for (let k = 1; k < length; k++) {
      const byte = bytes[i + k]
      if (byte === undefined || byte < (k === 1 ? low : 0x80) || byte > (k === 1 ? high : 0xbf)) return i
    }
    i += length
  }
  return bytes.length
}

const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y
const LITERAL = /true|false|null/y
const ESCAPE = /\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})/y

/**
 * The first syntax error of a text JSON.parse refused (RFC 8259), found by a scan of our own:
 * iterative, so that nesting costs no stack.
 */
function findSyntaxError (text: string): { at: number, problem: string } {
  const closers: string[] = []
  let i = 0
  const skipSpace = () => { while (i < text.length && ' \t\n\r'.includes(text[i]!)) i++ }
  const matches = (pattern: RegExp) => {
    pattern.lastIndex = i
    if (!pattern.test(text)) return false
    i = pattern.lastIndex
    return true
  }
  /** Moves past a string at i; answers what is wrong with it, if anything. */
  const scanString = (): string | undefined => {
    for (i++; i < text.length;) {
      const c = text.charCodeAt(i)
      if (c === 0x22) { i++; return undefined }
      if (c < 0x20) return 'a control character inside a string'
      if (c === 0x5c) {
        if (!matches(ESCAPE)) return 'an invalid escape sequence'
      } else {
        i++
      }
    }
    return 'a string that is never closed'
  }
  /** After `{` or `,` in an object: a name and a colon. */
  const scanName = (): string | undefined => {
    skipSpace()
    if (text[i] !== '"') return 'expected a property name in double quotes'
    const problem = scanString()
    if (problem) return problem
    skipSpace()
    if (text[i] !== ':') return "expected ':' after a property name"
    i++
    return undefined
  }

  for (;;) {
    // A value is expected at i.
    skipSpace()
    const c = text[i]
    let problem: string | undefined
    if (c === '{' || c === '[') {
      i++
      skipSpace()
      const closer = c === '{' ? '}' : ']'
      if (text[i] !== closer) {
        closers.push(closer)
        if (c === '{' && (problem = scanName())) return { at: i, problem }
        continue
      }
      i++
    } else if (c === '"') {
      if ((problem = scanString())) return { at: i, problem }
    } else if (!matches(NUMBER) && !matches(LITERAL)) {
      return { at: i, problem: i >= text.length ? 'the text ends where a value is expected' : 'expected a value' }
    }
    // After a value: a comma, the end of its container, or the end of the text.
    for (;;) {
      skipSpace()
      const closer = closers.at(-1)
      if (closer === undefined) {
        // (At the end of the text, our scan found no fault the parser did: say only where it stopped.)
        return { at: i, problem: i < text.length ? 'unexpected text after the end of the value' : 'refused by the JSON parser' }
      }
      if (text[i] === closer) { closers.pop(); i++; continue }
      if (text[i] !== ',') return { at: i, problem: `expected ',' or '${closer}'` }
      i++
      if (closer === '}' && (problem = scanName())) return { at: i, problem }
      break
    }
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
 * Reads a file that holds a JSON array a batch of elements at a time, handing each batch to
 * `onBatch` with the index of its first element: a file of a million records is never one string,
 * one JSON.parse nor a million objects at once, and the event loop gets a turn between windows.
 * Anything the scan does not expect (bad syntax, bad UTF-8, not an array, nesting too deep) is left
 * to readJsonFile, which reads the file whole and says where; its value is answered then (the caller
 * validates it as usual), or undefined when the elements were all handed over.
 */
export async function readJsonArray (path: string, label: string, onBatch: (values: unknown[], first: number) => void | Promise<void>): Promise<unknown> {
  const handle = await openRegularFile(path, label)
  try {
    if (await scanArray(handle, onBatch)) return undefined
  } finally {
    await handle.close()
  }
  return await readJsonFile(path, label)
}

/** False when the file is not what the scan expects (then nothing, or only whole batches, were handed over). */
async function scanArray (handle: FileHandle, onBatch: (values: unknown[], first: number) => void | Promise<void>): Promise<boolean> {
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
        if (c === 0x5c) escaped = true
        else inString = false
        continue
      }
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
        elements++
      }
      if (c === 0x22) inString = true
      else if (c === 0x7b || c === 0x5b) {
        if (++depth > MAX_DEPTH) return false
        continue
      } else if (c === 0x7d || c === 0x5d) {
        depth--
      } else if (depth === 0) {
        // A number or a literal: to the next delimiter.
        while (pos + 1 < filled && !' \t\r\n,]'.includes(String.fromCharCode(window[pos + 1]!))) pos++
        if (pos + 1 === filled) {
          pos++
          break
        }
      }
      if (depth === 0) {
        afterValue = true
        lastEnd = pos + 1
        if (lastEnd - batchStart >= ARRAY_BATCH_BYTES && !await flush(lastEnd)) return false
      }
    }
    // Keep the elements not parsed yet for the next read.
    const keep = batchStart >= 0 ? batchStart : filled
    const carried = filled - keep
    window = carryOver(window, keep, filled)
    if (batchStart >= 0) {
      lastEnd = lastEnd < 0 ? -1 : lastEnd - keep
      batchStart = 0
    }
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
