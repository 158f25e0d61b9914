import { KeyTable } from './key-table.js'
import { RECORD_KINDS, type DirectoryData, type RecordKind } from './records.js'
import type { PartChange, Snapshot } from './snapshot.js'

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
 * Where the records come from: the data files or PostgreSQL. A source only reads (a kind whole, or
 * the records a notice named) and tells of changes; the lifecycle (lifecycle.ts) decides when to
 * read, installs what was read, and keeps the last good records of a kind whose change it refuses.
 */
export interface Source {
  /** `files` or `postgres`, for the logs and the metrics. */
  readonly name: string
  /** Where the data is (a folder, a database without its password), for the logs. */
  readonly location: string
  /**
   * One kind, validated: every record (`all`), or the records of these keys. Throws a DataError
   * naming where (file or table), record and field when a record is bad; any other error is a
   * failure to read, tried again later. `current` is the snapshot served, whose unchanged member
   * blocks a new read shares.
   */
  read<K extends RecordKind>(kind: K, keys: readonly string[] | 'all', current: Snapshot | undefined): Promise<PartChange<K>>
  /** Follows changes until close(). Call once, after the first reads. */
  watch(events: SourceEvents): void
  close(): Promise<void>
}

/** Every kind read whole, once: `npm run check`, `npm run db -- import` and `export`. */
export async function readAll (source: Source): Promise<DirectoryData> {
  const entries = await Promise.all(RECORD_KINDS.map(async (kind) => {
    const change = await source.read(kind, 'all', undefined)
    // A KeyTable made an array: the tools that read everything once want the records themselves.
    return [kind, 'all' in change ? change.all instanceof KeyTable ? [...change.all.values()] : change.all : []] as const
  }))
  return Object.fromEntries(entries) as unknown as DirectoryData
}
