import { DataError, KINDS, RECORD_KINDS, type Held, type RecordKind } from './records.js'
import { applyChange, compactIndex, createSnapshot, withRecords, type KeyedKind, type Index, type RecordCounts, type Snapshot } from './snapshot.js'
import { backoff, readWhole, type Change, type ReadRequest, type Source } from './source.js'
import { quoteValue } from '../schemas/describe-error.js'

/** Notices that arrive within this time of the first are read together: a script's burst becomes one read. */
const DEBOUNCE_MS = 20

/** A failed read is tried again after 100 ms, then twice as long each time, up to this. */
const MAX_BACKOFF_MS = 5000

/**
 * Failures in a row of a read of named records after which the kind is read whole instead: a name
 * that breaks every read of it holds back no other change.
 */
const NAMED_FAILURES = 2

/** More names than this waiting for a kind are read as the whole kind: what notices name costs a bounded memory. */
const NAMED_MAX = 10_000

/** Ignored notices are logged one in this period at most, with how many were ignored since. */
const IGNORED_LOG_MS = 60_000

/** What the logs, /metrics and the tests learn of the data served. */
export interface SnapshotInfo {
  /** The source of the data: `files`, `postgres`. */
  source: string
  /** The snapshot served: its version, its fingerprint, when it was installed (ms since the epoch). */
  version: number
  fingerprint: string
  installedAt: number
  records: RecordCounts
  /** Changes installed (succeeded) and refused (failed) since start, by kind. */
  changes: { [kind in RecordKind]: { succeeded: number, failed: number } }
  /** Reads that failed (the source, not the data) since start, by kind: each is tried again. */
  readFailures: { [kind in RecordKind]: number }
  /** Notices of change the source ignored since start, being of no shape it sends. */
  noticesIgnored: number
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
interface LifecycleLog {
  info(object: object, message: string): void
  error(object: object, message: string): void
  warn(object: object, message: string): void
}

/**
 * The work of one kind. A kind is read whole (its notices named nothing, a reconnection, SIGHUP) or
 * by the records notices named; one read of each sort at most is under way, and another waits
 * behind it at most, so that a revocation is never held behind a whole read of its kind.
 */
interface Lane {
  /** Keys named since the last read of named records. */
  named: Set<string>
  /** A whole read is wanted. */
  whole: boolean
  namedRunning: boolean
  wholeRunning: boolean
  /**
   * While a whole read runs: the keys of the records installed since it started by reads of named
   * records, newer than what it read, which its install leaves as they are.
   */
  newer: Set<string> | undefined
  failures: number
  /** Its last whole change was refused: every notice reads it whole too, so that a fix brings everything back. */
  refused: boolean
  /**
   * While the kind's overlays are folded into new bases (compact): the keys of the records named
   * reads installed since it started, which the compacted index takes as they are served.
   */
  compacting: Set<string> | undefined
  /** Whole reads installed since start: a compaction of an index a whole read replaced is dropped. */
  wholeInstalls: number
}

/** What a removal held (holdBack) is held as. */
const REMOVAL = Symbol('removal')

/** A change read, ready to install: `finish` makes its index on the snapshot being made. */
interface Ready {
  kind: RecordKind
  change: string
  rowsRead?: number
  sourceVersion?: string
  finish(next: Snapshot): Index<RecordKind>
}

const isKeyed = (kind: RecordKind): kind is KeyedKind => KINDS[kind].held !== 'list'

/**
 * The one owner of the data's lifecycle: the first load, the notices of change, their coalescing,
 * retries, installing a change or refusing it, the counts. Each kind has a lane of its own, and
 * each change is installed as soon as it is read: a revocation goes in while a large reload of
 * organizations (or of keys) is still being read, and a refused kind keeps its last good records
 * while the others' changes go in. The one order kept is the registry's `refers`: a key whose
 * organization is not served yet waits while organizations are being read, so that it is never
 * installed ahead of the organization committed before it. A change makes a new snapshot that
 * shares everything it did not touch; the snapshot's indexes fold their overlays into new bases off
 * to the side (compaction) and are moved onto them when ready.
 */
export function createLifecycle (source: Source) {
  let current: Snapshot | undefined
  let version = 0
  let log: LifecycleLog | undefined
  let following = true
  /** When changes stopped being followed, while they are not. */
  let unfollowedAt = 0
  let closed = false
  const changes = Object.fromEntries(RECORD_KINDS.map((kind) => [kind, { succeeded: 0, failed: 0 }])) as SnapshotInfo['changes']
  const readFailures = Object.fromEntries(RECORD_KINDS.map((kind) => [kind, 0])) as SnapshotInfo['readFailures']
  const ignored = { count: 0, logged: 0, loggedAt: -Infinity }
  const lanes = Object.fromEntries(RECORD_KINDS.map((kind) => [kind, {
    named: new Set(), whole: false, namedRunning: false, wholeRunning: false, newer: undefined, failures: 0, refused: false, compacting: undefined, wholeInstalls: 0
  } satisfies Lane])) as Record<RecordKind, Lane>
  /** The next reads, once the notices of a burst are in. */
  let timer: NodeJS.Timeout | undefined
  /** Records read whose referred record is not served yet while its kind is being read, by kind, then key. */
  const held = new Map<RecordKind, Map<string, unknown>>()

  const snapshot = () => {
    if (current === undefined) throw new Error('the data is not loaded yet')
    return current
  }

  const busy = (lane: Lane) => lane.whole || lane.named.size > 0 || lane.wholeRunning || lane.namedRunning

  function noteChange (kind: RecordKind, keys?: readonly string[]) {
    const lane = lanes[kind]
    if (keys === undefined || !isKeyed(kind) || lane.refused) lane.whole = true
    if (keys !== undefined && isKeyed(kind)) for (const key of keys) lane.named.add(key)
    if (lane.named.size > NAMED_MAX) {
      lane.named.clear()
      lane.whole = true
    }
    schedule(DEBOUNCE_MS)
  }

  function noteIgnored (problem: string) {
    ignored.count++
    const now = performance.now()
    if (now - ignored.loggedAt < IGNORED_LOG_MS) return
    log?.warn({ source: source.name, problem, ignored_since_last: ignored.count - ignored.logged }, 'notice ignored: not of a shape the source sends')
    ignored.logged = ignored.count
    ignored.loggedAt = now
  }

  function schedule (delay: number) {
    if (closed || timer !== undefined) return
    timer = setTimeout(() => {
      timer = undefined
      // The kinds read whole, in one read of one version of the source, installed together; the
      // records named, a read per kind beside it, installed as soon as read: a revocation never waits
      // for a whole read, nor for a large organization named with it (the registry's `refers` keeps
      // their order: holdBack).
      const whole = RECORD_KINDS.filter((kind) => lanes[kind].whole && !lanes[kind].wholeRunning)
      if (whole.length > 0) void run(whole.map((kind) => ({ kind, keys: 'all' })))
      for (const kind of RECORD_KINDS) {
        if (lanes[kind].named.size > 0 && !lanes[kind].namedRunning) void run([{ kind, keys: [...lanes[kind].named] }])
      }
    }, delay)
  }

  function describe (kind: RecordKind, work: readonly string[] | 'all') {
    if (work === 'all') return `${kind}: all read again`
    // Quoted as every message quotes a value: bounded, and never a key or a hash.
    const named = work.slice(0, 5).map((key) => quoteValue(key)).join(', ')
    return `${kind}: ${named}${work.length > 5 ? `, and ${work.length - 5} more` : ''}`
  }

  /**
   * Reads these kinds (each whole, or the records named) from one version of the source, and
   * installs together what was read: a kind refused keeps its last good records, the others go in.
   */
  async function run (requests: ReadRequest[]) {
    for (const { kind, keys } of requests) {
      const lane = lanes[kind]
      if (keys === 'all') {
        lane.whole = false
        lane.wholeRunning = true
        lane.newer = new Set()
      } else {
        lane.named = new Set()
        lane.namedRunning = true
      }
    }
    const whole = requests[0]!.keys === 'all'
    try {
      const read = await source.read(requests)
      if (closed) return
      const ready: Ready[] = []
      for (const [index, { kind, keys }] of requests.entries()) {
        const change = describe(kind, keys)
        try {
          const result = read[index]!
          if (result instanceof DataError) throw result
          ready.push(await prepare(kind, result, change))
          if (closed) return
          changes[kind].succeeded++
          if (whole) lanes[kind].refused = false
          lanes[kind].failures = 0
        } catch (error) {
          if (!(error instanceof DataError)) throw error
          lanes[kind].refused = true
          changes[kind].failed++
          log?.error({ change, kind, problem: error.message }, `change refused: ${kind} keeps its last good records, the other kinds follow their changes`)
        }
      }
      if (ready.length > 0) installChanges(ready)
    } catch (error) {
      if (closed) return
      // Reading failed (the connection, not the data): read it again later, all of what was asked.
      for (const { kind, keys } of requests) {
        const lane = lanes[kind]
        lane.failures++
        readFailures[kind]++
        if (keys === 'all' || lane.failures >= NAMED_FAILURES) lane.whole = true
        else for (const key of keys) lane.named.add(key)
      }
      log?.warn({ change: requests.map(({ kind, keys }) => describe(kind, keys)).join('; '), problem: (error as Error).message }, 'reading a change failed; trying again')
    } finally {
      for (const { kind, keys } of requests) {
        const lane = lanes[kind]
        if (keys === 'all') {
          lane.wholeRunning = false
          lane.newer = undefined
        } else lane.namedRunning = false
      }
      releaseHeld()
      const failures = Math.max(...RECORD_KINDS.map((kind) => lanes[kind].failures))
      if (RECORD_KINDS.some((kind) => lanes[kind].whole || lanes[kind].named.size > 0)) schedule(failures > 0 ? backoff(failures, MAX_BACKOFF_MS) : 0)
    }
    for (const { kind } of requests) void compact(kind)
  }

  /** Whether a kind whose records refer to this kind's is being read. */
  const referringBusy = (kind: RecordKind) => RECORD_KINDS.some((other) => KINDS[other].refers?.kind === kind && busy(lanes[other]))

  /**
   * Takes out of a change that names its records what must wait for another kind being read (held):
   * a record that refers to a record not served, while the referred kind is being read (a key moved
   * to a new organization); a removal of a record others may refer to, while they are being read (an
   * organization whose keys are moving out). The rest goes in now.
   */
  function holdBack<K extends RecordKind> (kind: K, read: { upsert: ReadonlyArray<Held<K>>, remove: readonly string[] }, next: Snapshot) {
    const refers = KINDS[kind].refers
    const holdRemovals = referringBusy(kind)
    const waiting = held.get(kind) ?? new Map<string, unknown>()
    if (refers === undefined && !holdRemovals && waiting.size === 0) return read
    held.set(kind, waiting)
    const keyField = KINDS[kind].key!
    const newer = lanes[kind].newer
    const remove: string[] = []
    for (const key of read.remove) {
      waiting.delete(key)
      if (!holdRemovals) remove.push(key)
      else {
        waiting.set(key, REMOVAL)
        newer?.add(key)
      }
    }
    const referred = refers === undefined ? undefined : next.indexes[refers.kind as KeyedKind].byKey
    const upsert: Array<Held<K>> = []
    for (const record of read.upsert) {
      const key = (record as Record<string, string>)[keyField]!
      waiting.delete(key)
      if (refers !== undefined && referred!.get((record as Record<string, string>)[refers.field]!) === undefined && busy(lanes[refers.kind as RecordKind])) {
        waiting.set(key, record)
        newer?.add(key)
      } else upsert.push(record)
    }
    return { upsert, remove }
  }

  /** Installs what was held and need wait no longer: its referred record is served, or the kinds it waited for are no longer read. */
  function releaseHeld () {
    if (current === undefined) return
    for (const [kind, waiting] of held) {
      if (waiting.size === 0) continue
      const refers = KINDS[kind].refers
      const referred = refers === undefined ? undefined : snapshot().indexes[refers.kind as KeyedKind].byKey
      const referredIdle = refers === undefined || !busy(lanes[refers.kind as RecordKind])
      // A removal held goes once the kinds that refer waited for are read, and no later read of its own kind may undo it.
      const removalsFree = !referringBusy(kind) && !busy(lanes[kind])
      const upsert: unknown[] = []
      const remove: string[] = []
      for (const [key, record] of waiting) {
        if (record === REMOVAL) {
          if (!removalsFree) continue
          remove.push(key)
        } else {
          if (!referredIdle && referred!.get((record as Record<string, string>)[refers!.field]!) === undefined) continue
          upsert.push(record)
        }
        waiting.delete(key)
      }
      if (upsert.length + remove.length > 0) {
        installChanges([{ kind, change: `${kind}: ${upsert.length + remove.length} held for the kind they wait for`, finish: (next) => namedIndex(kind as KeyedKind, next.indexes[kind as KeyedKind], upsert as never, remove) }])
      }
    }
  }

  /** The index with these records in and out, noted as newer than a whole read or a compaction under way. */
  function namedIndex<K extends KeyedKind> (kind: K, index: Index<K>, upsert: ReadonlyArray<Held<K>>, remove: readonly string[]): Index<K> {
    const keyField = KINDS[kind].key
    for (const noted of [lanes[kind].newer, lanes[kind].compacting]) {
      if (noted === undefined) continue
      for (const record of upsert) noted.add((record as Record<string, string>)[keyField]!)
      for (const key of remove) noted.add(key)
    }
    return withRecords(index, upsert, remove)
  }

  /** The records of these keys as `from` serves them, put into `index` (or taken out of it, where `from` has none). */
  function carryOver<K extends KeyedKind> (index: Index<K>, from: Index<RecordKind>, keys: Iterable<string>): Index<K> {
    const served = (from as Index<KeyedKind>).byKey as { get(key: string): unknown }
    const upsert: unknown[] = []
    const remove: string[] = []
    for (const key of keys) {
      const record = served.get(key)
      if (record === undefined) remove.push(key)
      else upsert.push(record)
    }
    return withRecords(index, upsert as never, remove)
  }

  /**
   * Makes ready to install a change read: reports its records refused one by one, and answers what
   * makes its index once it is installed, on the snapshot being made then (with no turn of the event
   * loop in between, so that nothing installed meanwhile is lost).
   */
  async function prepare (kind: RecordKind, read: Change, change: string): Promise<Ready> {
    const refused = read.refused ?? new Map<string, string>()
    if (refused.size > 0) {
      changes[kind].failed++
      for (const problem of [...refused.values()].slice(0, 5)) {
        log?.error({ change, kind, problem }, `change refused: ${kind} keeps the last good version of the record, its other records follow their changes`)
      }
    }
    if ('upsert' in read && isKeyed(kind)) {
      return {
        kind,
        change,
        rowsRead: read.rowsRead,
        sourceVersion: read.sourceVersion,
        finish (next) {
          const now = holdBack(kind, read as { upsert: ReadonlyArray<Held<KeyedKind>>, remove: readonly string[] }, next)
          return namedIndex(kind, next.indexes[kind], now.upsert as never, now.remove)
        }
      }
    }
    const index = await applyChange(snapshot().indexes[kind], read)
    return {
      kind,
      change,
      rowsRead: read.rowsRead,
      sourceVersion: read.sourceVersion,
      finish (next) {
        const newer = lanes[kind].newer
        // A record held since before this whole read may be older than what it read (a key moved, then
        // revoked by a bulk statement): it is read again by name rather than installed later.
        const waiting = held.get(kind)
        const stale = [...waiting?.keys() ?? []].filter((key) => newer?.has(key) !== true)
        for (const key of stale) waiting!.delete(key)
        if (stale.length > 0) noteChange(kind, stale)
        lanes[kind].wholeInstalls++
        if (!isKeyed(kind) || (newer === undefined || newer.size === 0) && refused.size === 0) return index
        // Records installed by named reads meanwhile are newer than what this whole read saw, and
        // records it refused keep the version served: both kept.
        return carryOver(index as Index<KeyedKind>, next.indexes[kind], new Set([...newer ?? [], ...refused.keys()]))
      }
    }
  }

  /** Installs changes ready in one snapshot, the kinds referred to before the kinds that refer to them (registry order). */
  function installChanges (changes: Ready[]) {
    changes.sort((a, b) => RECORD_KINDS.indexOf(a.kind) - RECORD_KINDS.indexOf(b.kind))
    let next = snapshot()
    version++
    for (const { kind, finish } of changes) next = next.withIndex(kind, finish(next) as never, version)
    current = next
    const rowsRead = changes.filter(({ rowsRead }) => rowsRead !== undefined).map(({ kind, rowsRead }) => [kind, rowsRead])
    const sourceVersions = [...new Set(changes.map(({ sourceVersion }) => sourceVersion).filter((read) => read !== undefined))]
    log?.info({
      change: changes.map(({ change }) => change).join('; '),
      snapshot: { version, fingerprint: next.fingerprint },
      // The version of the source each change was read from: one for the kinds read together.
      ...sourceVersions.length > 0 ? { source_version: sourceVersions.join('; ') } : {},
      records: next.counts(),
      // What each change cost, where the source counts it: a revocation among a million keys reads one row.
      ...rowsRead.length > 0 ? { rows_read: Object.fromEntries(rowsRead) } : {}
    }, 'change installed')
  }

  /**
   * Folds the kind's overlays into new bases, off to the side, then installs them with the records
   * named reads installed meanwhile carried over; dropped if a whole read replaced the index meanwhile.
   */
  async function compact (kind: RecordKind) {
    const lane = lanes[kind]
    if (lane.compacting !== undefined || current === undefined || !isKeyed(kind)) return
    const from = current.indexes[kind]
    const wholeInstalls = lane.wholeInstalls
    lane.compacting = new Set()
    try {
      const compacted = await compactIndex(from)
      if (compacted === undefined || closed || lane.wholeInstalls !== wholeInstalls) return
      current = snapshot().withIndex(kind, carryOver(compacted as Index<KeyedKind>, snapshot().indexes[kind], lane.compacting), snapshot().version)
    } catch (error) {
      // Changes named one at a time can disagree for a moment (a key read with the hash another
      // key gives up in a change not read yet): the overlay serves on, and the next change tries again.
      log?.warn({ kind, problem: (error as Error).message }, 'compaction put off; the kind keeps its overlay')
    } finally {
      lane.compacting = undefined
    }
  }

  return {
    /** Reads every kind whole; throws (a DataError naming where, record and field) when one is bad. */
    async load () {
      const changes = await readWhole(source)
      current = await createSnapshot(Object.fromEntries(RECORD_KINDS.map((kind) => [kind, changes[kind].all])) as Parameters<typeof createSnapshot>[0], ++version)
      return current
    },
    /** Follows the source's changes from now on, reporting to `logger`. */
    follow (logger: LifecycleLog) {
      log = logger
      source.watch({
        changed: noteChange,
        ignored: noteIgnored,
        following (up, problem) {
          if (up === following) return
          following = up
          if (up) logger.info({ source: source.name, unfollowed_ms: Date.now() - unfollowedAt }, 'following changes again; every kind is read again')
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
        installedAt: served.installedAt,
        records: served.counts(),
        changes: structuredClone(changes),
        readFailures: { ...readFailures },
        noticesIgnored: ignored.count,
        following
      }
    },
    async close () {
      closed = true
      clearTimeout(timer)
      await source.close()
    }
  } satisfies Snapshots & Record<string, unknown>
}

export type Lifecycle = ReturnType<typeof createLifecycle>

/** One snapshot that never changes, from records given: for what serves no data (the OpenAPI writer). */
export async function fixedSnapshots (data: Parameters<typeof createSnapshot>[0]): Promise<Snapshots> {
  const snapshot = await createSnapshot(data)
  const changes = Object.fromEntries(RECORD_KINDS.map((kind) => [kind, { succeeded: 0, failed: 0 }])) as SnapshotInfo['changes']
  const readFailures = Object.fromEntries(RECORD_KINDS.map((kind) => [kind, 0])) as SnapshotInfo['readFailures']
  return {
    current: () => snapshot,
    info: () => ({ source: 'none', version: 1, fingerprint: snapshot.fingerprint, installedAt: snapshot.installedAt, records: snapshot.counts(), changes, readFailures, noticesIgnored: 0, following: true })
  }
}
