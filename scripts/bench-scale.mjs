// The gateway-scale rows of npm run bench: a million keys and a hundred thousand organizations of
// ten members, served from PostgreSQL (two replicas). scripts/bench.mjs
// calls benchScale(); `npm run build && node scripts/bench-scale.mjs` runs it alone. Settings:
// BENCH_SCALE_KEYS (1000000), BENCH_SCALE_ORGANIZATIONS (100000), BENCH_SCALE_CHANGES (100: the
// changes made before RSS is read again; 40 of them are the timed revocations and mints).
//
// It reports the COPY floor (PostgreSQL handing over every row a replica reads), the start (spawn
// to first 200) and its ratio to the floor, RSS after start and after the changes, the time from a
// committed DELETE or INSERT to the first answer that shows it on every replica, p50 and p99 over 20
// revocations and 20 mints, the p99 of requests sent meanwhile from another process while a bulk
// reload runs, against the same client's p99 while nothing changes, and the servers' own longest
// event-loop delay in each; and the time for a member added to (removed from) an organization of
// ten to reach both replicas.
import { execFileSync, spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { setTimeout as sleep } from 'node:timers/promises'
import { serverArgs, startPostgres } from './bench-postgres.mjs'

const sha256 = (text) => createHash('sha256').update(text).digest('hex')
const fmt = (n, digits = 0) => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })
const quantile = (values, q) => { const s = [...values].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(s.length * q))] }
const rssMb = (pid) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024

async function status (url, key) {
  const res = await fetch(url, { headers: { authorization: `Bearer ${key}` } }).catch(() => undefined)
  await res?.arrayBuffer()
  return res?.status ?? 0
}

/** Starts dist/server.js as `npm start` does; its output goes to a file, read by nobody (as a log collector that keeps up). */
function startServer (root, env, work, name) {
  const started = performance.now()
  const child = spawn(process.execPath, serverArgs(root), {
    env: { PATH: process.env.PATH, LOG_LEVEL: 'info', RATE_LIMIT_PER_MINUTE: '1000000000', RATE_LIMIT_ANONYMOUS_PER_MINUTE: '1000000000', ...env },
    stdio: ['ignore', openSync(join(work, `${name}.log`), 'w'), openSync(join(work, `${name}.err`), 'w')]
  })
  return { child, started, url: `http://127.0.0.1:${env.PORT}`, log: join(work, `${name}.log`) }
}

/** Waits for the first 200 with this key; answers the milliseconds since the server was spawned. */
async function firstAnswer (server, key) {
  for (;;) {
    if (server.child.exitCode !== null) throw new Error(`a server exited: ${readFileSync(server.log, 'utf8').slice(-2000)}`)
    if (await status(`${server.url}/v1/providers`, key) === 200) return performance.now() - server.started
    await sleep(10)
  }
}

/** Milliseconds from `change()` (resolved when committed or renamed) until every server answers `expected` for the key. */
async function timeChange (servers, key, expected, change) {
  await change()
  const from = performance.now()
  await Promise.all(servers.map(async (server) => { while (await status(`${server.url}/v1/providers`, key) !== expected); }))
  return performance.now() - from
}

/** Requests from another process, 10 at a time, until stopped: answers their p99 and max. */
function probe (url, key) {
  const script = `
    const times = []; let stop = false
    process.on('SIGTERM', () => { stop = true })
    const one = async () => { while (!stop) { const s = performance.now(); const r = await fetch(${JSON.stringify(url)}, { headers: { authorization: 'Bearer ${key}' } }); await r.arrayBuffer(); times.push(performance.now() - s) } }
    await Promise.all(Array.from({ length: 10 }, one))
    times.sort((a, b) => a - b)
    console.log(JSON.stringify({ requests: times.length, p99: times[Math.floor(times.length * 0.99)], max: times.at(-1) }))`
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout.on('data', (chunk) => { out += chunk })
  return {
    async stop () {
      child.kill('SIGTERM')
      await new Promise((resolve) => child.once('exit', resolve))
      return JSON.parse(out)
    }
  }
}

/**
 * The longest event-loop delay of these servers since this was last asked (ms): their /metrics'
 * nodejs_eventloop_lag_max_seconds, which prom-client resets at each scrape.
 */
async function loopDelay (servers) {
  const delays = await Promise.all(servers.map(async (server) => {
    const text = await (await fetch(`${server.url}/metrics`)).text()
    return Number(/^nodejs_eventloop_lag_max_seconds (\S+)$/m.exec(text)[1]) * 1000
  }))
  return Math.max(...delays)
}

/**
 * The same client's latency with nothing changing, then while `change()` is made and until
 * `served()` (and for 1 s after), and the servers' longest event-loop delay in each.
 */
