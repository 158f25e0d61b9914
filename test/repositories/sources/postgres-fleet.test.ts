import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import pg from 'pg'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { createLifecycle, type Lifecycle } from '../../../src/repositories/lifecycle.js'
import { createPostgresSource } from '../../../src/repositories/sources/postgres.js'
import { migrate } from '../../../src/repositories/sources/postgres-schema.js'
import { replaceDirectory } from '../../../src/repositories/sources/postgres-write.js'
import { bearer, build, KEYS, makeData, sha256, watchLifecycle } from '../../helper.js'
import { startPgBouncer, type PgBouncer } from '../../pgbouncer.js'
import { databaseWith, startPostgres, type PostgresServer, type Standby } from '../../postgres.js'
import { startServer } from '../../process.js'
import { PATIENCE_MS } from '../../patience.js'

// The shapes a fleet runs PostgreSQL in: behind PgBouncer in transaction mode (its defaults), and on
// a hot standby made with pg_basebackup -R. Notifications reach neither; the replica polls the log.

const run = promisify(execFile)
const POLL_INTERVAL_MS = 250
/**
 * How soon a polling replica serves a change: a poll interval and a read, with room for a machine whose
 * cores are busy (beside two busy loops the test saw 485 ms), far below the minute of the safety poll
 * that a replica not polling would wait for. How soon exactly is the bench's to say, not a test's.
 */
const SERVED_WITHIN_MS = 4 * POLL_INTERVAL_MS

let server: PostgresServer
let standby: Standby
let bouncer: PgBouncer
let url: string
let admin: pg.Client
beforeAll(async () => {
  server = await startPostgres()
  url = await server.createDatabase()
  admin = new pg.Client({ connectionString: url })
  await admin.connect()
  await migrate(admin)
  standby = await server.startStandby()
  bouncer = await startPgBouncer(url)
})
afterAll(async () => {
  await admin?.end()
  await bouncer?.close()
  await standby?.close()
  await server?.close()
})

const lifecycles: Lifecycle[] = []
afterEach(() => Promise.all(lifecycles.splice(0).map((lifecycle) => lifecycle.close())))

const shapes: Array<[string, () => string]> = [
  ['behind PgBouncer in transaction mode', () => bouncer.url],
  ['on a hot standby', () => standby.url(new URL(url).pathname.slice(1))]
]

describe.each(shapes)('a replica %s', (_shape, replicaUrl) => {
  it('starts, says it polls the change log, and serves a revocation and a mint committed on the primary within a few poll intervals', async () => {
    await replaceDirectory(admin, makeData())
    await standby.caughtUp()
    const lifecycle = createLifecycle(createPostgresSource({ url: replicaUrl(), connectTimeoutMs: 0, pollIntervalMs: POLL_INTERVAL_MS }))
    lifecycles.push(lifecycle)
    await lifecycle.load()
    const { until, followed, modes } = watchLifecycle(lifecycle)
    await followed
    expect(modes).toEqual(['poll'])
    expect(lifecycle.info().mode).toBe('poll')
    const app = build({ snapshots: lifecycle })

    await admin.query("DELETE FROM keys WHERE name = 'alpha-standard'")
    let committed = performance.now()
    await until((data) => !data.keys.some((key) => key.name === 'alpha-standard'))
    expect(performance.now() - committed).toBeLessThan(SERVED_WITHIN_MS)
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(401)

    await admin.query("INSERT INTO keys VALUES ('minted', $1, 'standard', 'org_alpha')", [sha256('minted-secret')])
    committed = performance.now()
    await until((data) => data.keys.some((key) => key.name === 'minted'))
    expect(performance.now() - committed).toBeLessThan(SERVED_WITHIN_MS)
    expect((await app.inject({ url: '/v1/providers', headers: bearer('minted-secret') })).statusCode).toBe(200)
  })

  it('reads a transaction that commits after later ones were read, and was in progress at the position it read', async () => {
    await replaceDirectory(admin, makeData())
    await standby.caughtUp()
    const lifecycle = createLifecycle(createPostgresSource({ url: replicaUrl(), connectTimeoutMs: 0, pollIntervalMs: 50 }))
    lifecycles.push(lifecycle)
    await lifecycle.load()
    const { until, followed } = watchLifecycle(lifecycle)
    await followed
    const slow = new pg.Client({ connectionString: url })
    await slow.connect()
    try {
      // Begun first, committed last: in progress at every position the replica reads meanwhile.
      await slow.query('BEGIN')
      await slow.query("DELETE FROM keys WHERE name = 'alpha-standard'")
      await admin.query("INSERT INTO keys VALUES ('later', $1, 'standard', 'org_alpha')", [sha256('later-secret')])
      await until((data) => data.keys.some((key) => key.name === 'later'))
      await admin.query("INSERT INTO keys VALUES ('later-still', $1, 'standard', 'org_alpha')", [sha256('later-still-secret')])
      await until((data) => data.keys.some((key) => key.name === 'later-still'))
      await slow.query('COMMIT')
      await until((data) => !data.keys.some((key) => key.name === 'alpha-standard'))
    } finally {
      await slow.end()
    }
  })

  it('runs as a server process, whose start line says how it follows changes', async () => {
    await replaceDirectory(admin, makeData())
    await standby.caughtUp()
    const replica = await startServer({ DATABASE_URL: replicaUrl(), POLL_INTERVAL_MS: String(POLL_INTERVAL_MS), LOG_LEVEL: 'info' })
    try {
      // Written once the source knows how it follows, after "Server listening".
      await expect.poll(() => replica.output(), { timeout: PATIENCE_MS }).toContain('changes followed by polling the change log')
      const res = await fetch(`${replica.url}/v1/providers`, { headers: bearer(KEYS.alphaStandard) })
      expect(res.status).toBe(200)
    } finally {
      replica.process.kill('SIGTERM')
      await replica.exited
    }
  })
})

describe('a replica on the primary', () => {
  it('is woken by notifications, and holds two connections when idle: one listening, one for reads', async () => {
    // A database of its own: PgBouncer keeps server connections to the other one.
    const { url: own, client } = await databaseWith(server, makeData())
    try {
      const lifecycle = createLifecycle(createPostgresSource({ url: own, connectTimeoutMs: 0 }))
      lifecycles.push(lifecycle)
      await lifecycle.load()
      const { until, followed, modes } = watchLifecycle(lifecycle)
      await followed
      expect(modes).toEqual(['notify'])
      await client.query("DELETE FROM keys WHERE name = 'alpha-standard'")
      await until((data) => !data.keys.some((key) => key.name === 'alpha-standard'))
      const { rows } = await client.query("SELECT application_name FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'model-gateway-directory%' ORDER BY 1")
      expect(rows.map((row) => row.application_name)).toEqual(['model-gateway-directory (listening)', 'model-gateway-directory (reads)'])
    } finally {
      await client.end()
    }
  })
})

describe('npm run db -- migrate against a hot standby', () => {
  it('refuses in one line, and writes nothing', async () => {
    const result = await run(process.execPath, ['dist/cli/db.js', 'migrate'], { env: { PATH: process.env.PATH, DATABASE_URL: standby.url(new URL(url).pathname.slice(1)) } })
      .then(() => ({ code: 0, stderr: '' }), (error: { code: number, stderr: string }) => error)
    expect(result.code).toBe(1)
    expect(result.stderr).toBe('the database is a hot standby (read-only): run npm run db -- migrate against the primary\n')
  })
})
