import { setImmediate as nextTurn } from 'node:timers/promises'

/** Work longer than this without a pause would be felt by the requests waiting behind it. */
const SLICE_MS = 10

/**
 * Cuts a long loop (a reload, a compaction) into slices of about SLICE_MS, with a turn of the event
 * loop between them, so that requests keep their usual latency while it runs. `due()` is cheap
 * enough to ask on every iteration.
 */
export function createSlicer () {
  let started = performance.now()
  let calls = 0
  return {
    due () {
      // The clock is read every 256 calls: reading it costs more than most iterations.
      return (++calls & 255) === 0 && performance.now() - started > SLICE_MS
    },
    /** The same, the clock read every time: for loops whose every iteration is long (a batch of rows). */
    overdue () {
      return performance.now() - started > SLICE_MS
    },
    async pause () {
      await nextTurn()
      started = performance.now()
    }
  }
}
