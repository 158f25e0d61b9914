// What server.ts starts, once V8's compile cache is on: configuration, data, logger, listen, close.
import module from 'node:module'
import closeWithGrace from 'close-with-grace'
import { buildApp } from './app.js'
import { FORMER_NAMES, corsOrigins, describeSettings, loadConfig, unknownSettings, type Config } from './config.js'
import { readCommandLine } from './cli/command-line.js'
import { createLifecycle, type Lifecycle } from './repositories/lifecycle.js'
import { createFileSource } from './repositories/sources/files.js'
import type { Source } from './repositories/source.js'
import { createLogStream } from './log-stream.js'
import { truncate } from './truncate.js'

/** One line, bounded, whatever the cause: a log collector keeps it whole, a person reads it at once. */
function refuseToStart (error: unknown): never {
  const message = error instanceof Error ? error.message : String(error)
  process.stderr.write(`cannot start: ${truncate(message.replace(/\s+/g, ' ').trim(), 500)}\n`)
  process.exit(1)
}

/**
 * A Redis URL for a log line: without its password, which the log's readers are not all meant to know,
 * nor its query, where ioredis takes options, a password among them.
 */
function redisLocation (url: string) {
  try {
    const parsed = new URL(url)
    parsed.password = ''
    parsed.search = ''
    return parsed.href
  } catch {
    return '(REDIS_URL)'
  }
}

/** A limit a minute in the start line's words: 0 turns it off. */
const perMinute = (limit: number) => limit === 0 ? 'no limit' : `${limit} a minute`

/**
 * What the server uses, in the words of a start line: an operator reads there that the settings took
 * (a REDIS_URL or TRUST_PROXY left unset shows as such, not as silence).
 */
function describeUse (config: Config, source: Source) {
  const data = `${config.DATABASE_URL ? 'PostgreSQL at' : 'files in'} ${source.location}`
  // Mirrors createRateLimits: with both limits off, nothing is counted anywhere.
  const rateLimits = config.RATE_LIMIT_PER_MINUTE === 0 && config.RATE_LIMIT_ANONYMOUS_PER_MINUTE === 0
    ? 'off'
    : `${config.REDIS_URL ? `in Redis at ${redisLocation(config.REDIS_URL)}` : 'in memory'} (${perMinute(config.RATE_LIMIT_PER_MINUTE)} a key, ${perMinute(config.RATE_LIMIT_ANONYMOUS_PER_MINUTE)} an address)`
  const origins = corsOrigins(config)
  const trust = config.TRUST_PROXY
  // As app.ts reads it: digits alone are a number of hops, anything else addresses and ranges.
  const hops = trust !== undefined && /^[0-9]+$/.test(trust) ? Number(trust) : undefined
  const proxies = trust === undefined ? 'none' : hops === undefined ? trust : `${hops} hop${hops === 1 ? '' : 's'}`
  const staleness = config.MAX_STALENESS_MS === undefined ? 'unbounded (the last data serves however old)' : `${config.MAX_STALENESS_MS} ms, then keyed requests answer 503`
  return {
    fields: { data, rate_limits: rateLimits, cors_origins: origins, trusted_proxies: proxies, max_staleness_ms: config.MAX_STALENESS_MS ?? null, log_level: config.LOG_LEVEL },
    message: `using ${data}; rate limits ${rateLimits}; CORS origins: ${origins.join(', ') || 'none'}; trusted proxies: ${proxies}; staleness ${staleness}; log level ${config.LOG_LEVEL}`
  }
}

/** The modes in the start line's words. */
const FOLLOWED_BY = { notify: 'notifications', poll: 'polling the change log', watch: 'watching the folder', none: 'nothing' } as const

const HELP = `Serves the directory API at /v1 (every operation GET / lists, described at /v1/openapi.json), its
reference at /docs, its metrics at /metrics.

usage: npm start [-- --help]
       node dist/server.js            (as the container image runs it)

  -h, --help  prints this help

It takes no other argument. Its settings are environment variables, here with their defaults;
docs/configuration.md says what each does:

`

