import type { DirectoryData } from './records.js'

/** Where a source's changes go: the directory installs them, or keeps serving what it has. */
export interface SourceListener {
  /** A new complete, validated snapshot; the parts that did not change are the same objects as before. */
  install(data: DirectoryData, change: string): void
  /** A change refused (bad data) or a failure to follow changes (a lost connection); the current data keeps serving. */
  reject(error: Error, change: string): void
}

/**
 * Where the records come from: the data files or PostgreSQL. A source produces complete, validated
 * snapshots; it never hands over a half-applied change.
 */
export interface DirectorySource {
  /** `files` or `postgres`, for the logs and the metrics. */
  readonly name: string
  /** Where the data is (a folder, a database without its password), for the logs. */
  readonly location: string
  /** Reads and validates everything; throws with one line naming where, record and field. */
  load(): Promise<DirectoryData>
  /** Follows changes until close(), handing each to the listener. Call once, after load(). */
  watch(listener: SourceListener): void
  /** Reads everything again now (SIGHUP); the outcome goes to the listener. */
  reload(): void
  close(): Promise<void>
}
