import { watch, type FSWatcher } from 'node:fs'
import { realpath, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { DataError, KINDS, RECORD_KINDS, assertUnique, recordProblem, validateRecords, type DirectoryData, type Held, type RecordKind } from '../records.js'
import { readJsonArray } from '../json-file.js'
import { readOrganizationsFile } from '../organizations-file.js'
import { blockIndex } from '../member-list.js'
import { createSlicer } from '../slices.js'
import { readKeyChange, type PartChange, type Snapshot } from '../snapshot.js'
import { readAll, type Source, type SourceEvents } from '../source.js'

/** The data file of each kind, by kind. */
export const FIXTURE_FILES = Object.fromEntries(RECORD_KINDS.map((kind) => [kind, KINDS[kind].file])) as { [K in RecordKind]: (typeof KINDS)[K]['file'] }

/**
 * Changes are read this long after the first event of a burst: an editor's or Kubernetes' several
 * writes become one read, and a steady stream of changes is still read as it comes.
 */
const SETTLE_MS = 100

/** How often the folder itself is looked at: deleted, recreated, renamed or replaced. */
const FOLDER_CHECK_MS = 1000

/** Reads of a file that keeps changing while it is read, before it is taken as read. */
const READ_ATTEMPTS = 5

/**
 * The link through which a Kubernetes ConfigMap or Secret volume (the kubelet's AtomicWriter) shows one
 * generation of every file: the files are links through it, and it is swapped to the next generation's
 * folder, written whole beside it, in one rename.
 */
const GENERATION_LINK = '..data'

/** A file's identity, size and times: another signature means another content, or may. Empty when it cannot be read. */
async function signatureOf (path: string) {
  const stats = await stat(path, { bigint: true }).catch(() => undefined)
  return stats ? `${stats.dev}:${stats.ino}:${stats.size}:${stats.mtimeNs}:${stats.ctimeNs}` : ''
}

/**
 * One data file, validated, as a change to the kind: every record, as the snapshot holds them, or
 * for keys.json the keys that differ from `current`'s (readKeyChange). Any problem (a missing file,
 * bad JSON, a bad record) is a DataError naming the file, record and field. organizations.json
 * shares the member blocks of `current`'s organizations that did not change.
 */
async function readFile<K extends RecordKind> (dir: string, kind: K, current: Snapshot | undefined): Promise<PartChange<K>> {
  const file = KINDS[kind].file
  const path = join(dir, file)
  try {
    if (kind === 'organizations') {
      const shared = current ? await blockIndex(current.parts.organizations.byKey.values()) : undefined
      const records = await readOrganizationsFile(path, file, shared)
      assertUnique('organizations', records, file)
      return { kind, all: records } as unknown as PartChange<K>
    }
    if (kind === 'keys') {
      return await readKeyChange(current?.parts.keys, file, (add) => readRecords('keys', path, file, add)) as PartChange<K>
    }
    const records: Array<Held<K>> = []
    await readRecords(kind, path, file, (record) => records.push(record))
    assertUnique(kind, records, file)
    return { kind, all: records } as unknown as PartChange<K>
  } catch (error) {
    if (error instanceof DataError) throw error
    // The file is missing, not a file, too large, not JSON: the data is wrong, not the reading.
    throw new DataError((error as Error).message)
  }
}

/** Hands each record of an array file to `add`, in order, validated, a batch at a time. */
async function readRecords<K extends RecordKind> (kind: K, path: string, file: string, add: (record: Held<K>) => void) {
  const slicer = createSlicer()
  const whole = await readJsonArray(path, file, async (values, first) => {
    for (let k = 0; k < values.length; k++) {
      const problem = recordProblem(kind, values[k], first + k)
      if (problem !== undefined) throw new DataError(`${file}: ${problem}`)
      add(values[k] as Held<K>)
      if (slicer.due()) await slicer.pause()
    }
  })
  // The scan gave up (the file is not what it expects): the file was read whole instead.
  if (whole !== undefined) for (const record of validateWhole(kind, whole, file)) add(record)
}

function validateWhole<K extends RecordKind> (kind: K, value: unknown, file: string): Array<Held<K>> {
  if (!Array.isArray(value)) return validateRecords(kind, value, file) as Array<Held<K>>
  value.forEach((record: unknown, index) => {
    const problem = recordProblem(kind, record, index)
    if (problem !== undefined) throw new DataError(`${file}: ${problem}`)
  })
  return value as Array<Held<K>>
}

/** Reads and validates the data files of a folder once; throws a DataError naming file, record and field. */
export async function loadFixtures (dir: string): Promise<DirectoryData> {
  return await readAll(createFileSource(dir))
}

/**
 * The data files of a folder, each read again when it changes, alone. The folder is watched, not the
 * files: an editor or `mv` replaces a file by rename, and Kubernetes updates a mounted ConfigMap or
 * Secret by swapping its `..data` symlink, and both leave a watch on the old file's inode blind. The
 * folder itself is looked at every second: while it is missing the last data keeps serving, and a
 * folder created, renamed or moved into its place is followed as soon as it is there.
 */
export function createFileSource (dir: string): Source {
  let watcher: FSWatcher | undefined
  /** The folder's identity when the watch was set on it. */
  let watched = ''
  let events: SourceEvents | undefined
  let settle: NodeJS.Timeout | undefined
  let folderCheck: NodeJS.Timeout | undefined
  const seen = new Map<RecordKind, string>()
  let closed = false

  /** Tells of the files whose signature changed since last seen. */
  async function lookAtFiles () {
    // All looked at before any is told of: files swapped together are read together.
    const signatures = await Promise.all(RECORD_KINDS.map((kind) => signatureOf(join(dir, KINDS[kind].file))))
    if (closed) return
    RECORD_KINDS.forEach((kind, index) => {
      if (signatures[index] !== seen.get(kind)) {
        seen.set(kind, signatures[index]!)
        events?.changed(kind)
      }
    })
  }

  function scheduleLook () {
    if (settle !== undefined || closed) return
    settle = setTimeout(() => {
      settle = undefined
      void lookAtFiles()
    }, SETTLE_MS)
  }

  /** Watches the folder that is there now, or says it is missing. */
  async function lookAtFolder () {
    const stats = await stat(dir, { bigint: true }).catch((error: NodeJS.ErrnoException) => error)
    if (closed) return
    const identity = stats instanceof Error || !stats.isDirectory() ? '' : `${stats.dev}:${stats.ino}`
    if (identity !== watched || watcher === undefined) {
      watcher?.close()
      watcher = undefined
      watched = identity
      if (identity === '') {
        events?.following(false, new Error(`the data folder ${dir} is missing (${stats instanceof Error ? stats.code ?? stats.message : 'not a folder'})`))
      } else {
        try {
          watcher = watch(dir, { persistent: false }, scheduleLook)
          // The folder deleted or unmounted under the watch: the next look finds out which.
          watcher.on('error', () => {
            watcher?.close()
            watcher = undefined
          })
          events?.following(true)
          // Whatever changed while nothing watched.
          scheduleLook()
        } catch (error) {
          events?.following(false, error as Error)
        }
      }
    }
    folderCheck = setTimeout(() => void lookAtFolder(), FOLDER_CHECK_MS)
    folderCheck.unref()
  }

  /** The generation folder `..data` resolves to, shared by the reads that start in one turn of the event loop. */
  let resolving: Promise<string | undefined> | undefined

  /**
   * The generation folder `..data` points at now, or undefined in a plain folder. Resolved once for the
   * reads started in the same turn (the kinds of one swap, which the lifecycle reads together), so that
   * they read the same generation, as the PostgreSQL source reads a turn's kinds in one transaction.
   */
  function generationNow () {
    if (resolving === undefined) {
      resolving = resolveGeneration()
      setImmediate(() => { resolving = undefined })
    }
    return resolving
  }

  function resolveGeneration () {
    // Not there, or not resolvable: a plain folder, whose files are checked for changes while read.
    return realpath(join(dir, GENERATION_LINK)).catch(() => undefined)
  }

  /**
   * A kind read from one generation of a Kubernetes volume. The kubelet writes a generation's folder whole
   * before it swaps `..data` to it and never writes it again, so a file read from there is of that one
   * generation however many swaps come meanwhile: there is nothing to check and nothing to read again,
   * and a read of a few seconds installs its generation while swaps keep coming.
   */
  async function readGeneration<K extends RecordKind> (kind: K, generation: string, current: Snapshot | undefined): Promise<PartChange<K>> {
    for (let attempt = 1; ; attempt++) {
      const signature = await signatureOf(join(generation, KINDS[kind].file))
      try {
        const change = await readFile(generation, kind, current)
        if (!seen.has(kind)) seen.set(kind, signature)
        return change
      } catch (error) {
        // The kubelet removes a generation once the next is swapped in: a file opened after that (the
        // start of a read, the second pass of a large change) is gone, not wrong. The newest is read instead.
        const newest = await resolveGeneration()
        if (attempt === READ_ATTEMPTS || newest === undefined || newest === generation) throw error
        generation = newest
      }
    }
  }

  return {
    name: 'files',
    location: dir,
    async read (kind, _keys, current) {
      // Before any await: the reads the lifecycle starts together start in one turn, and share it.
      const generation = await generationNow()
      if (generation !== undefined) return await readGeneration(kind, generation, current)
      // A file that changed while it was read is read again: what was read may be half of two versions.
      const path = join(dir, KINDS[kind].file)
      for (let attempt = 1; ; attempt++) {
        const before = await signatureOf(path)
        const change = await readFile(dir, kind, current).catch(async (error: unknown) => {
          if (attempt < READ_ATTEMPTS && before !== await signatureOf(path)) return undefined
          throw error
        })
        if (change === undefined) continue
        if (attempt === READ_ATTEMPTS || before === await signatureOf(path)) {
          if (!seen.has(kind)) seen.set(kind, before)
          return change
        }
      }
    },
    watch (handlers) {
      events = handlers
      void lookAtFolder()
    },
    async close () {
      closed = true
      clearTimeout(settle)
      clearTimeout(folderCheck)
      watcher?.close()
    }
  }
}
