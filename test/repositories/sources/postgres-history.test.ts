import { execFile } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import pg from 'pg'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { createLifecycle, type Lifecycle } from '../../../src/repositories/lifecycle.js'
import { createPostgresSource } from '../../../src/repositories/sources/postgres.js'
import { trimChanges } from '../../../src/repositories/sources/postgres-schema.js'
import { bearer, build, KEYS, makeData, recordsOf, watchLifecycle } from '../../helper.js'
import { databaseWith, latencyProxy, serverProgram, startPostgres, type PostgresServer, type Standby } from '../../postgres.js'
import { startServer } from '../../process.js'
import { PATIENCE_MS } from '../../patience.js'

// A replica knows which database history it follows, and how current that history is: a failover to
// a standby that lost transactions, a restore into another cluster, a transaction held open, a standby
// whose replay is paused, a clock that is off, a writer of the change log. Each once failed silently.

const run = promisify(execFile)

/** A procedure that commits `n` transactions, each running `statement` with `i` (1..n): churn, cheaply. */
const CHURN = `CREATE OR REPLACE PROCEDURE churn(n integer, statement text) LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..n LOOP
    EXECUTE statement USING i;
    COMMIT;
  END LOOP;
END $$`

/** Mints key `prefix-i` in transaction i: its hash made of i, 64 hex characters. */
const mint = (prefix: string) => `INSERT INTO keys VALUES ('${prefix}-' || $1, md5($1::text) || md5($1::text || 'x'), 'standard', 'org_alpha')`

const lifecycles: Lifecycle[] = []
const closing: Array<() => Promise<unknown>> = []
afterEach(async () => {
  await Promise.all(lifecycles.splice(0).map((lifecycle) => lifecycle.close()))
  for (const close of closing.splice(0).reverse()) await close().catch(() => {})
})

/** A client of `url`, ended after the test. */
async function connect (url: string) {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  client.on('error', () => {})
  closing.push(() => client.end())
  return client
}

/** A lifecycle following `url`, loaded and following, with what watchLifecycle gives and an app over it. */
async function follow (url: string, { confirmEveryMs = 1000, settings = {} }: { confirmEveryMs?: number, settings?: Record<string, unknown> } = {}) {
  const lifecycle = createLifecycle(createPostgresSource({ url, connectTimeoutMs: 0, pollIntervalMs: 250 }), { confirmEveryMs })
  lifecycles.push(lifecycle)
  await lifecycle.load()
  const watched = watchLifecycle(lifecycle)
  await watched.followed
  return { lifecycle, app: build({ snapshots: lifecycle, settings }), ...watched }
}

/** Milliseconds from now until `answer` gives true, polled every 20 ms for PATIENCE_MS at most; past it, a failure that says what never came. */
async function msUntil (what: string, answer: () => Promise<boolean>) {
  const start = performance.now()
  await expect.poll(answer, { timeout: PATIENCE_MS, interval: 20, message: `${what}: not within ${PATIENCE_MS} ms` }).toBe(true)
  return performance.now() - start
}

const statusOf = async (app: ReturnType<typeof build>, key: string) => (await app.inject({ url: '/v1/providers', headers: bearer(key) })).statusCode

describe('a replica through a virtual IP, at a failover to a standby that lost transactions', () => {
  let primary: PostgresServer
  let standby: Standby
  beforeAll(async () => { primary = await startPostgres() })
  afterAll(async () => {
    await standby?.close()
    await primary?.close()
  })

  it('reads every kind again from the new primary, and serves a key revoked there as revoked within 5 s', async () => {
    const { url, client } = await databaseWith(primary, makeData())
    closing.push(() => client.end())
    await client.query(CHURN)
    standby = await primary.startStandby()
    await standby.caughtUp()
    const proxy = await latencyProxy(url, 0)
    closing.push(proxy.close)
    const replicas = [await follow(proxy.url), await follow(proxy.url)]

    // The standby stops receiving: the 500 transactions committed next are lost to it.
    await standby.stop()
    await client.query('CALL churn(500, $1)', [mint('lost')])
    for (const { until } of replicas) await until((data) => data.keys.some((key) => key.name === 'lost-500'))
    await client.end().catch(() => {})
    await primary.stop()
    await standby.start()
    await standby.promote()
    const database = new URL(url).pathname.slice(1)
    proxy.retarget(standby.url(database))

    const promoted = await connect(standby.url(database))
    await promoted.query("DELETE FROM keys WHERE name = 'alpha-standard'")
    const elapsed = await msUntil('the key revoked on the new primary answered 401 on every replica', async () => (await Promise.all(replicas.map(({ app }) => statusOf(app, KEYS.alphaStandard)))).every((status) => status === 401))
    expect(elapsed).toBeLessThan(5000)
    for (const { lifecycle, app, warnings } of replicas) {
      // The new primary's state: the transactions it lost are not served.
      expect(await statusOf(app, KEYS.betaManagement)).toBe(200)
      expect(lifecycle.info().records.keys).toBe(makeData().keys.length - 1)
      expect(warnings.some((line) => /every kind read whole.*another history/.test(line))).toBe(true)
      expect(lifecycle.info().relists).toBe(1)
    }
  })
})

