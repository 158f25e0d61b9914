// What a fleet of replicas costs PostgreSQL (docs/postgresql.md, "What a fleet costs"): `npm run build &&
// node scripts/bench-fleet.mjs`. A million keys and a hundred thousand organizations of ten; REPLICAS
// (100) replicas following them, each the source a server runs (dist/repositories/sources/postgres.js),
// woken by notifications (notify) or polling every second (poll, as behind PgBouncer or on a standby).
// A replica's own snapshot is not built: what is measured is the database's side. Each replica starts
// from the position of one list, made once, not from a list of its own.
// It prints, for each mode: the connections held idle, the statements a second idle (BEGIN and COMMIT count), the rows read by
// all replicas for one revocation, and the rows read when every replica's connections are cut while 5
// keys are revoked, then come back (with how long the last took to catch up); then, woken by
// notifications, the same revocation after a transaction was held open while HELD_COMMITS (5,000)
// one-row transactions committed. Bytes are counted both ways by a proxy every replica connects through.
import net from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { startPostgres } from './bench-postgres.mjs'

const REPLICAS = Number(process.env.REPLICAS ?? 100)
const KEYS = Number(process.env.BENCH_SCALE_KEYS ?? 1_000_000)
const ORGANIZATIONS = Number(process.env.BENCH_SCALE_ORGANIZATIONS ?? 100_000)
const IDLE_SECONDS = 10
const HELD_COMMITS = Number(process.env.HELD_COMMITS ?? 5000)

/** A TCP proxy to `port` that counts the bytes it carries, both ways: what the replicas cost the network. */
async function countingProxy (port) {
  const counted = { bytes: 0 }
  const proxy = net.createServer((client) => {
    const upstream = net.connect(port, '127.0.0.1')
    for (const [from, to] of [[client, upstream], [upstream, client]]) {
      from.on('data', (chunk) => { counted.bytes += chunk.length; to.write(chunk) })
      from.on('close', () => to.destroy())
      from.on('error', () => {})
    }
  })
  await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve))
  return { port: proxy.address().port, counted, close: () => proxy.close() }
}

const { createPostgresSource } = await import('../dist/repositories/sources/postgres.js')
const { migrate } = await import('../dist/repositories/sources/postgres-schema.js')

// pg_stat_statements counts the statements the replicas run, as they end (pg_stat_database's counts lag by seconds).
const server = await startPostgres({ max_connections: REPLICAS * 2 + 20, shared_preload_libraries: 'pg_stat_statements' })
const url = server.url
const admin = new pg.Client({ connectionString: url })
await admin.connect()
const sql = (text, values) => admin.query(text, values)

