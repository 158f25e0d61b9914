import pino from 'pino'

// A character of a JavaScript string is at most 3 bytes of UTF-8.
const MAX_UTF8_BYTES_PER_CHAR = 3

/**
 * stdout for the JSON log lines, written in batches of about 16 KiB, at least every second, and at
 * exit (a normal exit, process.exit, an uncaught error; a SIGKILL or an out-of-memory kill loses at
 * most the last second). One write(2) per request line costs more than the rest of the request;
 * sonic-boom's own minLength batching measures the whole pending buffer again on every line
 * (docs/performance.md, "The request path"). sonic-boom still does the writing (partial writes, EAGAIN
 * on a non-blocking pipe).
 *
 * Each line is encoded once, into the batch's Buffer. A batch kept as a string cost three more
 * passes over its 16 KiB: sonic-boom measures a string, encodes it to write it, then encodes it
 * again into a Buffer of its own after the write.
 */
export function createLogStream (fd = 1, batchBytes = 16 * 1024) {
  const destination = pino.destination({ dest: fd, sync: true, contentMode: 'buffer' }) as unknown as { write(data: Buffer): boolean }
  let batch = Buffer.allocUnsafeSlow(batchBytes)
  let used = 0

  // Synchronous; the callback is for pino's logger.flush(callback).
  function flush (callback?: () => void) {
    if (used > 0) {
      const full = batch.subarray(0, used)
      // A new Buffer for the next batch: sonic-boom keeps this one until it is written in full.
      batch = Buffer.allocUnsafeSlow(batchBytes)
      used = 0
      destination.write(full)
    }
    callback?.()
  }

  setInterval(() => flush(), 1000).unref()
  process.on('exit', () => flush())

  return {
    write (line: string) {
      const room = line.length * MAX_UTF8_BYTES_PER_CHAR
      if (used + room > batchBytes) flush()
      // Longer than a batch (a stack trace): on its own.
      if (room > batchBytes) destination.write(Buffer.from(line))
      else used += batch.write(line, used)
    },
    flush
  }
}
