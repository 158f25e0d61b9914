import { KINDS, RECORD_KINDS, type RecordKind } from '../registry.js'
import { applyChange, compactIndex, createSnapshot, withRecords, type KeyedKind, type Index, type RecordCounts, type Snapshot } from './snapshot.js'
import { backoff, readWhole, type Batch, type Change, type FollowMode, type RecordRefusal, type Source, type SourceMeasures } from './source.js'
import { quoteValue } from '../schemas/describe-error.js'

/** Wake-ups within this time of the first are one read: a burst of statements, or a flood of NOTIFY, costs a read at most this often. */
const WAKE_DELAY_MS = 5

/** The source's clock is taken over this process's for keys' expiries only when they differ by this much or more. */
const CLOCK_TRUSTED_MS = 100

/** Records refused one by one are logged each, up to this many a read; the others in one line that counts them. */
const REFUSALS_LOGGED = 100

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
  /** Reads that failed (the source, not the data) since start: each is tried again. */
  readFailures: number
  /** How changes are learnt of: notifications, polling, a watched folder; `none` for data that never changes. */
  mode: FollowMode | 'none'
  /** The horizon of the snapshot served: a number that grows with the source's position (PostgreSQL: a transaction id); undefined for files. */
  horizon: number | undefined
  /** How far behind the source the replica is, as last seen: changes not installed yet, and the age of the oldest. */
  lag: { entries: number, seconds: number }
  /** How far the source is behind its own primary, as last read (a hot standby's replay lag), in seconds; 0 on a primary, undefined for files or when unknown. */
  replayLagSeconds: number | undefined
  /** The source's clock minus this process's, in seconds, as last measured: a key's expiry is judged on the source's time. 0 for files. */
  clockOffsetSeconds: number
  /** How long the oldest transaction in progress at the source has been seen open (it holds the change log's cut back), in seconds; 0 when none. */
  oldestOpenSeconds: number
  /** Times every kind was read whole since start because the changes since the position could not be told (a failover, a restore, a trim). */
  relists: number
  /** Whether changes are being followed (the database answers, the folder exists). */
  following: boolean
}

/** What the app reads: the snapshot to answer a request from, and what to report. */
export interface Snapshots {
  /** The snapshot to answer a request from; a request reads it once and keeps it to its last byte. */
  current(): Snapshot
  /**
   * When the data served was last confirmed current (ms since the epoch): the start of the last read
   * that succeeded, less the source's own lag behind its primary (a hot standby's replay).
   */
  confirmedAt(): number
  /** The source's clock minus this process's, in ms: what a key's expiry is compared with is now plus this. */
  clockOffsetMs(): number
  info(): SnapshotInfo
}

/** Where the lifecycle reports what happens; a pino logger will do. */
interface LifecycleLog {
  info(object: object, message: string): void
  error(object: object, message: string): void
  warn(object: object, message: string): void
}

/** A change read, ready to install: `finish` makes its index on the snapshot being made. */
interface Ready {
  kind: RecordKind
  /** What the change was, for the logs (describe). */
  description: string
  rowsRead?: number
  finish(next: Snapshot): Index<RecordKind>
}

const isKeyed = (kind: RecordKind): kind is KeyedKind => KINDS[kind].index !== 'list'

/** `keys: "a", "b", and 3 more`, or `keys: read whole`: what a change was, quoted as every message quotes a value (never a hash). */
function describe (change: Change): string {
  if ('whole' in change) return `${change.kind}: read whole`
  const keyField = KINDS[change.kind].key!
  const named = [...change.upsert.map((record) => (record as unknown as Record<string, string>)[keyField]!), ...change.remove]
  return `${change.kind}: ${named.slice(0, 5).map((key) => quoteValue(key)).join(', ')}${named.length > 5 ? `, and ${named.length - 5} more` : ''}`
}

