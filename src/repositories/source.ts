import { DataError, RECORD_KINDS, type DirectoryData, type Held, type RecordKind } from './records.js'
import { KeyTable } from './key-table.js'

/** Every record of a kind: keys may come as a KeyTable, built as they were read. */
export type Whole<K extends RecordKind> = K extends 'keys' ? ReadonlyArray<Held<K>> | KeyTable : ReadonlyArray<Held<K>>

/** A wait after `failures` failures in a row: 100 ms, then twice as long each time, up to `maxMs`. */
export function backoff (failures: number, maxMs: number): number {
  // Jitter, so that replicas that lost the same server do not come back in lockstep.
  return Math.min(100 * 2 ** failures, maxMs) * (0.5 + Math.random() / 2)
}

/** What the lifecycle asks a source to read of one kind: every record, or those of these keys. */
export interface ReadRequest<K extends RecordKind = RecordKind> {
  readonly kind: K
  readonly keys: readonly string[] | 'all'
}

/**
 * What a source hands over for one kind: every record of the kind, or the records a notice named
 * (`upsert`: those that exist, in full; `remove`: the keys of those that no longer do).
 */
export type Change<K extends RecordKind = RecordKind> = (
  | { readonly kind: K, readonly all: Whole<K> }
  | { readonly kind: K, readonly upsert: ReadonlyArray<Held<K>>, readonly remove: readonly string[] }
) & {
  /**
   * Records refused one by one (a bad row among good ones), by key, each with what is wrong with
   * it (naming table, row and field): left out of the change, they keep the version served.
   */
  readonly refused?: ReadonlyMap<string, string>
  /** The rows the read took from the source, when it counts them: what the change cost. */
  readonly rowsRead?: number
  /**
   * The version of the source it was read from: the folder's generation (or the files' signatures),
   * PostgreSQL's snapshot of the read's transaction. The changes of one read share it.
   */
  readonly sourceVersion?: string
}

/** What a source tells the lifecycle while it follows changes. */
export interface SourceEvents {
  /** Records of a kind changed: those named by `keys` (their key field), or any when absent. */
  changed(kind: RecordKind, keys?: readonly string[]): void
  /** Whether changes can be followed now (the connection is up, the folder exists); why not when not. */
  following(up: boolean, problem?: Error): void
  /** A notice of change was of no shape the source sends (anyone who can connect can send one): ignored, and why. */
  ignored(problem: string): void
}

/**
 * Where the records come from: the data files or PostgreSQL. A source only reads and tells of
 * changes; it knows nothing of what is served. The lifecycle (lifecycle.ts) decides when to read,
 * installs what was read, and keeps the last good records of a kind whose change it refuses.
 */
export interface Source {
  /** `files` or `postgres`, for the logs and the metrics. */
  readonly name: string
  /** Where the data is (a folder, a database without its password), for the logs. */
  readonly location: string
  /**
   * Reads these kinds from one version of the source (one generation of the folder, one
   * transaction), validated: an answer per request, in order, a Change or a DataError that refuses
   * that kind alone, naming where (file or table), record and field. Any error thrown is a failure to
   * read, tried again later.
   */
  read(requests: readonly ReadRequest[]): Promise<Array<Change | DataError>>
  /** Follows changes until close(). Call once, after the first reads. */
  watch(events: SourceEvents): void
  close(): Promise<void>
}

/** Every kind read whole, from one version of the source; throws a DataError when any record is refused. */
export async function readWhole (source: Source): Promise<{ [K in RecordKind]: Change<K> & { all: Whole<K> } }> {
  const changes = await source.read(RECORD_KINDS.map((kind) => ({ kind, keys: 'all' })))
  for (const change of changes) {
    if (change instanceof DataError) throw change
    // A record refused alone keeps the version served: at start there is none.
    const [problem] = change.refused?.values() ?? []
    if (problem !== undefined) throw new DataError(problem)
  }
  return Object.fromEntries(changes.map((change) => [(change as Change).kind, change])) as never
}

/** Every kind read whole, as records: `npm run check`, `npm run db -- import` and `export`. */
export async function readAll (source: Source): Promise<DirectoryData> {
  const changes = await readWhole(source)
  // A KeyTable made an array: the tools that read everything once want the records themselves.
  return Object.fromEntries(RECORD_KINDS.map((kind) => {
    const all = changes[kind].all
    return [kind, all instanceof KeyTable ? [...all.values()] : all]
  })) as unknown as DirectoryData
}
