import { watch, type FSWatcher } from 'node:fs'
import { stat } from 'node:fs/promises'
import { join } from 'node:path'
import { RECORD_KINDS, validateDirectory, validateRecords, type DirectoryData, type RecordKind } from '../records.js'
import { readJsonFile } from '../json-file.js'
import { readOrganizationsFile } from '../organizations-file.js'
import type { DirectorySource, SourceListener } from '../source.js'

export const FIXTURE_FILES = {
  providers: 'providers.json',
  endpoints: 'zdr-endpoints.json',
  organizations: 'organizations.json',
  keys: 'keys.json'
} as const satisfies { [kind in RecordKind]: string }

/**
 * Changes are applied this long after the first event of a burst: an editor's or Kubernetes'
 * several writes become one reload, and a steady stream of changes is still applied as it comes
 * (a reload every 100 ms at most), never postponed until the stream stops.
 */
const SETTLE_MS = 100

/** After a read that raced a change, the next read comes this much later. */
const RACE_RETRY_MS = 10

/** Reads at start before the files are taken as they are, however much they change meanwhile. */
const LOAD_ATTEMPTS = 5

/** Reads and validates the four data files once; throws a DataError naming file, record and field. */
export async function loadFixtures (dir: string): Promise<DirectoryData> {
  const entries = await Promise.all(RECORD_KINDS.map(async (kind) => [kind, await readFixture(dir, kind)] as const))
  return validateDirectory(Object.fromEntries(entries) as DirectoryData, FIXTURE_FILES)
}

/**
 * One data file, validated. organizations.json, which may hold a million members, is read in slices
 * into its compact form; `previous` is the data it replaces, whose unchanged members it shares.
 */
async function readFixture<K extends RecordKind> (dir: string, kind: K, previous?: DirectoryData): Promise<DirectoryData[K]> {
  const file = FIXTURE_FILES[kind]
  if (kind === 'organizations') return await readOrganizationsFile(join(dir, file), file, previous?.organizations) as unknown as DirectoryData[K]
  return validateRecords(kind, await readJsonFile(join(dir, file), file), file) as unknown as DirectoryData[K]
}

/**
 * The data files of a folder, reloaded when any of them changes. The folder is watched, not the
 * files: an editor or `mv` replaces a file by rename, and Kubernetes updates a mounted ConfigMap or
 * Secret by swapping its `..data` symlink, and both leave a watch on the old file's inode blind.
 * A file whose identity, size and times are unchanged is not read again, so an event about one
 * file re-reads that file alone (and re-derives only what it holds).
 */
export function createFileSource (dir: string): DirectorySource {
  let current: DirectoryData | undefined
  let signatures = new Map<RecordKind, string>()
  let watcher: FSWatcher | undefined
  let listener: SourceListener | undefined
  let timer: NodeJS.Timeout | undefined
  let reloading = false
  let again: 'no' | 'changed' | 'forced' = 'no'
  let closed = false

  // Empty when the file cannot be read: it is read again, and the read says why it fails.
  async function signatureOf (kind: RecordKind) {
    const stats = await stat(join(dir, FIXTURE_FILES[kind]), { bigint: true }).catch(() => undefined)
    return stats ? `${stats.dev}:${stats.ino}:${stats.size}:${stats.mtimeNs}:${stats.ctimeNs}` : ''
  }

  async function allSignatures () {
    return new Map(await Promise.all(RECORD_KINDS.map(async (kind) => [kind, await signatureOf(kind)] as const)))
  }

  const sameSignatures = (a: Map<RecordKind, string>, b: Map<RecordKind, string>) => RECORD_KINDS.every((kind) => a.get(kind) === b.get(kind))

  /**
   * Reads the files that changed; a snapshot only when all four are valid together. 'raced' when a
   * file changed while the files were read: the four read may then come from two versions of the
   * data (Kubernetes swaps all four at once, between two of our reads), so they are read again
   * instead. Unchanged signatures before and after the reads mean each file read is the one signed.
   */
  async function read (force: boolean): Promise<DirectoryData | undefined | 'raced'> {
    const before = await allSignatures()
    if (!force && current && sameSignatures(before, signatures)) return undefined
    let parts
    try {
      parts = await Promise.all(RECORD_KINDS.map(async (kind) => {
        const signature = before.get(kind)
        if (!force && current && signature !== '' && signature === signatures.get(kind)) return [kind, current[kind]] as const
        return [kind, await readFixture(dir, kind, current)] as const
      }))
    } catch (error) {
      // A file read in the middle of its writing: its end brings an event, and a read of the whole.
      if (!sameSignatures(before, await allSignatures())) return 'raced'
      throw error
    }
    if (!sameSignatures(before, await allSignatures())) return 'raced'
    const data = validateDirectory(Object.fromEntries(parts) as DirectoryData, FIXTURE_FILES)
    signatures = before
    return data
  }

  async function reloadNow (force: boolean) {
    if (closed) return
    if (reloading) {
      again = force || again === 'forced' ? 'forced' : 'changed'
      return
    }
    reloading = true
    let raced = false
    const change = force ? 'reload requested' : 'files changed'
    try {
      const data = await read(force)
      if (data === 'raced') raced = true
      else if (data && !closed) {
        current = data
        listener?.install(data, change)
      }
    } catch (error) {
      if (!closed) listener?.reject(error as Error, change)
    } finally {
      reloading = false
      const next = raced && force ? 'forced' : again
      again = 'no'
      if (next === 'forced') void reloadNow(true)
      // Read again soon after a race: the change that caused it is most likely complete by then.
      else if (raced) schedule(RACE_RETRY_MS)
      else if (next === 'changed') schedule()
    }
  }

  function schedule (delay = SETTLE_MS) {
    if (timer !== undefined || closed) return
    timer = setTimeout(() => {
      timer = undefined
      void reloadNow(false)
    }, delay)
  }

  return {
    name: 'files',
    location: dir,
    async load () {
      // Files that keep changing while they are read are read again, a few times, then taken as
      // read: the watch reads them again once they settle.
      for (let attempt = 1; ; attempt++) {
        const data = await read(true)
        if (data !== 'raced') return (current = data!)
        if (attempt === LOAD_ATTEMPTS) {
          signatures = new Map()
          return (current = await loadFixtures(dir))
        }
      }
    },
    watch (handlers) {
      listener = handlers
      watcher = watch(dir, { persistent: false }, () => schedule())
      watcher.on('error', (error) => handlers.reject(error, 'watching the folder'))
      // A write between load() and this watch has no event: look once.
      schedule()
    },
    reload: () => { void reloadNow(true) },
    async close () {
      closed = true
      clearTimeout(timer)
      watcher?.close()
    }
  }
}