async function main () {
  if (readCommandLine('start', {}).values.help) {
    process.stdout.write(`${HELP}${describeSettings()}`)
    return
  }
  let config
  let source: Source
  let lifecycle: Lifecycle
  try {
    config = loadConfig()
    // Only a slip of a setting's name: a variable that merely shares a prefix (DATABASE_PASSWORD for
    // another program) is no reason to refuse.
    const slips = config.STRICT_SETTINGS ? unknownSettings().filter(({ closest }) => closest !== undefined) : []
    if (slips.length > 0) {
      throw new Error(`${slips.map(({ variable, closest }) => `${variable} is not a setting of this server: did you mean ${closest}?`).join('; ')} (STRICT_SETTINGS is true)`)
    }
    // The PostgreSQL client is loaded only for PostgreSQL, not on every start. Each try at reaching
    // it is told as it fails, before the logger exists: a plain line, as refuseToStart writes.
    source = config.DATABASE_URL
      ? (await import('./repositories/sources/postgres.js')).createPostgresSource({
          url: config.DATABASE_URL,
          connectTimeoutMs: config.DATABASE_CONNECT_TIMEOUT_MS,
          pollIntervalMs: config.POLL_INTERVAL_MS,
          readStallMs: config.DATABASE_READ_STALL_MS,
          onRetry: (line) => process.stderr.write(`${line}\n`)
        })
      : createFileSource(config.DATA_DIR)
    // With a bound on staleness, the source is read often enough to confirm the data current well within it.
    lifecycle = createLifecycle(source, { confirmEveryMs: config.MAX_STALENESS_MS === undefined ? undefined : Math.min(5000, Math.floor(config.MAX_STALENESS_MS / 3)) })
    await lifecycle.load()
  } catch (error) {
    // Bad configuration or data: say which and stop before listening.
    refuseToStart(error)
  }

  // JSON lines for log collectors; readable lines only when a person watches a terminal.
  const destination = process.stdout.isTTY ? undefined : createLogStream()
  const app = buildApp({
    snapshots: lifecycle,
    settings: config,
    log: destination ? { level: config.LOG_LEVEL, stream: destination } : { level: config.LOG_LEVEL, pretty: true }
  })

  // Before `Server listening`, which a reader takes for the end of the start: a warning after it is missed.
  // Names only: a value may be a secret.
  for (const [former, name] of Object.entries(FORMER_NAMES)) {
    if (process.env[former]) app.log.warn({ variable: former, setting: name }, `${former} is the former name of ${name}: it is read as ${name}; rename it`)
  }
  for (const { variable, closest } of unknownSettings()) {
    app.log.warn({ variable, did_you_mean: closest ?? null }, `${variable} is not a setting of this server, and is ignored${closest === undefined ? '' : `: did you mean ${closest}?`}`)
  }

  // SIGHUP reloads, as it does for nginx and most daemons; it never stops the process.
  process.on('SIGHUP', () => lifecycle.reload())

  // close() stops accepting connections and waits for the requests in flight: then exit 0. Past the
  // grace period close-with-grace exits 1, since requests were cut; its message goes through our
  // logger so that it is a JSON line like every other. The app closes first: /ready turns 503 and
  // answers say `Connection: close` from the signal on, not once the data source has closed (with
  // PostgreSQL, round trips that a busy machine makes long), and the data stays followed while the
  // last requests are served.
  closeWithGrace({ delay: config.SHUTDOWN_GRACE_MS, logger: app.log, skip: ['SIGHUP'] }, async ({ signal, err }) => {
    if (err) app.log.error({ err }, 'shutting down after an error')
    else app.log.info({ signal }, 'shutting down')
    await app.close()
    await lifecycle.close()
  })

  // The lists of the data read at start are compressed on the thread pool once the first answer is
  // out, not while the process starts (repositories/snapshot.ts says why).
  app.server.once('request', (_request, response) => response.once('finish', () => lifecycle.current().compressLists()))

  let address
  try {
    address = await app.listen({ host: config.HOST, port: config.PORT })
  } catch (error) {
    // A port in use, an address this host does not have: as plain as a bad setting.
    refuseToStart(error)
  }
  // What changed after the position listed is installed as it comes, each batch as one snapshot, or
  // refused kind by kind while the last good records keep serving. Known once it resolves: how (the mode).
  await lifecycle.follow(app.log)
  const use = describeUse(config, source)
  app.log.info(use.fields, use.message)
  const { version, fingerprint, records, mode } = lifecycle.info()
  app.log.info({ source: source.name, location: source.location, mode, snapshot: { version, fingerprint }, records, docs: `${address}/docs` },
    `directory loaded; changes followed by ${FOLLOWED_BY[mode]}; the API reference is at ${address}/docs`)
  // The start-up lines are worth seeing at once, not up to a second later.
  destination?.flush()
  // Everything a request needs is compiled by now: the next start reads it from the cache. (Node.js
  // would write it at exit, which a killed process never reaches.)
  module.flushCompileCache?.()
}
await main()
