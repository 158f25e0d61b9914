// What server.ts starts, once V8's compile cache is on: configuration, data, logger, listen, close.
import module from 'node:module'
import closeWithGrace from 'close-with-grace'
import { buildApp } from './app.js'
import { loadConfig } from './config.js'
import { createDirectory } from './repositories/directory.js'
import { createFileSource } from './repositories/sources/files.js'
import type { DirectorySource } from './repositories/source.js'
import { createLogStream } from './log-stream.js'
import { truncate } from './truncate.js'

/** One line, bounded, whatever the cause: a log collector keeps it whole, a person reads it at once. */
function refuseToStart (error: unknown): never {
  const message = error instanceof Error ? error.message : String(error)
  process.stderr.write(`cannot start: ${truncate(message.replace(/\s+/g, ' ').trim(), 500)}\n`)
  process.exit(1)
}

async function main () {
  let config
  let source: DirectorySource
  let data
  try {
    config = loadConfig()
    // The PostgreSQL client is loaded only for PostgreSQL, not on every start.
    source = config.DATABASE_URL
      ? (await import('./repositories/sources/postgres.js')).createPostgresSource({ url: config.DATABASE_URL, connectTimeoutMs: config.DATABASE_CONNECT_TIMEOUT_MS })
      : createFileSource(config.FIXTURES_DIR)
    data = await source.load()
  } catch (error) {
    // Bad configuration or data: say which and stop before listening.
    refuseToStart(error)
  }

  // JSON lines for log collectors; readable lines only when a person watches a terminal.
  const destination = process.stdout.isTTY ? undefined : createLogStream()
  const directory = createDirectory(source.name, data)
  const app = buildApp({
    snapshots: directory,
    settings: config,
    log: destination ? { level: config.LOG_LEVEL, stream: destination } : { level: config.LOG_LEVEL, pretty: true }
  })

  // Changes are installed whole, or refused whole while the current data keeps serving.
  source.watch({
    install (next, change) {
      directory.install(next)
      app.log.info({ change, source: source.name, records: directory.info().records }, 'directory reloaded')
    },
    reject (error, change) {
      directory.refused()
      app.log.error({ change, source: source.name, problem: error.message }, 'change refused; the current data keeps serving')
    }
  })
  // SIGHUP reloads, as it does for nginx and most daemons; it never stops the process.
  process.on('SIGHUP', () => source.reload())

  // close() stops accepting connections and waits for the requests in flight: then exit 0. Past the
  // grace period close-with-grace exits 1, since requests were cut; its message goes through our
  // logger so that it is a JSON line like every other.
  closeWithGrace({ delay: config.SHUTDOWN_GRACE_MS, logger: app.log, skip: ['SIGHUP'] }, async ({ signal, err }) => {
    if (err) app.log.error({ err }, 'shutting down after an error')
    else app.log.info({ signal }, 'shutting down')
    await source.close()
    await app.close()
  })

  try {
    await app.listen({ host: config.HOST, port: config.PORT })
  } catch (error) {
    // A port in use, an address this host does not have: as plain as a bad setting.
    refuseToStart(error)
  }
  app.log.info({ source: source.name, location: source.location, records: directory.info().records }, 'directory loaded')
  // The start-up lines are worth seeing at once, not up to a second later.
  destination?.flush()
  // Everything a request needs is compiled by now: the next start reads it from the cache. (Node.js
  // would write it at exit, which a killed process never reaches.)
  module.flushCompileCache?.()
}
await main()