async function latencyDuringBulk (url, key, servers, change, served) {
  // Once before: the first request of a route builds what it needs (the member listing's query validator).
  await served()
  await loopDelay(servers)
  const quiet = probe(url, key)
  await sleep(3000)
  const idle = { ...await quiet.stop(), loop: await loopDelay(servers) }
  const loaded = probe(url, key)
  await sleep(500)
  const started = performance.now()
  await change()
  while (!await served()) await sleep(5)
  const bulkMs = performance.now() - started
  await sleep(1000)
  return { idle, busy: { ...await loaded.stop(), loop: await loopDelay(servers) }, bulkMs }
}

async function scalePostgres ({ root, work, keys, organizations, changes }) {
  const database = await startPostgres()
  const { default: pg } = await import('pg')
  const client = new pg.Client({ connectionString: database.url })
  const servers = []
  try {
    await client.connect()
    const env = { PATH: process.env.PATH, DATABASE_URL: database.url }
    execFileSync(process.execPath, [join(root, 'dist/cli/db.js'), 'migrate'], { env, stdio: 'pipe' })
    execFileSync(process.execPath, [join(root, 'dist/cli/db.js'), 'import', '--fixtures-dir', join(root, 'fixtures')], { env, stdio: 'pipe' })
    // Far past what data files hold (8 MiB each): made in the database itself. Key i's secret is `scale-key-i`.
    await client.query(`INSERT INTO organizations (id, position, name) SELECT 'org_' || o, o, 'Organization ' || o FROM generate_series(0, ${organizations - 1}) AS o`)
    await client.query(`INSERT INTO members (organization_id, id, position, email, first_name, last_name, role)
      SELECT 'org_' || o, 'user_' || o || '_' || m, m, 'u' || m || '@org' || o || '.example', 'First', 'Last', CASE WHEN m = 0 THEN 'org:admin' ELSE 'org:member' END
      FROM generate_series(0, ${organizations - 1}) AS o, generate_series(0, 9) AS m`)
    await client.query(`INSERT INTO keys SELECT 'key-' || i, encode(sha256(('scale-key-' || i)::bytea), 'hex'), CASE WHEN i % 10 = 0 THEN 'management' ELSE 'standard' END, 'org_' || (i % ${organizations})
      FROM generate_series(0, ${keys - 1}) AS i`)
    await client.query('VACUUM ANALYZE')
    const floorMs = await copyFloor(client)
    servers.push(startServer(root, { DATABASE_URL: database.url, PORT: '3702' }, work, 'pg-1'), startServer(root, { DATABASE_URL: database.url, PORT: '3703' }, work, 'pg-2'))
    const key = 'scale-key-1'
    const startMs = Math.max(...await Promise.all(servers.map((server) => firstAnswer(server, key))))
    await sleep(2000)
    const rssStart = Math.max(...servers.map((server) => rssMb(server.child.pid)))
    const times = { revocation: [], mint: [] }
    for (let n = 0; n < changes; n++) {
      const revoke = n % 2 === 0
      const subject = revoke ? 2 + n : keys + n
      const ms = await timeChange(servers, `scale-key-${subject}`, revoke ? 401 : 200, revoke
        ? () => client.query('DELETE FROM keys WHERE name = $1', [`key-${subject}`])
        : () => client.query("INSERT INTO keys VALUES ($1, $2, 'standard', 'org_1')", [`key-${subject}`, sha256(`scale-key-${subject}`)]))
      if (n < 40) times[revoke ? 'revocation' : 'mint'].push(ms)
    }
    await sleep(2000)
    const rssChanged = Math.max(...servers.map((server) => rssMb(server.child.pid)))
    // A rolling update: one more replica starts while the two serve (the start above is two at once).
    const joining = startServer(root, { DATABASE_URL: database.url, PORT: '3704' }, work, 'pg-3')
    servers.push(joining)
    const joinMs = await firstAnswer(joining, key)
    joining.child.kill('SIGTERM')
    servers.pop()
    // A bulk reload: every member's row is written again, and every organization read again.
    const bulk = await latencyDuringBulk(`${servers[0].url}/v1/providers`, key, servers,
      () => client.query("UPDATE members SET first_name = 'Bulk'"),
      async () => (await (await fetch(`${servers[0].url}/v1/organization/members?limit=1`, { headers: { authorization: 'Bearer scale-key-1000' } })).text()).includes('"Bulk"'))
    const small = await memberChanges(client, servers)
    return { floorMs, startMs, joinMs, rssStart, rssChanged, times, bulk, small, version: database.version }
  } finally {
    for (const server of servers) server.child.kill('SIGTERM')
    await client.end().catch(() => {})
    database.close()
  }
}

/**
 * The floor of a start: PostgreSQL handing over every row a replica reads (keys, organizations,
 * members) by COPY, to nothing. A replica's start is given as a ratio to it.
 */
async function copyFloor (client) {
  const { to } = await import('pg-copy-streams')
  const started = performance.now()
  for (const query of ['SELECT name, sha256, kind, organization_id FROM keys', 'SELECT id, name FROM organizations',
    'SELECT organization_id, id, email, first_name, last_name, role FROM members']) {
    await pipeline(client.query(to(`COPY (${query}) TO STDOUT (FORMAT binary)`)), new Writable({ write (_chunk, _encoding, done) { done() } }))
  }
  return performance.now() - started
}