describe('a replica of a primary', () => {
  let server: PostgresServer
  beforeAll(async () => { server = await startPostgres() })
  afterAll(() => server?.close())

  // On a server of its own: a transaction open in another database as a replica reads holds its
  // position's xmin back, and a trim past that xmin is one it cannot tell it read past (a whole read,
  // rightly, which the second replica here must not need).
  it('reads every kind whole when the log was trimmed past its position, and says why', async () => {
    const { url, client: admin } = await databaseWith(server, makeData())
    closing.push(() => admin.end())
    const { lifecycle, until, warnings } = await follow(url)
    await admin.query("DELETE FROM keys WHERE name = 'alpha-standard'")
    await until((data) => data.keys.length === 3)
    // A replica away while entries past its position were trimmed: it cannot know what they named.
    const stale = createLifecycle(createPostgresSource({ url, connectTimeoutMs: 0 }))
    lifecycles.push(stale)
    await stale.load()
    await admin.query("DELETE FROM keys WHERE name = 'beta-management'")
    await until((data) => data.keys.length === 2)
    expect(await trimChanges(admin, 0)).toBeGreaterThan(0)
    const watched = watchLifecycle(stale)
    await watched.until((data) => data.keys.length === 2)
    expect(watched.warnings.some((warning) => warning.startsWith('every kind read whole: the changes since the position served cannot be told: the change log was trimmed past the position'))).toBe(true)
    // One that had read past what was trimmed follows on by name.
    await admin.query("DELETE FROM keys WHERE name = 'alpha-management'")
    await until((data) => data.keys.length === 1)
    expect(warnings.filter((warning) => warning.startsWith('every kind read whole'))).toEqual([])
    expect(lifecycle.current().counts().keys).toBe(1)
  })

  it('revokes within 2 s while a role with no grant holds a transaction open past 20,000 commits, logs no line past 8 KiB, and shows the held transaction in /metrics', async () => {
    const { url, client } = await databaseWith(server, makeData())
    closing.push(() => client.end())
    await client.query(CHURN)
    await client.query('CREATE ROLE idle_holder LOGIN')
    closing.push(() => client.query('DROP ROLE idle_holder'))
    const lines: string[] = []
    const lifecycle = createLifecycle(createPostgresSource({ url, connectTimeoutMs: 0 }), { confirmEveryMs: 1000 })
    lifecycles.push(lifecycle)
    await lifecycle.load()
    const logged = (object: object, message: string) => { lines.push(JSON.stringify({ ...object, msg: message })) }
    await lifecycle.follow({ info: logged, warn: logged, error: logged })
    const app = build({ snapshots: lifecycle, settings: { METRICS: true } })

    // Another database of the cluster, a role with no grant: BEGIN, an id, then idle.
    const holderUrl = new URL(url)
    holderUrl.pathname = '/postgres'
    holderUrl.username = 'idle_holder'
    const holder = await connect(holderUrl.toString())
    await holder.query('BEGIN')
    await holder.query('SELECT pg_current_xact_id()')
    await client.query('CALL churn(20000, $1)', ["UPDATE organizations SET name = 'Beta ' || $1 WHERE id = 'org_beta'"])
    await expect.poll(() => recordsOf(lifecycle.current()).organizations.find((organization) => organization.id === 'org_beta')?.name, { timeout: PATIENCE_MS, interval: 50 }).toBe('Beta 20000')

    await client.query("DELETE FROM keys WHERE name = 'alpha-standard'")
    const elapsed = await msUntil('the key revoked under the held transaction answered 401', async () => await statusOf(app, KEYS.alphaStandard) === 401)
    // The read once grew with every commit past the held transaction (docs/postgresql.md, "What a fleet
    // costs"); it now costs what the change costs. The bound leaves room for a busy machine, none for that growth.
    expect(elapsed).toBeLessThan(2000)
    const longest = Math.max(...lines.map((line) => Buffer.byteLength(line)))
    expect(longest).toBeLessThanOrEqual(8192)
    const metrics = (await app.inject({ url: '/metrics' })).body
    const held = Number(/^directory_source_oldest_transaction_seconds (\S+)$/m.exec(metrics)?.[1])
    expect(held).toBeGreaterThan(0)
    await holder.query('COMMIT')
  })

  it('refuses to let a writer with the documented grants hide a revocation by writing the change log', async () => {
    const { url, client } = await databaseWith(server, makeData())
    closing.push(() => client.end())
    await client.query('CREATE ROLE log_writer LOGIN')
    closing.push(() => client.query('DROP OWNED BY log_writer; DROP ROLE log_writer'))
    // The grants of the release before this one's docs: the tables, and INSERT on the log.
    await client.query('GRANT SELECT, INSERT, UPDATE, DELETE ON keys, organizations, members, providers, endpoints TO log_writer; GRANT INSERT ON directory_changes TO log_writer')
    const { app, until } = await follow(url)
    const writerUrl = new URL(url)
    writerUrl.username = 'log_writer'
    const writer = await connect(writerUrl.toString())
    // Entries claiming the ids of the transactions to come, then a wake-up that reads them.
    await writer.query("INSERT INTO directory_changes (txid, table_name) SELECT (pg_current_xact_id()::text::bigint + n)::text::xid8, 'keys' FROM generate_series(1, 50) AS n")
    await writer.query("INSERT INTO keys VALUES ('woken', repeat('a', 64), 'standard', 'org_alpha')")
    await until((data) => data.keys.some((key) => key.name === 'woken'))
    await writer.query("DELETE FROM keys WHERE name = 'alpha-standard'")
    await until((data) => !data.keys.some((key) => key.name === 'alpha-standard'))
    expect(await statusOf(app, KEYS.alphaStandard)).toBe(401)
    await expect(writer.query("UPDATE directory_changes SET table_name = 'nothing'")).rejects.toThrow(/permission denied|never changed/)
  })

  it('stops a key within 1.5 s of the expiry PostgreSQL set, on a replica whose clock runs 300 s slow', async () => {
    const { url, client } = await databaseWith(server, makeData())
    closing.push(() => client.end())
    const replica = await startServer({ DATABASE_URL: url, MAX_STALENESS_MS: '3000', METRICS: 'true' }, { wrapper: ['faketime', '-f', '-300s'] })
    closing.push(async () => { replica.process.kill('SIGKILL'); await replica.exited })
    const status = async () => (await fetch(`${replica.url}/v1/providers`, { headers: bearer(KEYS.alphaStandard) })).status
    expect(await status()).toBe(200)
    const { rows: [row] } = await client.query<{ at: Date }>("UPDATE keys SET expires_at = now() + interval '3 seconds' WHERE name = 'alpha-standard' RETURNING expires_at AS at")
    await expect.poll(status, { timeout: PATIENCE_MS, interval: 20 }).toBe(401)
    // Both on this machine's clock, which PostgreSQL shares.
    expect(Date.now() - row!.at.getTime()).toBeLessThan(1500)
    const metrics = await (await fetch(`${replica.url}/metrics`)).text()
    expect(Number(/^directory_source_clock_offset_seconds (\S+)$/m.exec(metrics)?.[1])).toBeCloseTo(300, 0)
  })
})

