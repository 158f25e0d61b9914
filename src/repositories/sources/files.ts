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

  /** Reads the files that changed; a snapshot only when all four are valid together. */
  async function read (force: boolean): Promise<DirectoryData | undefined> {
    const next = new Map<RecordKind, string>()
    const parts = await Promise.all(RECORD_KINDS.map(async (kind) => {
      // Taken before the read: a write that lands in between changes it again, and its event
      // brings a read of the finished file.
      const signature = await signatureOf(kind)
      next.set(kind, signature)
      if (!force && current && signature !== '' && signature === signatures.get(kind)) return [kind, current[kind]] as const
      return [kind, await readFixture(dir, kind, current)] as const
    }))
    if (!force && current && RECORD_KINDS.every((kind) => next.get(kind) === signatures.get(kind))) return undefined
    const data = validateDirectory(Object.fromEntries(parts) as DirectoryData, FIXTURE_FILES)
    signatures = next
    return data
  }

  async function reloadNow (force: boolean) {
    if (closed) return
    if (reloading) {
      again = force || again === 'forced' ? 'forced' : 'changed'
      return
    }
    reloading = true
    const change = force ? 'reload requested' : 'files changed'
    try {
      const data = await read(force)
      if (data && !closed) {
        current = data
        listener?.install(data, change)
      }
    } catch (error) {
      if (!closed) listener?.reject(error as Error, change)
    } finally {
      reloading = false
      const next = again
      again = 'no'
      if (next === 'forced') void reloadNow(true)
      else if (next === 'changed') schedule()
    }
  }

  function schedule () {
    if (timer !== undefined || closed) return
    timer = setTimeout(() => {
      timer = undefined
      void reloadNow(false)
    }, SETTLE_MS)
  }

  return {
    name: 'files',
    location: dir,
    async load () {
      // Taken before the read, so that a write made during it is read again at the first look.
      signatures = await allSignatures()
      current = await loadFixtures(dir)
      return current
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
