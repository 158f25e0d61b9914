import { DataError, RECORD_KINDS, type RecordKind } from './records.js'
import { applyChange, compactPart, createSnapshot, rebasePart, type PartChange, type RecordCounts, type Snapshot } from './snapshot.js'
import type { Source } from './source.js'

/** Notices that arrive within this time of the first are read together: a script's burst becomes one read. */
const COALESCE_MS = 20

/**
 * Kinds whose reads started together (within COALESCE_MS: one transaction, one swap of a Kubernetes
 * volume) are installed together once all of them are read, however long the slowest takes: a key
 * moved to a new organization never reaches requests before the organization. A kind whose read is
 * refused or fails does not hold the others. A kind only scheduled to be read (its notice came a
 * moment later) is waited for this long at most.
 */
const TOGETHER_MS = 50

/** A failed read is tried again after 100 ms, then twice as long each time, up to this. */
const MAX_BACKOFF_MS = 5000

function backoff (failures: number) {
  // Jitter, so that replicas that lost the same server do not come back in lockstep.
  return Math.min(100 * 2 ** failures, MAX_BACKOFF_MS) * (0.5 + Math.random() / 2)
}

/** What the logs, /metrics and the tests learn of the data served. */
export interface SnapshotInfo {
  /** The source of the data: `files`, `postgres`. */
  source: string
  /** The snapshot served: its version, its fingerprint, when it was installed (ms since the epoch). */
  version: number
  fingerprint: string
  loadedAt: number
  records: RecordCounts
  /** Changes installed (succeeded) and refused (failed) since start, by kind. */
  reloads: { [kind in RecordKind]: { succeeded: number, failed: number } }
  /** Whether changes are being followed (the connection is up, the folder exists). */
  following: boolean
}

/** What the app reads: the snapshot to answer a request from, and what to report. */
export interface Snapshots {
  /** The snapshot to answer a request from; a request reads it once and keeps it to its last byte. */
  current(): Snapshot
  info(): SnapshotInfo
}

/** Where the lifecycle reports what happens; a pino logger will do. */
export interface LifecycleLog {
  info(object: object, message: string): void
  error(object: object, message: string): void
  warn(object: object, message: string): void
}

/** The work of one kind: what its notices named since its last read, and how its reads go. */
interface Lane {
  /** Keys named since the last read, or `all`; undefined when nothing is waiting. */
  pending: Set<string> | 'all' | undefined
  running: boolean
  /** When its current read started. */
  startedAt: number
  timer: NodeJS.Timeout | undefined
  failures: number
  /** Its last change was refused: the next read is of the whole kind, so that a fix brings everything back. */
  refused: boolean
  compacting: boolean
}

/**
 * The one owner of the data's lifecycle: the first load, the notices of change, their coalescing,
 * retries, installing a change or refusing it, the counts. Each kind has a lane of its own: a
 * revocation is read and installed while a large reload of organizations is still being read, and
 * a refused kind keeps its last good records while the others' changes go in. A change makes a new
 * snapshot that shares everything it did not touch; the snapshot's parts fold their overlays into
 * new bases off to the side (compaction) and are moved onto them when ready.
 */
