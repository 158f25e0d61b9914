import { watch, type FSWatcher } from 'node:fs'
import { readlink, realpath, stat } from 'node:fs/promises'
import { hash } from 'node:crypto'
import { basename, join } from 'node:path'
import { DataError, assertUnique, compactMembers, recordProblem, validateRecords, type DirectoryData } from '../records.js'
import { KINDS, RECORD_KINDS, type RecordKind } from '../../registry.js'
import { readJsonFile } from '../json-file.js'
import { createSlicer } from '../slices.js'
import { readAll, type Batch, type Change, type Refusal, type Source, type SourceEvents } from '../source.js'
import type { Member } from '../../schemas/member.js'

/** The data file of each kind, by kind. */
export const DATA_FILES = Object.fromEntries(RECORD_KINDS.map((kind) => [kind, KINDS[kind].file])) as { [K in RecordKind]: (typeof KINDS)[K]['file'] }

/**
 * Events of a burst (an editor's or Kubernetes' several writes) are looked at once, this long
 * after the first: the files are then read from one generation of the folder.
 */
const DEBOUNCE_MS = 100

/** How often the folder itself is looked at: deleted, recreated, renamed or replaced. */
const FOLDER_CHECK_MS = 1000

/** Reads of files that keep changing while they are read, before the last is taken as read. */
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
 * One data file, validated, as a change to its kind: every record. Any problem (a missing file,
 * bad JSON, a bad record, a file too large) is a DataError naming the file, record and field.
 */
async function readFile<K extends RecordKind> (dir: string, kind: K): Promise<Change<K>> {
  const file = KINDS[kind].file
  try {
    const value = await readJsonFile(join(dir, file), file)
    if (!Array.isArray(value)) validateRecords(kind, value, file)
    const records = value as unknown[]
    const slicer = createSlicer()
    for (let index = 0; index < records.length; index++) {
      const problem = recordProblem(kind, records[index], index)
      if (problem !== undefined) throw new DataError(`${file}: ${problem}`)
      if (KINDS[kind].index === 'organizations') {
        // Held serialized (member-list.ts), each organization's member ids checked unique.
        const organization = records[index] as { members: Member[] }
        records[index] = { ...organization, members: compactMembers(organization.members, file, `[${index}].members`) }
      }
      if (slicer.due()) await slicer.pause()
    }
    assertUnique(kind, records as never, file)
    return { kind, whole: records } as unknown as Change<K>
  } catch (error) {
    if (error instanceof DataError) throw error
    // The file is missing, not a file, too large, not JSON: the data is wrong, not the reading.
    throw new DataError((error as Error).message)
  }
}

/** Reads and validates the data files of a folder once; throws a DataError naming file, record and field. */
export async function loadDataFolder (dir: string): Promise<DirectoryData> {
  return await readAll(createFileSource(dir))
}

