import closeWithGrace from 'close-with-grace'
import { buildApp } from './app.js'
import { loadConfig } from './config.js'
import { loadFixtures } from './repositories/fixtures.js'
import { createDirectoryRepository } from './repositories/directory.js'
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
  let data
  try {
    config = loadConfig()
    data = await loadFixtures(config.FIXTURES_DIR)
  } catch (error) {
    // Bad configuration or data: say which and stop before listening.
    refuseToStart(error)
  }

  // JSON lines for log collectors; readable lines only when a person watches a terminal.
  const destination = process.stdout.isTTY ? undefined : createLogStream()
  const app = buildApp({
    repository: createDirectoryRepository(data),
    limits: config,
    log: destination ? { level: config.LOG_LEVEL, stream: destination } : { level: config.LOG_LEVEL, pretty: true }
  })

  // close() stops accepting connections and waits for the requests in flight: then exit 0. Past the
  // grace period close-with-grace exits 1, since requests were cut; its message goes through our
  // logger so that it is a JSON line like every other.
  closeWithGrace({ delay: config.SHUTDOWN_GRACE_MS, logger: app.log }, async ({ signal, err }) => {
    if (err) app.log.error({ err }, 'shutting down after an error')
    else app.log.info({ signal }, 'shutting down')
    await app.close()
  })

  try {
    await app.listen({ host: config.HOST, port: config.PORT })
  } catch (error) {
    // A port in use, an address this host does not have: as plain as a bad setting.
    refuseToStart(error)
  }
  app.log.info({ providers: data.providers.length, endpoints: data.endpoints.length, organizations: data.organizations.length, keys: data.keys.length, fixtures: config.FIXTURES_DIR }, 'directory loaded')
  // The start-up lines are worth seeing at once, not up to a second later.
  destination?.flush()
}
await main()
