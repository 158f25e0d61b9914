import { DataError, type DirectoryData, type Loaded } from './records.js'
import { RECORD_KINDS, type RecordKind } from '../registry.js'
import { KeyTable } from './key-table.js'

/** Every record of a kind: keys may come as a KeyTable, built as they were read. */
export type Whole<K extends RecordKind> = K extends 'keys' ? ReadonlyArray<Loaded<K>> | KeyTable : ReadonlyArray<Loaded<K>>

/** A wait after `failures` failures in a row (a read, a reconnection): 100 ms, then twice as long each time, up to 5 s. */
export function backoff (failures: number): number {
  // Jitter, so that replicas that lost the same server do not come back in lockstep.
  return Math.min(100 * 2 ** failures, 5000) * (0.5 + Math.random() / 2)
}

/** What the source reads of one kind: every record, or those of these keys. */
export interface ReadRequest<K extends RecordKind = RecordKind> {
  readonly kind: K
  readonly keys: readonly string[] | 'all'
}

/**
 * What a source hands over for one kind: every record of the kind, or the records named as changed
 * (`upsert`: those that exist, in full; `remove`: the keys of those that no longer do).
 */
export type Change<K extends RecordKind = RecordKind> = (
  | { readonly kind: K, readonly whole: Whole<K> }
  | { readonly kind: K, readonly upsert: ReadonlyArray<Loaded<K>>, readonly remove: readonly string[] }
) & {
  /**
   * Records refused one by one (a bad row among good ones), by key, each with what is wrong with
   * it (naming table, row and field): left out of the change, and out of what is served.
   */
  readonly refused?: ReadonlyMap<string, string>
  /** The rows the read took from the source, when it counts them: what the change cost. */
  readonly rowsRead?: number
}

/** A kind the source could not hand over: its data is bad (the DataError names file or table, record and field). */
export interface Refusal {
  readonly kind: RecordKind
  readonly error: DataError
}

/**
 * What one read of a source hands over: the changes of every kind that changed, all read at one
 * position of the source (one PostgreSQL transaction snapshot, one generation of a folder), to be
 * installed as one snapshot: a state the source really had.
 */
export interface Batch {
  /** Where the source was: the next read hands over what changed after it. Opaque to all but its source. */
  readonly position: string
  /** The position in the words of the logs (the folder's generation); the position itself when absent. */
  readonly label?: string
  /** A number that grows with the position, comparable between replicas of one source (PostgreSQL: a transaction id). */
  readonly horizon?: number
  /** A change, or a refusal, of each kind that changed; none when nothing did. */
  readonly changes: ReadonlyArray<Change | Refusal>
  /** Set when every kind was read whole because what changed since the position could not be told: why. */
  readonly relisted?: string
  /**
   * Which history of the source the position belongs to (PostgreSQL: the cluster, its timeline, the
   * database and its change log). Horizons compare within one history only: a batch of another is
   * a relist, installed even when its horizon is lower (a failover to a standby that lost transactions).
   */
  readonly history?: string
  /**
   * Set when the source is behind the data served and the read installs nothing (a standby that has
   * not yet replayed what was served): the data is not confirmed current by it.
   */
  readonly waiting?: string
  /** What the read measured of the source itself, where it can (PostgreSQL). */
  readonly measured?: SourceMeasures
}

/** What a read of PostgreSQL measures of the database beside the data. */
export interface SourceMeasures {
  /** The source's clock minus this process's, in ms, measured at the read: a key's expiry is judged on the source's time. */
  readonly clockOffsetMs: number
  /** How far the data read is behind what its primary committed (a standby's replay lag), in ms: 0 on a primary; null when it cannot be told. */
  readonly replayLagMs: number | null
  /** The oldest transaction in progress at the read, which holds the change log's cut back; undefined when none was. */
  readonly oldestOpen?: number
}

/** How a source learns that something may have changed. */
export type FollowMode = 'notify' | 'poll' | 'watch'

/** What a source tells the lifecycle while it follows changes. */
export interface SourceEvents {
  /** Something may have changed since the position: a read of the changes is due. Says nothing of what. */
  wake(): void
  /** Whether changes can be followed now (the database answers, the folder exists); why not when not. */
  following(up: boolean, problem?: Error): void
  /** How changes are learnt of from now on, and why (a hot standby, a pooler that drops notifications). */
  mode(mode: FollowMode, reason: string): void
  /** A read under way found `entries` changes past the position, the oldest written at `oldestAt` (ms since the epoch). */
  behind(entries: number, oldestAt: number): void
}

/**
 * Where the records come from: the data files or PostgreSQL. A source lists every kind at a
 * position, then hands over what changed after a position, each read at one position of its own; it
 * knows nothing of what is served. The lifecycle (lifecycle.ts) decides when to read, installs each
 * batch as one snapshot, and keeps the last good records of a kind whose change it refuses.
 */
export interface Source {
  /** `files` or `postgres`, for the logs and the metrics. */
  readonly name: string
  /** Where the data is (a folder, a database without its password), for the logs. */
  readonly location: string
  /** How changes are learnt of now. */
  readonly mode: FollowMode
  /** Every kind whole, at one position. Any error thrown is a failure to read, tried again later. */
  list(): Promise<Batch>
  /** What changed after `position` (a batch's), at a newer position. Any error thrown is a failure to read. */
  changesSince(position: string): Promise<Batch>
  /** Tells of changes until close(); resolves once it knows how (its mode). Call once, after the first list. */
  watch(events: SourceEvents): Promise<void>
  close(): Promise<void>
}

/** A record refused alone: its kind, and what is wrong with it (naming table, row and field). */
export interface RecordRefusal {
  readonly kind: RecordKind
  readonly problem: string
}

/** Records refused one by one, by kind and key, each with what is wrong with it: for the snapshot to tell a refused record from an absent one. */
export type RefusedKeys = Partial<Record<RecordKind, ReadonlyMap<string, string>>>

/**
 * Every kind listed whole at one position, without the records refused one by one (a bad row among
 * good ones), which it answers beside them; throws the DataError of a kind refused whole (a file).
 */
export async function readWhole (source: Source): Promise<{
  batch: Batch
  wholes: { [K in RecordKind]: Whole<K> }
  refused: RecordRefusal[]
  refusedKeys: RefusedKeys
}> {
  const batch = await source.list()
  const wholes: Partial<Record<RecordKind, unknown>> = {}
  const refused: RecordRefusal[] = []
  const refusedKeys: RefusedKeys = {}
  for (const change of batch.changes) {
    if ('error' in change) throw change.error
    for (const problem of change.refused?.values() ?? []) refused.push({ kind: change.kind, problem })
    if (change.refused !== undefined) refusedKeys[change.kind] = change.refused
    if ('whole' in change) wholes[change.kind] = change.whole
  }
  return { batch, wholes: wholes as { [K in RecordKind]: Whole<K> }, refused, refusedKeys }
}

/** Every kind read whole, as records: `npm run check`, `npm run db -- import` and `export`; throws a DataError when any record is refused. */
export async function readAll (source: Source): Promise<DirectoryData> {
  const { wholes, refused: [first] } = await readWhole(source)
  if (first !== undefined) throw new DataError(first.problem)
  // A KeyTable made an array: the tools that read everything once want the records themselves.
  return Object.fromEntries(RECORD_KINDS.map((kind) => {
    const whole = wholes[kind]
    return [kind, whole instanceof KeyTable ? [...whole.values()] : whole]
  })) as unknown as DirectoryData
}