describe('a restore into a new cluster', () => {
  let old: PostgresServer
  let restored: PostgresServer
  beforeAll(async () => { [old, restored] = await Promise.all([startPostgres(), startPostgres()]) })
  afterAll(async () => { await Promise.all([old?.close(), restored?.close()]) })

  it('makes every running replica read every kind again, and loses no revocation made after it, on a replica started before or after it', async () => {
    const { url, client } = await databaseWith(old, makeData())
    closing.push(() => client.end())
    await client.query(CHURN)
    const proxy = await latencyProxy(url, 0)
    closing.push(proxy.close)
    const before = await follow(proxy.url)
    // The old cluster's log holds an entry at every id from here on for 300 transactions: ids the new
    // cluster's transactions will have after the restore.
    const target = await restored.createDatabase()
    const fresh = await connect(target)
    const newId = async () => Number((await fresh.query<{ id: string }>('SELECT pg_current_xact_id()::text AS id')).rows[0]!.id)
    const oldId = async () => Number((await client.query<{ id: string }>('SELECT pg_current_xact_id()::text AS id')).rows[0]!.id)
    const burn = async (id: () => Promise<number>, to: number) => { while (await id() < to) { /* one transaction each */ } }
    await burn(oldId, await newId() + 200)
    const dense = await oldId() + 1
    await client.query('CALL churn(300, $1)', [mint('old')])
    await before.until((data) => data.keys.some((key) => key.name === 'old-300'))

    // The old cluster's record of its last trim is copied too, with its ids.
    await trimChanges(client, 0)
    const dir = await mkdtemp(join(tmpdir(), 'dump-'))
    closing.push(() => rm(dir, { recursive: true, force: true }))
    await run(serverProgram('pg_dump'), ['-Fc', '-f', join(dir, 'dump'), url])
    await run(serverProgram('pg_restore'), ['-d', target, join(dir, 'dump')])
    proxy.retarget(target)
    const after = await follow(target)

    // The new cluster's transactions reach the ids the restored entries carry.
    await burn(newId, dense + 20)
    await fresh.query("DELETE FROM keys WHERE name = 'alpha-standard'")
    await fresh.query("DELETE FROM keys WHERE name = 'beta-management'")
    for (const { app } of [before, after]) {
      await expect.poll(async () => [await statusOf(app, KEYS.alphaStandard), await statusOf(app, KEYS.betaManagement)], { timeout: 10_000, interval: 20 }).toEqual([401, 401])
    }
    // Once each, for the restore: the trim the old cluster recorded says nothing of the new one's reads.
    expect(before.lifecycle.info().relists).toBe(1)
    expect(after.lifecycle.info().relists).toBe(0)
    expect(before.warnings.some((line) => /another history/.test(line))).toBe(true)
  })
})

