import { constants } from 'node:fs'
import { open, rename, writeFile, type FileHandle } from 'node:fs/promises'
import { isUtf8 } from 'node:buffer'
import { JsonChecker, bomLength } from './json-syntax.js'
import { createSlicer } from './slices.js'

/**
 * The largest data file read. Files are for local work, CI and data a ConfigMap or a Secret holds:
 * at this size JSON.parse holds the event loop within the budget of a reload (docs/data.md). Larger
 * data belongs in PostgreSQL, which is read a batch at a time.
 */
export const MAX_FILE_BYTES = 8 * 1024 * 1024

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
 * - JSON.parse's own message is never shown: it quotes the text, and for an unexpected token (a
 *   trailing comma, `tru`) gives no position. A text it refuses is located by a JsonChecker instead.
 */
export async function readJsonFile (path: string, label: string): Promise<unknown> {
  const handle = await openDataFile(path, label, MAX_FILE_BYTES)
  let bytes: Buffer
  try {
    bytes = await handle.readFile()
  } finally {
    await handle.close()
  }
  if (isUtf8(bytes)) {
    try {
      return JSON.parse(bytes.toString('utf8', bomLength(bytes)))
    } catch {
      // Located below.
    }
  }
  // A MiB at a time, with a turn of the event loop between: the checker walks every byte, and would
  // hold requests for the whole of a file at the limit (BENCHMARKS.md, "Data files refused").
  const checker = new JsonChecker()
  const slicer = createSlicer()
  for (let at = 0; at < bytes.length && checker.write(bytes.subarray(at, at + CHECK_WINDOW_BYTES)); at += CHECK_WINDOW_BYTES) {
    if (slicer.overdue()) await slicer.pause()
  }
  throw new Error(`${label}: ${checker.end() ?? 'not valid JSON'}`)
}

const CHECK_WINDOW_BYTES = 1024 * 1024

/**
 * Opens a data file to read: a regular file (or a link to one) of at most `maxBytes` (the server's
 * MAX_FILE_BYTES; none for npm run db -- import, which streams), or an Error naming the file
 * (`label`) and what is wrong.
 */
export async function openDataFile (path: string, label: string, maxBytes: number | undefined): Promise<FileHandle> {
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
    if (maxBytes !== undefined && stat.size > maxBytes) {
      throw new Error(`${label}: ${stat.size} bytes, over the limit of ${maxBytes} (${maxBytes / 1024 / 1024} MiB) for a data file: larger data belongs in PostgreSQL`)
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
