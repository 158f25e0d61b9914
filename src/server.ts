import closeWithGrace from 'close-with-grace'
import pino from 'pino'
import { buildApp } from './app.js'
import { loadConfig } from './config.js'
import { loadFixtures } from './repositories/fixtures.js'
import { createDirectoryRepository } from './repositories/directory.js'

async function main () {
  let config
  let data
  try {
    config = loadConfig()
    data = await loadFixtures(config.FIXTURES_DIR)
  } catch (error) {
    // Bad configuration or data: say which and stop before listening.
    process.stderr.write(`cannot start: ${(error as Error).message}\n`)
    process.exit(1)
  }

  const app = buildApp({
    repository: createDirectoryRepository(data),
    // JSON lines for log collectors; readable lines only when a person watches a terminal.
    // Lines are gathered into 4 KiB writes (and flushed at least every second, and on exit):
    // one write(2) per request line costs more than the request itself.
    log: process.stdout.isTTY
      ? { level: config.LOG_LEVEL, pretty: true }
      : { level: config.LOG_LEVEL, stream: pino.destination({ dest: 1, sync: true, minLength: 4096, periodicFlush: 1000 }) }
  })

  closeWithGrace({ delay: config.SHUTDOWN_GRACE_MS }, async ({ signal, err }) => {
    if (err) app.log.error({ err }, 'shutting down after an error')
    else app.log.info({ signal }, 'shutting down')
    await app.close()
  })

  await app.listen({ host: config.HOST, port: config.PORT })
  app.log.info({ providers: data.providers.length, endpoints: data.endpoints.length, organizations: data.organizations.length, keys: data.keys.length, fixtures: config.FIXTURES_DIR }, 'directory loaded')
}

await main()