export function createLifecycle (source: Source) {
  let current: Snapshot | undefined
  let version = 0
  let log: LifecycleLog | undefined
  let following = true
  /** When changes stopped being followed, while they are not. */
  let unfollowedAt = 0
  let closed = false
  const reloads = Object.fromEntries(RECORD_KINDS.map((kind) => [kind, { succeeded: 0, failed: 0 }])) as SnapshotInfo['reloads']
  const lanes = Object.fromEntries(RECORD_KINDS.map((kind) => [kind, {
    pending: undefined, running: false, startedAt: 0, timer: undefined, failures: 0, refused: false, compacting: false
  } satisfies Lane])) as Record<RecordKind, Lane>

  const snapshot = () => {
    if (current === undefined) throw new Error('the data is not loaded yet')
    return current
  }

  function noteChange (kind: RecordKind, keys?: readonly string[]) {
    const lane = lanes[kind]
    if (keys === undefined || lane.pending === 'all') lane.pending = 'all'
    else {
      lane.pending ??= new Set()
      for (const key of keys) lane.pending.add(key)
    }
    schedule(kind, COALESCE_MS)
  }

  function schedule (kind: RecordKind, delay: number) {
    const lane = lanes[kind]
    if (closed || lane.running || lane.timer !== undefined) return
    lane.timer = setTimeout(() => {
      lane.timer = undefined
      void run(kind)
    }, delay)
  }

  function describe (kind: RecordKind, work: Set<string> | 'all') {
    if (work === 'all') return `${kind}: all read again`
    const named = [...work].slice(0, 5).map((key) => JSON.stringify(key)).join(', ')
    return `${kind}: ${named}${work.size > 5 ? `, and ${work.size - 5} more` : ''}`
  }

  /** Reads what the lane's notices named, and installs it or refuses it. */
  async function run (kind: RecordKind) {
    const lane = lanes[kind]
    const work = lane.refused ? 'all' : lane.pending
    lane.pending = undefined
    if (work === undefined || closed) return
    lane.running = true
    lane.startedAt = performance.now()
    const change = describe(kind, work)
    try {
      const read = await source.read(kind, work === 'all' ? 'all' : [...work], current)
      const part = await applyChange(snapshot().parts[kind], read)
      if (closed) return
      if (!await installTogether(kind, part, change, read)) return
      reloads[kind].succeeded++
      lane.refused = false
      lane.failures = 0
    } catch (error) {
      if (closed) return
      if (error instanceof DataError) {
        lane.refused = true
        reloads[kind].failed++
        log?.error({ change, part: kind, problem: error.message }, `change refused: ${kind} keeps its last good records, the other parts follow their changes`)
      } else {
        // Reading failed (the connection, not the data): read it again later, all of what was asked.
        lane.failures++
        if (work === 'all' || lane.pending === 'all') lane.pending = 'all'
        else lane.pending = new Set([...work, ...lane.pending ?? []])
        log?.warn({ change, part: kind, problem: (error as Error).message }, 'reading a change failed; trying again')
      }
    } finally {
      lane.running = false
      // A read of the group that ended without a part (refused, failed) holds the others no longer.
      settle()
      if (lane.pending !== undefined) schedule(kind, lane.failures > 0 ? backoff(lane.failures) : 0)
    }
    void compact(kind)
  }

  function install (next: Snapshot) {
    current = next
  }

  /** Parts read and waiting for the other reads of their group, and what to call once installed. */
  const ready = new Map<RecordKind, { part: Snapshot['parts'][RecordKind], change: string, read: PartChange, done: (installed: boolean) => void }>()
  let readyTimer: NodeJS.Timeout | undefined

  /**
   * Installs the part with the parts of the reads that started with it, in one snapshot, once they
   * are all read; false when they were torn (read again instead).
   */
  function installTogether (kind: RecordKind, part: Snapshot['parts'][RecordKind], change: string, read: PartChange) {
    return new Promise<boolean>((resolve) => {
      ready.set(kind, { part, change, read, done: resolve })
      settle()
    })
  }

  /** Whether two kinds were read together, in one group. */
  function together (a: RecordKind, b: RecordKind) {
    return Math.abs(lanes[a].startedAt - lanes[b].startedAt) <= COALESCE_MS
  }

  /** Whether two parts ready of one group disagree on what their two kinds were (a change landed between their reads). */
  function torn () {
    const parts = [...ready.entries()]
    return parts.some(([a, { read: { state: sa } }]) => parts.some(([b, { read: { state: sb } }]) =>
      a !== b && sa !== undefined && sb !== undefined && together(a, b) && (sa[a] !== sb[a] || sa[b] !== sb[b])))
  }

  /** Whether a kind read together with one of the parts ready is still being read. */
  function groupRunning () {
    return [...ready.keys()].some((kind) => RECORD_KINDS.some((other) => !ready.has(other) && lanes[other].running && together(kind, other)))
  }

  /** Installs the parts ready unless their group is still being read (then its last read calls this again). */
  function settle () {
    if (ready.size === 0) return
    clearTimeout(readyTimer)
    readyTimer = undefined
    if (groupRunning()) return
    if (torn()) {
      // A change landed between reads of the same group (files swapped again while they were read):
      // installed, a key could reach requests before its organization. All of them are read again.
      const parts = [...ready.entries()]
      ready.clear()
      for (const [kind, { done }] of parts) {
        noteChange(kind)
        done(false)
      }
      return
    }
    const scheduled = RECORD_KINDS.some((other) => !ready.has(other) && !lanes[other].running && lanes[other].timer !== undefined)
    if (scheduled) readyTimer = setTimeout(installReady, TOGETHER_MS)
    else installReady()
  }

  function installReady () {
    clearTimeout(readyTimer)
    readyTimer = undefined
    if (ready.size === 0) return
    let next = snapshot()
    version++
    for (const [kind, { part }] of ready) next = next.withPart(kind, part as never, version)
    install(next)
    const changes = [...ready.values()]
    ready.clear()
    // What each change cost, where the source counts it: a revocation among a million keys reads one row.
    const rowsRead = changes.filter(({ read }) => read.rowsRead !== undefined).map(({ read }) => [read.kind, read.rowsRead])
    log?.info({
      change: changes.map(({ change }) => change).join('; '),
      snapshot: { version, fingerprint: next.fingerprint },
      records: next.counts(),
      ...rowsRead.length > 0 ? { rows_read: Object.fromEntries(rowsRead) } : {}
    }, 'change installed')
    for (const { done } of changes) done(true)
  }

  /** Folds the kind's overlays into new bases, off to the side, and moves the snapshot onto them. */
  async function compact (kind: RecordKind) {
    const lane = lanes[kind]
    if (lane.compacting || current === undefined) return
    const from = current.parts[kind]
    lane.compacting = true
    try {
      const compacted = await compactPart(from)
      if (compacted === undefined || closed) return
      // Changes installed meanwhile are carried over; if another part replaced the bases, it is dropped.
      const rebased = rebasePart(snapshot().parts[kind], from, compacted)
      if (rebased !== undefined) install(snapshot().withPart(kind, rebased, snapshot().version))
    } catch (error) {
      // Changes named one at a time can disagree for a moment (a key read with the hash another
      // key gives up in a change not read yet): the overlay serves on, and the next change tries again.
      log?.warn({ part: kind, problem: (error as Error).message }, 'compaction put off; the part keeps its overlay')
    } finally {
      lane.compacting = false
    }
  }

  return {
    /** Reads every kind whole; throws (a DataError naming where, record and field) when one is bad. */
    async load () {
      const parts = await Promise.all(RECORD_KINDS.map(async (kind) => {
        const change = await source.read(kind, 'all', undefined)
        if (!('all' in change)) throw new Error(`the source read part of ${kind} at start`)
        return [kind, change.all] as const
      }))
      install(await createSnapshot(Object.fromEntries(parts) as Parameters<typeof createSnapshot>[0], ++version))
      return current!
    },
    /** Follows the source's changes from now on, reporting to `logger`. */
    follow (logger: LifecycleLog) {
      log = logger
      source.watch({
        changed: noteChange,
        following (up, problem) {
          if (up === following) return
          following = up
          if (up) logger.info({ source: source.name, unfollowed_ms: Date.now() - unfollowedAt }, 'following changes again; every part is read again')
          else unfollowedAt = Date.now()
          if (!up) logger.error({ source: source.name, problem: problem?.message }, 'cannot follow changes; the data read last keeps serving')
        }
      })
    },
    /** Reads every kind again (SIGHUP). */
    reload () {
      for (const kind of RECORD_KINDS) noteChange(kind)
    },
    current: snapshot,
    info (): SnapshotInfo {
      const served = snapshot()
      return {
        source: source.name,
        version: served.version,
        fingerprint: served.fingerprint,
        loadedAt: served.installedAt,
        records: served.counts(),
        reloads: structuredClone(reloads),
        following
      }
    },
    async close () {
      closed = true
      for (const lane of Object.values(lanes)) clearTimeout(lane.timer)
      await source.close()
    }
  } satisfies Snapshots & Record<string, unknown>
}

export type Lifecycle = ReturnType<typeof createLifecycle>

/** One snapshot that never changes, from records given: for what serves no data (the OpenAPI writer). */
export async function fixedSnapshots (data: Parameters<typeof createSnapshot>[0]): Promise<Snapshots> {
  const snapshot = await createSnapshot(data)
  const reloads = Object.fromEntries(RECORD_KINDS.map((kind) => [kind, { succeeded: 0, failed: 0 }])) as SnapshotInfo['reloads']
  return {
    current: () => snapshot,
    info: () => ({ source: 'none', version: 1, fingerprint: snapshot.fingerprint, loadedAt: snapshot.installedAt, records: snapshot.counts(), reloads, following: true })
  }
}