try {
  await migrate(admin)
  await sql('CREATE EXTENSION pg_stat_statements')
  await sql(`INSERT INTO organizations (id, position, name) SELECT 'org_' || o, o, 'Organization ' || o FROM generate_series(0, ${ORGANIZATIONS - 1}) AS o`)
  await sql(`INSERT INTO members (organization_id, id, position, email, role)
    SELECT 'org_' || o, 'user_' || m, m, 'u' || m || '@org' || o || '.example', 'org:member' FROM generate_series(0, ${ORGANIZATIONS - 1}) AS o, generate_series(0, 9) AS m`)
  await sql(`INSERT INTO keys SELECT 'key-' || i, encode(sha256(('scale-key-' || i)::bytea), 'hex'), 'standard', 'org_' || (i % ${ORGANIZATIONS}) FROM generate_series(0, ${KEYS - 1}) AS i`)
  await sql('ANALYZE')
  console.log(`PostgreSQL ${server.url}: ${KEYS} keys, ${ORGANIZATIONS} organizations of 10, ${REPLICAS} replicas`)
  const proxy = await countingProxy(Number(new URL(url).port))
  const proxied = new URL(url)
  proxied.port = String(proxy.port)
  // The position a list records, whatever its form: the replicas of every pass start there.
  const lister = createPostgresSource({ url, connectTimeoutMs: 10_000 })
  const { position } = await lister.list()
  await lister.close()

  // Where it polls, a replica holds its reads' connection alone (here the listening one stands idle beside it).
  const connections = async (mode) => Number((await sql(`SELECT count(*) AS n FROM pg_stat_activity WHERE application_name ${mode === 'poll' ? "= 'model-gateway-directory (reads)'" : "LIKE 'model-gateway-directory%'"}`)).rows[0].n)
  // Every statement but the bench's own (which all name a pg_stat_ view).
  const statements = async () => Number((await sql("SELECT coalesce(sum(calls), 0) AS n FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_%'")).rows[0].n)
  let revoked = 0

  for (const mode of ['notify', 'poll', 'held']) {
    const replicas = Array.from({ length: REPLICAS }, () => {
      // pollIntervalMs 1000 in both: in notify mode it polls only while its listening connection is away.
      const source = createPostgresSource({ url: proxied.toString(), connectTimeoutMs: 10_000, pollIntervalMs: 1000 })
      const replica = { source, position, rows: 0, entries: 0, reading: false, again: false, caughtUp: 0, closed: false, wakes: 0, reads: 0 }
      replica.read = async () => {
        if (replica.closed) return
        replica.reads++
        if (replica.reading) { replica.again = true; return }
        replica.reading = true
        try {
          do {
            replica.again = false
            const batch = await source.changesSince(replica.position)
            for (const change of batch.changes) replica.rows += change.rowsRead ?? 0
            replica.position = batch.position
            replica.caughtUp = performance.now()
          } while (replica.again)
        } catch (error) {
          if (process.env.FLEET_DEBUG) console.error(error.message)
          setTimeout(() => void replica.read(), 200)
        } finally {
          replica.reading = false
        }
      }
      return replica
    })
    // Poll mode as a pooler or a standby makes it: no notification ever arrives.
    await Promise.all(replicas.map((replica) => replica.source.watch({
      wake: () => { replica.wakes++; if (mode !== 'poll' || replica.source.mode === 'poll') void replica.read() },
      following () {},
      mode () {},
      behind (entries) { replica.entries += entries }
    })))
    if (mode === 'poll') {
      for (const replica of replicas) {
        // Stands in for a listening connection that a pooler never delivers to.
        if (replica.source.mode === 'notify') replica.poll = setInterval(() => void replica.read(), 1000)
      }
    }
    // The start's probes (a NOTIFY each, which wakes every other replica) settle first.
    await sleep(5000)
    let holder
    if (mode === 'held') {
      // Another database, a session that took an id and went idle; then one-row transactions that every replica follows.
      const other = new URL(url)
      other.pathname = '/postgres'
      holder = new pg.Client({ connectionString: other.toString() })
      await holder.connect()
      await holder.query('BEGIN; SELECT pg_current_xact_id()')
      await sql(`DO $$ BEGIN FOR i IN 1..${HELD_COMMITS} LOOP UPDATE organizations SET name = 'Organization 0 ' || i WHERE id = 'org_0'; COMMIT; END LOOP; END $$`)
      const at = performance.now()
      await (async () => { while (replicas.some((replica) => replica.caughtUp < at)) await sleep(5) })()
    }
    const idleConnections = await connections(mode)
    const before = await statements()
    const wakesBefore = replicas.reduce((sum, replica) => sum + replica.wakes, 0)
    await sleep(IDLE_SECONDS * 1000)
    const perSecond = ((await statements()) - before) / IDLE_SECONDS
    if (process.env.FLEET_DEBUG) console.error(`wakes idle: ${replicas.reduce((sum, replica) => sum + replica.wakes, 0) - wakesBefore}, modes: ${[...new Set(replicas.map((replica) => replica.source.mode))]}`)

    // Rows of the tables, and entries of the log, read by every replica together.
    const rowsNow = () => [replicas.reduce((sum, replica) => sum + replica.rows, 0), replicas.reduce((sum, replica) => sum + replica.entries, 0)]
    const minus = ([rows, entries], [rows0, entries0]) => `${rows - rows0} rows and ${entries - entries0} log entries`
    const waitCaughtUp = async (since) => { while (replicas.some((replica) => replica.caughtUp < since)) await sleep(5) }
    let from = rowsNow()
    let bytes = proxy.counted.bytes
    let at = performance.now()
    await sql('DELETE FROM keys WHERE name = $1', [`key-${revoked++}`])
    await waitCaughtUp(at)
    const oneRevocation = `${minus(rowsNow(), from)} and ${((proxy.counted.bytes - bytes) / REPLICAS).toFixed(0)} bytes a replica, the last in ${(performance.now() - at).toFixed(0)} ms,`
    if (mode === 'held') {
      console.log(`held (notify, a transaction held open past ${HELD_COMMITS} commits): ${oneRevocation} read for one revocation (all replicas)`)
      await holder.end()
      for (const replica of replicas) replica.closed = true
      await Promise.all(replicas.map((replica) => replica.source.close()))
      continue
    }

    from = rowsNow()
    bytes = proxy.counted.bytes
    await sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'model-gateway-directory%'")
    for (let n = 0; n < 5; n++) await sql('DELETE FROM keys WHERE name = $1', [`key-${revoked++}`])
    at = performance.now()
    await waitCaughtUp(at)
    const reconnect = `${minus(rowsNow(), from)} and ${((proxy.counted.bytes - bytes) / REPLICAS).toFixed(0)} bytes a replica`
    const catchUp = performance.now() - at

    console.log(`${mode}: ${idleConnections} connections idle, ${perSecond.toFixed(1)} statements a second idle, ` +
      `${oneRevocation} read for one revocation (all replicas), ${reconnect} read after every replica's connections were cut and 5 keys revoked, ` +
      `the last caught up in ${catchUp.toFixed(0)} ms`)
    for (const replica of replicas) {
      clearInterval(replica.poll)
      replica.closed = true
    }
    await Promise.all(replicas.map((replica) => replica.source.close()))
  }
  proxy.close()
} finally {
  await admin.end()
  server.close()
}