/**
 * The data files of a folder, each read again when it changes. The folder is watched, not the
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
  let debounce: NodeJS.Timeout | undefined
  let folderCheck: NodeJS.Timeout | undefined
  /** A look at the folder is waiting for its stat: another would start a second round of looks. */
  let looking = false
  let closed = false

  const signatures = (folder: string, kinds: readonly RecordKind[]) => Promise.all(kinds.map((kind) => signatureOf(join(folder, KINDS[kind].file))))

  function scheduleLook () {
    if (debounce !== undefined || closed) return
    debounce = setTimeout(() => {
      debounce = undefined
      // The files' signatures against the position's say which changed: a wake-up says only "look".
      events?.wake()
    }, DEBOUNCE_MS)
  }

  const folderName = basename(dir)

  function dropWatch () {
    watcher?.close()
    watcher = undefined
  }

  /** A look at the folder before its time; one under way sees the watch dropped, and takes its place. */
  function lookNow () {
    if (looking || closed) return
    clearTimeout(folderCheck)
    void lookAtFolder()
  }

  /** Watches the folder that is there now, or says it is missing. */
  async function lookAtFolder () {
    looking = true
    const stats = await stat(dir, { bigint: true }).catch((error: NodeJS.ErrnoException) => error)
    looking = false
    if (closed) return
    const identity = stats instanceof Error || !stats.isDirectory() ? '' : `${stats.dev}:${stats.ino}`
    if (identity !== watched || watcher === undefined) {
      dropWatch()
      watched = identity
      if (identity === '') {
        events?.following(false, new Error(`the data folder ${dir} is missing (${stats instanceof Error ? stats.code ?? stats.message : 'not a folder'})`))
      } else {
        try {
          watcher = watch(dir, { persistent: false }, (_event, name) => {
            // The folder itself deleted or moved: Linux names it by its own name, then stops watching it
            // without an error. A folder created again at once often gets the inode of the one deleted, so
            // that the next look would take the dead watch for a watch of it and miss every later change:
            // the watch is dropped now, and a look at once sets one on whatever folder is there.
            if (name === folderName) {
              dropWatch()
              lookNow()
            }
            scheduleLook()
          })
          // The folder deleted or unmounted under the watch: the next look finds out which.
          watcher.on('error', dropWatch)
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

  /**
   * Where a kind's file is read: the generation `..data` names now when the file at the path is the
   * kubelet's link through `..data` (so that every linked file comes from one generation), else the
   * folder itself, whatever the file there is (a regular file put over the link is served).
   */
  async function folderOf (kind: RecordKind, generation: string | undefined): Promise<string> {
    if (generation === undefined) return dir
    const target = await readlink(join(dir, KINDS[kind].file)).catch(() => undefined)
    return target === join(GENERATION_LINK, KINDS[kind].file) ? generation : dir
  }

  /**
   * These kinds' files read from one generation of the folder, at a position: the generation `..data`
   * names, and every file's signature then (those not read keep the one `since` gives). A file is
   * read whole whatever changed in it; every file, when `..data` names another generation than
   * `sinceGeneration`: none is then served from the generation before.
   */
  async function readAt (changed: readonly RecordKind[], since: readonly string[], sinceGeneration?: string): Promise<Batch> {
    for (let attempt = 1; ; attempt++) {
      // What is served is what each path holds, whatever it links to. One generation of the folder: the
      // files linked through `..data` read from the one generation it names (the kubelet writes it
      // whole before it swaps `..data` to it, and never writes it again), and the files whose
      // signatures did not change while they were read.
      const generation = await realpath(join(dir, GENERATION_LINK)).catch(() => undefined)
      const generationName = generation === undefined ? '' : basename(generation)
      const kinds = generationName === sinceGeneration ? changed : RECORD_KINDS
      const folders = await Promise.all(kinds.map((kind) => folderOf(kind, generation)))
      const before = await Promise.all(kinds.map((kind, index) => signatureOf(join(folders[index]!, KINDS[kind].file))))
      const changes = await Promise.all(kinds.map((kind, index) => readFile(folders[index]!, kind).catch((error: unknown): Refusal => {
        if (error instanceof DataError) return { kind, error }
        throw error
      })))
      const after = await Promise.all(kinds.map((kind, index) => signatureOf(join(folders[index]!, KINDS[kind].file))))
      // The kubelet removes a generation once the next is swapped in: a file gone while read is of an old one.
      const torn = after.some((signature, index) => signature !== before[index])
      if (torn && attempt < READ_ATTEMPTS) continue
      const signed = RECORD_KINDS.map((kind, index) => kinds.includes(kind) ? before[kinds.indexOf(kind)]! : since[index] ?? '')
      const label = generation === undefined ? hash('sha1', signed.join(','), 'hex').slice(0, 16) : generationName
      return { position: `${generationName}|${signed.join(',')}`, label, changes }
    }
  }

  return {
    name: 'files',
    location: dir,
    mode: 'watch',
    async list () {
      return await readAt(RECORD_KINDS, [])
    },
    async changesSince (position) {
      // A folder gone is a source that cannot be read, not files that changed: the data is not confirmed.
      const folder = await stat(dir).catch(() => undefined)
      if (folder?.isDirectory() !== true) throw new Error(`the data folder ${dir} is missing`)
      const [sinceGeneration = '', signed = ''] = position.split('|')
      const since = signed.split(',')
      // The files at their paths (through `..data` where they link into it) whose signature moved,
      // or every one when `..data` names another generation.
      const generation = await realpath(join(dir, GENERATION_LINK)).then((path) => basename(path), () => '')
      const now = await signatures(dir, RECORD_KINDS)
      const changed = RECORD_KINDS.filter((_kind, index) => now[index] !== since[index])
      if (changed.length === 0 && generation === sinceGeneration) return { position, changes: [] }
      return await readAt(changed, since, sinceGeneration)
    },
    async watch (handlers) {
      events = handlers
      handlers.mode('watch', `the folder ${dir} is watched`)
      void lookAtFolder()
    },
    async close () {
      closed = true
      clearTimeout(debounce)
      clearTimeout(folderCheck)
      watcher?.close()
    }
  }
}