describe('a replica of a hot standby whose replay is paused', () => {
  let primary: PostgresServer
  let standby: Standby
  beforeAll(async () => {
    primary = await startPostgres()
    standby = await primary.startStandby()
  })
  afterAll(async () => {
    await standby?.close()
    await primary?.close()
  })

  it('stops answering 200 for a key revoked on the primary within MAX_STALENESS_MS, says so, and serves again once replay resumes', async () => {
    const { url, client } = await databaseWith(primary, makeData())
    closing.push(() => client.end())
    await standby.caughtUp()
    const database = new URL(url).pathname.slice(1)
    const { app, lifecycle } = await follow(standby.url(database), { settings: { MAX_STALENESS_MS: 3000, METRICS: true } })
    const control = await connect(standby.url(database))
    await control.query('SELECT pg_wal_replay_pause()')
    closing.push(() => control.query('SELECT pg_wal_replay_resume()'))

    await client.query("DELETE FROM keys WHERE name = 'alpha-standard'")
    const elapsed = await msUntil('the key revoked on the primary stopped answering 200 on the paused standby', async () => await statusOf(app, KEYS.alphaStandard) !== 200)
    expect(elapsed).toBeLessThan(3000 + 300)
    const refused = await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })
    expect(refused.statusCode).toBe(503)
    expect(refused.headers['retry-after']).toBeDefined()
    expect((await app.inject({ url: '/ready' })).statusCode).toBe(503)
    expect(Number(/^directory_source_replay_lag_seconds (\S+)$/m.exec((await app.inject({ url: '/metrics' })).body)?.[1])).toBeGreaterThan(0)

    await control.query('SELECT pg_wal_replay_resume()')
    await expect.poll(() => statusOf(app, KEYS.alphaStandard), { timeout: PATIENCE_MS, interval: 20 }).toBe(401)
    expect(await statusOf(app, KEYS.betaManagement)).toBe(200)
    expect(lifecycle.info().replayLagSeconds).toBe(0)
  })
})