/**
 * 20 members added to an organization of 10 (org_200, whose management key is key-200, revoked by no change) and 20 removed, one at a time: milliseconds from
 * the commit until every replica's member count shows it. A change of members reads its organization.
 */
async function memberChanges (client, servers) {
  const count = async (server) => {
    const res = await fetch(`${server.url}/v1/organization/members?limit=1`, { headers: { authorization: 'Bearer scale-key-200' } }).catch(() => undefined)
    return res?.status === 200 ? (await res.json()).total_count : -1
  }
  const counted = (total) => Promise.all(servers.map(async (server) => { while (await count(server) !== total) await sleep(1) }))
  const times = { added: [], removed: [] }
  let total = 10
  for (let n = 0; n < 40; n++) {
    const add = n % 2 === 0
    if (add) await client.query("INSERT INTO members (organization_id, id, position, email, role) VALUES ('org_200', $1, 20, 'new@org200.example', 'org:member')", [`new_${n}`])
    else await client.query("DELETE FROM members WHERE organization_id = 'org_200' AND id = $1", [`new_${n - 1}`])
    const from = performance.now()
    await counted(total += add ? 1 : -1)
    times[add ? 'added' : 'removed'].push(performance.now() - from)
  }
  return times
}

export async function benchScale ({ root, keys = 1_000_000, organizations = 100_000, changes = 100 }) {
  const work = mkdtempSync(join(tmpdir(), 'bench-scale-'))
  try {
    const postgres = await scalePostgres({ root, work, keys, organizations, changes })
    const ms = (n) => `${fmt(n)} ms`
    const row = (label, r) => [
      `| ${label}: start, spawn to first 200 (two replicas at once) | ${ms(r.startMs)} (${fmt(r.startMs / r.floorMs, 1)}× the floor) |`,
      `| ${label}: RSS after start, and after ${changes} changes | ${fmt(r.rssStart)} MB, ${fmt(r.rssChanged)} MB |`,
      `| ${label}: revocation to 401, p50 / p99 of 20 | ${ms(quantile(r.times.revocation, 0.5))} / ${ms(quantile(r.times.revocation, 0.99))} |`,
      `| ${label}: mint to 200, p50 / p99 of 20 | ${ms(quantile(r.times.mint, 0.5))} / ${ms(quantile(r.times.mint, 0.99))} |`,
      `| ${label}: requests, p99 (max); event loop's longest delay, with nothing changing | ${fmt(r.bulk.idle.p99, 1)} ms (${fmt(r.bulk.idle.max, 1)} ms); ${ms(r.bulk.idle.loop)} |`,
      `| ${label}: the same during a bulk reload of ${fmt(r.bulk.bulkMs)} ms | ${fmt(r.bulk.busy.p99, 1)} ms (${fmt(r.bulk.busy.max, 1)} ms); ${ms(r.bulk.busy.loop)} |`
    ]
    const lines = [
      '## Gateway scale',
      '',
      `${fmt(keys)} keys and ${fmt(organizations)} organizations of 10 members in PostgreSQL ${postgres.version} (data files hold at`,
      'most 8 MiB each: such data is PostgreSQL\'s), two replicas, every time to the slower of the two. The bulk reload is',
      '`UPDATE members SET first_name` on every member. Requests: 10 at a time from another process, on `GET /v1/providers`;',
      'the event loop\'s longest delay is the servers\' own `nodejs_eventloop_lag_max_seconds` over the same time (the',
      'slower replica\'s). The floor is PostgreSQL itself handing over every row a replica reads at start (`COPY ... TO',
      'STDOUT` of keys, organizations and members, to nothing), measured in the same run.',
      '',
      '| Measure | Value |',
      '|---|---:|',
      `| PostgreSQL: COPY floor, every row a replica reads at start | ${ms(postgres.floorMs)} |`,
      ...row('PostgreSQL', postgres),
      `| PostgreSQL: start of a third replica while the two serve, spawn to first 200 | ${ms(postgres.joinMs)} |`,
      `| PostgreSQL: a member added to an organization of 10, p50 / p99 of 20 | ${ms(quantile(postgres.small.added, 0.5))} / ${ms(quantile(postgres.small.added, 0.99))} |`,
      `| PostgreSQL: a member removed from it, p50 / p99 of 20 | ${ms(quantile(postgres.small.removed, 0.5))} / ${ms(quantile(postgres.small.removed, 0.99))} |`
    ]
    return { results: { postgres }, lines }
  } finally {
    rmSync(work, { recursive: true, force: true })
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { lines } = await benchScale({
    root: new URL('..', import.meta.url).pathname,
    keys: Number(process.env.BENCH_SCALE_KEYS ?? 1_000_000),
    organizations: Number(process.env.BENCH_SCALE_ORGANIZATIONS ?? 100_000),
    changes: Number(process.env.BENCH_SCALE_CHANGES ?? 100)
  })
  console.log(lines.join('\n'))
}