/**
 * The one owner of the data's lifecycle: the first list, the reads of what changed after it, their
 * retries, installing a batch or refusing a kind of it, the counts. One read at a time, each at one
 * position of the source, installed as one snapshot, none older than the one before: a state the
 * source had, but for a kind refused whole, which keeps its last good records (of an earlier state)
 * while the others' changes go in. The order is the source's (PostgreSQL's transactions): no lane,
 * hold or timer decides it; a record refused alone (a bad row among good ones) is not served, on every replica
 * alike, whenever it started: a key "disabled" with a value its schema refuses answers 401 at once.
 * A change makes a new snapshot that shares everything it did not touch; the snapshot's indexes fold
 * their overlays into new bases off to the side (compaction).
 */
export function createLifecycle (source: Source, { confirmEveryMs }: { confirmEveryMs?: number | undefined } = {}) {
  let current: Snapshot | undefined
  /** When the last read that succeeded started: the source was as served, or as it then installed, at that instant. */
  let confirmedAt = 0
  /** Reads what changed this often whether woken or not, to confirm the data current (MAX_STALENESS_MS). */
  let confirming: NodeJS.Timeout | undefined
  let version = 0
  /** Where the snapshot served was read, its words for the logs, its horizon and its history: the next read starts there. */
  let position: string | undefined
  let label: string | undefined
  let horizon: number | undefined
  let history: string | undefined
  /** What the last read measured of the source (PostgreSQL). */
  let measured: SourceMeasures | undefined
  /** The oldest transaction seen in progress: since when, and when last (ms since the epoch). */
  let oldestOpen: { id: number, since: number, seenAt: number } | undefined
  /** Why the source was last seen waiting (a standby behind the data served), while it is. */
  let waiting: string | undefined
  let relists = 0
  let log: LifecycleLog | undefined
  let following = true
  /** When changes stopped being followed, while they are not. */
  let unfollowedAt = 0
  let closed = false
  const changes = Object.fromEntries(RECORD_KINDS.map((kind) => [kind, { succeeded: 0, failed: 0 }])) as SnapshotInfo['changes']
  let readFailures = 0
  /** Changes past the position that a read under way saw, until it installs. */
  let behind: { entries: number, oldestAt: number } | undefined
  /** The next read: what changed since the position, or every kind whole (SIGHUP). */
  let wanted: 'changes' | 'list' | undefined
  let reading = false
  let failures = 0
  let timer: NodeJS.Timeout | undefined
  /** While a kind's overlays are folded into new bases: the keys of the records installed since it started, carried over. */
  const compacting = new Map<RecordKind, Set<string>>()
  /** Whole reads installed since start, by kind: a compaction of an index a whole read replaced is dropped. */
  const wholeInstalls = Object.fromEntries(RECORD_KINDS.map((kind) => [kind, 0])) as Record<RecordKind, number>
  /** The records the first list refused one by one, logged once there is a log to tell. */
  let refusedAtStart: RecordRefusal[] = []

  const snapshot = () => {
    if (current === undefined) throw new Error('the data is not loaded yet')
    return current
  }

  function want (read: 'changes' | 'list', delay = WAKE_DELAY_MS) {
    if (wanted !== 'list') wanted = read
    schedule(delay)
  }

  function schedule (delay: number) {
    if (closed || reading || timer !== undefined) return
    timer = setTimeout(() => {
      timer = undefined
      void run()
    }, delay)
  }

  /** Reads what is wanted, installs it, and reads again if a wake-up came meanwhile. */
  async function run () {
    const read = wanted
    if (read === undefined || closed) return
    wanted = undefined
    reading = true
    let retry = 0
    const started = Date.now()
    try {
      const batch = read === 'list' ? await source.list() : await source.changesSince(position!)
      if (closed) return
      note(batch)
      await install(batch)
      failures = 0
      confirm(batch, started)
    } catch (error) {
      if (closed) return
      // Reading failed (the connection, not the data): read it again later, from the same position.
      failures++
      readFailures++
      if (wanted !== 'list') wanted = read
      retry = backoff(failures)
      log?.warn({ read: read === 'list' ? 'every kind' : 'the changes since the position served', position: label ?? position, problem: (error as Error).message }, 'reading a change failed; trying again')
    } finally {
      reading = false
    }
    if (wanted !== undefined) schedule(retry)
  }

  /** Takes what a read measured of the source, and says once when it starts and stops waiting for a standby. */
  function note (batch: Batch) {
    if (batch.measured !== undefined) {
      measured = batch.measured
      const open = batch.measured.oldestOpen
      const now = Date.now()
      if (open === undefined) oldestOpen = undefined
      else if (oldestOpen?.id !== open) oldestOpen = { id: open, since: now, seenAt: now }
      else oldestOpen.seenAt = now
    }
    if (batch.waiting !== waiting) {
      if (batch.waiting !== undefined) log?.warn({ source: source.name, position: label, problem: batch.waiting }, 'the source is behind the data served: nothing installed, and the data is not confirmed current until it catches up')
      else log?.info({ source: source.name, position: label }, 'the source has caught up with the data served')
      waiting = batch.waiting
    }
  }

  /**
   * The data is confirmed current as of the read's start, less the source's lag behind its primary
   * (a standby's replay, measured there): never by a read that waited, never moved back.
   */
  function confirm (batch: Batch, started: number) {
    if (batch.waiting !== undefined) return
    const lag = batch.measured === undefined ? 0 : batch.measured.replayLagMs
    if (lag !== null) confirmedAt = Math.max(confirmedAt, started - lag)
  }

  /**
   * Installs a batch as one snapshot: each kind refused keeps its last good records (a record refused
   * alone is left out), the others go in; then the position moves to the batch's.
   */
  async function install (batch: Batch) {
    if (batch.waiting !== undefined) return
    // Never back to an older state of one history (a standby behind the one read before, a reload
    // through it): kept for later. A relist of another history (a failover, a restore) is its state now.
    if (batch.horizon !== undefined && horizon !== undefined && batch.horizon < horizon && batch.history === history) {
      log?.warn({ source: source.name, position: label, behind: batch.label ?? batch.position }, 'a read older than the data served is left out; the next read starts from the position served')
      return
    }
    if (batch.relisted !== undefined) {
      relists++
      log?.warn({ source: source.name, position: label, read_at: batch.label ?? batch.position, problem: batch.relisted }, 'every kind read whole: the changes since the position served cannot be told')
    }
    const ready: Ready[] = []
    for (const change of batch.changes) {
      const { kind } = change
      if ('error' in change) {
        changes[kind].failed++
        // A kind is refused whole only as a whole read refuses it: a file, a list, a table read again.
        log?.error({ change: `${kind}: read whole`, kind, problem: change.error.message }, `change refused: ${kind} keeps its last good records, the other kinds follow their changes`)
        continue
      }
      ready.push(await prepare(change))
      if (closed) return
      changes[kind].succeeded++
    }
    if (ready.length > 0) installReady(ready, batch)
    moveTo(batch)
    for (const { kind } of ready) void compact(kind)
  }

  /**
   * Makes ready to install a change read: reports its records refused one by one, and answers what
   * makes its index once it is installed, on the snapshot being made then (with no turn of the event
   * loop in between, so that a compaction installed meanwhile is not lost). A record refused alone is
   * not served: a whole read leaves it out, a read by name takes it out.
   */
  async function prepare (change: Change): Promise<Ready> {
    const { kind } = change
    const description = describe(change)
    const refused = change.refused ?? new Map<string, string>()
    if (refused.size > 0) {
      changes[kind].failed++
      reportRefused(kind, description, refused.values())
    }
    if ('upsert' in change && isKeyed(kind)) {
      const remove = refused.size === 0 ? change.remove : [...change.remove, ...refused.keys()]
      return { kind, description, rowsRead: change.rowsRead, finish: (next) => namedIndex(kind, next.indexes[kind], change.upsert as never, remove, refused) }
    }
    const index = await applyChange(snapshot().indexes[kind], change)
    return {
      kind,
      description,
      rowsRead: change.rowsRead,
      finish () {
        wholeInstalls[kind]++
        return index
      }
    }
  }

  /** The next read starts from the batch's position, in its history. */
  function moveTo (batch: Batch) {
    position = batch.position
    label = batch.label ?? batch.position
    horizon = batch.horizon
    history = batch.history
    behind = undefined
  }

  /** Logs records refused one by one: each, up to REFUSALS_LOGGED, then how many more. */
  function reportRefused (kind: RecordKind, change: string, problems: Iterable<string>) {
    let count = 0
    for (const problem of problems) {
      if (++count <= REFUSALS_LOGGED) log?.error({ change, kind, problem }, `change refused: the record is not served, the other ${kind} follow their changes`)
    }
    if (count > REFUSALS_LOGGED) {
      log?.error({ change, kind, refused: count }, `change refused: ${count - REFUSALS_LOGGED} more records of ${kind} are not served, their problems not logged one by one`)
    }
  }

  /** The index with these records in and out, noted for a compaction under way. */
  function namedIndex<K extends KeyedKind> (kind: K, index: Index<K>, upsert: ReadonlyArray<unknown>, remove: readonly string[], refused: ReadonlyMap<string, string>): Index<K> {
    const noted = compacting.get(kind)
    if (noted !== undefined) {
      const keyField = KINDS[kind].key
      for (const record of upsert) noted.add((record as Record<string, string>)[keyField]!)
      for (const key of remove) noted.add(key)
    }
    return withRecords(index, upsert as never, remove, refused)
  }

  /** The records of these keys as `from` serves them, put into `index` (or taken out of it, where `from` has none), refused where `from` refuses them. */
  function carryOver<K extends KeyedKind> (index: Index<K>, from: Index<RecordKind>, keys: Iterable<string>): Index<K> {
    const served = (from as Index<KeyedKind>).byKey as { get(key: string): unknown }
    const servedRefused = 'refused' in from ? from.refused : new Map<string, string>()
    const upsert: unknown[] = []
    const remove: string[] = []
    const refused = new Map<string, string>()
    for (const key of keys) {
      const record = served.get(key)
      if (record === undefined) remove.push(key)
      else upsert.push(record)
      const problem = servedRefused.get(key)
      if (problem !== undefined) refused.set(key, problem)
    }
    return withRecords(index, upsert as never, remove, refused)
  }

  /** Installs the changes of one batch in one snapshot. */
  function installReady (ready: Ready[], batch: Batch) {
    let next = snapshot()
    version++
    for (const { kind, finish } of ready) next = next.withIndex(kind, finish(next) as never, version)
    current = next
    const rowsRead = ready.filter(({ rowsRead }) => rowsRead !== undefined).map(({ kind, rowsRead }) => [kind, rowsRead])
    log?.info({
      change: ready.map(({ description }) => description).join('; '),
      snapshot: { version, fingerprint: next.fingerprint },
      // The position of the source it was read at: one for every kind of the batch.
      source_position: batch.label ?? batch.position,
      records: next.counts(),
      // What each change cost, where the source counts it: a revocation among a million keys reads one row.
      ...rowsRead.length > 0 ? { rows_read: Object.fromEntries(rowsRead) } : {}
    }, 'change installed')
  }

  /**
   * Folds the kind's overlays into new bases, off to the side, then installs them with the records
   * installed meanwhile carried over; dropped if a whole read replaced the index meanwhile.
   */
  async function compact (kind: RecordKind) {
    if (compacting.has(kind) || current === undefined || !isKeyed(kind)) return
    const from = current.indexes[kind]
    const installs = wholeInstalls[kind]
    const noted = new Set<string>()
    compacting.set(kind, noted)
    try {
      const compacted = await compactIndex(from)
      if (compacted === undefined || closed || wholeInstalls[kind] !== installs) return
      current = snapshot().withIndex(kind, carryOver(compacted as Index<KeyedKind>, snapshot().indexes[kind], noted), snapshot().version)
    } catch (error) {
      log?.warn({ kind, problem: (error as Error).message }, 'compaction put off; the kind keeps its overlay')
    } finally {
      compacting.delete(kind)
    }
  }

  return {
    /**
     * Lists every kind whole; throws (a DataError naming where, record and field) when a kind is
     * refused whole (a bad file: a deploy artifact fails fast). Records refused one by one (bad rows
     * in PostgreSQL) are left out and counted, and logged once the changes are followed.
     */
    async load () {
      const started = Date.now()
      const { batch, wholes, refused, refusedKeys } = await readWhole(source)
      note(batch)
      confirm(batch, started)
      refusedAtStart = refused
      for (const kind of new Set(refused.map((refusal) => refusal.kind))) changes[kind].failed++
      current = await createSnapshot(wholes, ++version, refusedKeys)
      moveTo(batch)
      return current
    },
    /** Follows the source's changes from the position listed, reporting to `logger`; resolves once the source knows how it follows. */
    async follow (logger: LifecycleLog) {
      log = logger
      for (const kind of RECORD_KINDS) {
        const problems = refusedAtStart.filter((refusal) => refusal.kind === kind).map((refusal) => refusal.problem)
        if (problems.length > 0) reportRefused(kind, `${kind}: listed at start`, problems)
      }
      refusedAtStart = []
      if (confirmEveryMs !== undefined) {
        confirming = setInterval(() => want('changes'), confirmEveryMs)
        confirming.unref()
      }
      await source.watch({
        wake: () => want('changes'),
        behind (entries, oldestAt) { behind = { entries, oldestAt } },
        mode (mode, reason) {
          logger.info({ source: source.name, mode, reason }, `following changes by ${mode === 'poll' ? 'polling' : mode === 'notify' ? 'notifications' : 'watching the folder'}: ${reason}`)
        },
        following (up, problem) {
          if (up === following) return
          following = up
          if (up) {
            // What was missed is read now, not after the backoff of the reads that failed meanwhile.
            clearTimeout(timer)
            timer = undefined
            failures = 0
            logger.info({ source: source.name, unfollowed_ms: Date.now() - unfollowedAt }, 'following changes again; reading what changed meanwhile')
          }
          else {
            unfollowedAt = Date.now()
            logger.error({ source: source.name, problem: problem?.message }, 'cannot follow changes; the data read last keeps serving')
          }
        }
      })
    },
    /** Reads every kind again (SIGHUP). */
    reload () {
      want('list', 0)
    },
    current: snapshot,
    confirmedAt: () => confirmedAt,
    clockOffsetMs () {
      const offset = measured?.clockOffsetMs ?? 0
      // A measure is as good as half its round trip: within this, a clock NTP keeps is the better one.
      return Math.abs(offset) < CLOCK_TRUSTED_MS ? 0 : offset
    },
    info (): SnapshotInfo {
      const served = snapshot()
      return {
        source: source.name,
        version: served.version,
        fingerprint: served.fingerprint,
        installedAt: served.installedAt,
        records: served.counts(),
        changes: structuredClone(changes),
        readFailures,
        mode: source.mode,
        horizon,
        lag: behind === undefined ? { entries: 0, seconds: 0 } : { entries: behind.entries, seconds: Math.max(0, Date.now() - behind.oldestAt) / 1000 },
        replayLagSeconds: measured === undefined || measured.replayLagMs === null ? undefined : measured.replayLagMs / 1000,
        clockOffsetSeconds: (measured?.clockOffsetMs ?? 0) / 1000,
        // As of the last read: a transaction that ended since is not counted on.
        oldestOpenSeconds: oldestOpen === undefined ? 0 : (oldestOpen.seenAt - oldestOpen.since) / 1000,
        relists,
        following
      }
    },
    async close () {
      closed = true
      clearTimeout(timer)
      clearInterval(confirming)
      await source.close()
    }
  } satisfies Snapshots & Record<string, unknown>
}

export type Lifecycle = ReturnType<typeof createLifecycle>

/** One snapshot that never changes, from records given: for what serves no data (the OpenAPI writer). */
export async function fixedSnapshots (data: Parameters<typeof createSnapshot>[0]): Promise<Snapshots> {
  const snapshot = await createSnapshot(data)
  const changes = Object.fromEntries(RECORD_KINDS.map((kind) => [kind, { succeeded: 0, failed: 0 }])) as SnapshotInfo['changes']
  return {
    current: () => snapshot,
    // Data that never changes is always current.
    confirmedAt: () => Date.now(),
    clockOffsetMs: () => 0,
    info: () => ({ source: 'none', version: 1, fingerprint: snapshot.fingerprint, installedAt: snapshot.installedAt, records: snapshot.counts(), changes, readFailures: 0, mode: 'none', horizon: undefined, lag: { entries: 0, seconds: 0 }, replayLagSeconds: undefined, clockOffsetSeconds: 0, oldestOpenSeconds: 0, relists: 0, following: true })
  }
}