describe('a replica held to 40 % of a core, starting on a hot standby while its primary churns and vacuums', () => {
  // max_standby_streaming_delay is shortened from its 30 s default to 200 ms, so that a whole read of a
  // test's size lasts longer than it, as a gateway's does on the default. One standby at a time: a
  // standby's feedback holds back VACUUM on the primary for every other.
  const SHORT_DELAY = { max_standby_streaming_delay: '200ms' }
  let primary: PostgresServer
  let url: string
  beforeAll(async () => {
    primary = await startPostgres()
    const made = await databaseWith(primary, makeData())
    url = made.url
    await made.client.query(`INSERT INTO keys SELECT 'bulk-' || i, md5(i::text) || md5(i::text || 'x'), 'standard', 'org_alpha' FROM generate_series(1, 200000) AS i;
      CREATE TABLE churn (n integer); INSERT INTO churn SELECT generate_series(1, 1000)`)
    await made.client.end()
  })
  afterAll(() => primary?.close())

  /** A standby with these settings, caught up, closed after the test. */
  async function standbyWith (settings: Record<string, string>) {
    const standby = await primary.startStandby(settings)
    closing.push(() => standby.close())
    await standby.caughtUp()
    return standby
  }

  /** Starts a replica on `standby`, stopped 60 ms of every 100 (a CPU quota of 40 %), while the primary updates and vacuums; its start, or why it did not. */
  async function startThrottled (standby: Standby) {
    const churner = await connect(url)
    let starting = true
    const churning = (async () => {
      while (starting) {
        await churner.query('UPDATE churn SET n = n + 1')
        await churner.query('VACUUM churn')
      }
    })()
    // Awaited below; not an unhandled rejection meanwhile, when the test ends its client first.
    churning.catch(() => {})
    let throttle: NodeJS.Timeout | undefined
    let throttled = true
    try {
      return await startServer({ DATABASE_URL: standby.url(new URL(url).pathname.slice(1)) }, {
        onSpawn (child) {
          // Killed after the test from its spawn on, not from its start: a test that runs out of time
          // while the replica starts goes no further, and would leave it running (or stopped, by the
          // throttle below) once the worker ends, on a standby closed by then.
          const exited = new Promise((resolve) => child.once('exit', resolve))
          closing.push(async () => {
            if (child.exitCode !== null || child.signalCode !== null) return
            throttled = false
            clearInterval(throttle)
            child.kill('SIGKILL')
            await exited
          })
          throttle = setInterval(() => {
            child.kill('SIGCONT')
            setTimeout(() => { if (throttled) child.kill('SIGSTOP') }, 40)
          }, 100)
          child.once('exit', () => clearInterval(throttle))
        }
      }).then((replica) => {
        throttled = false
        clearInterval(throttle)
        replica.process.kill('SIGCONT')
        return { started: true as const, replica }
      }, (error: Error) => ({ started: false as const, output: error.message }))
    } finally {
      throttled = false
      clearInterval(throttle)
      starting = false
      await churning
    }
  }

  it('without hot_standby_feedback, the standby cancels its reads, and it says in one line what to set', async () => {
    const outcome = await startThrottled(await standbyWith(SHORT_DELAY))
    expect(outcome.started).toBe(false)
    const { output } = outcome as { output: string }
    const lines = output.split('\n').filter((line) => line.includes('conflict with recovery'))
    expect(lines, output).toHaveLength(1)
    expect(lines[0]).toMatch(/^cannot start: .*set hot_standby_feedback = on on the standby/)
  })

  it('with hot_standby_feedback on, as the docs set it, it starts and serves', async () => {
    const outcome = await startThrottled(await standbyWith({ ...SHORT_DELAY, hot_standby_feedback: 'on' }))
    expect(outcome.started).toBe(true)
    const { replica } = outcome as { replica: Awaited<ReturnType<typeof startServer>> }
    expect((await fetch(`${replica.url}/v1/providers`, { headers: bearer(KEYS.alphaStandard) })).status).toBe(200)
  })
})
