import pino from 'pino'

/**
 * stdout for the JSON log lines, written in batches of about 16 KiB, at least every second, and at
 * exit (a normal exit, process.exit, an uncaught error; a SIGKILL or an out-of-memory kill loses at
 * most the last second). One write(2) per request line costs more than the rest of the request;
 * sonic-boom's own minLength batching measures the whole pending buffer again on every line, which
 * cost 15 % of the throughput here. sonic-boom still does the writing (partial writes, EAGAIN on a
 * non-blocking pipe).
 */
export function createLogStream (fd = 1, batchBytes = 16 * 1024) {
  const destination = pino.destination({ dest: fd, sync: true })
  let lines: string[] = []
  let pending = 0

  // Synchronous; the callback is for pino's logger.flush(callback).
  function flush (callback?: () => void) {
    if (lines.length > 0) {
      const batch = lines.join('')
      lines = []
      pending = 0
      destination.write(batch)
    }
    callback?.()
  }

  setInterval(() => flush(), 1000).unref()
  process.on('exit', () => flush())

  return {
    write (line: string) {
      lines.push(line)
      // Characters, not bytes: a batch size needs no exact count.
      pending += line.length
      if (pending >= batchBytes) flush()
    },
    flush
  }
}
