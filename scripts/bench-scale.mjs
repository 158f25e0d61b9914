// The gateway-scale rows of npm run bench: a million keys and a hundred thousand organizations of
// ten members, served from files (one process) and from PostgreSQL (two replicas). scripts/bench.mjs
// calls benchScale(); `npm run build && node scripts/bench-scale.mjs` runs it alone. Settings:
// BENCH_SCALE_KEYS (1000000), BENCH_SCALE_ORGANIZATIONS (100000), BENCH_SCALE_CHANGES (100: the
// changes made before RSS is read again; 40 of them are the timed revocations and mints).
//
// It reports, for each source: the start (spawn to first 200), RSS after start and after the
// changes, the time from a change (rename of keys.json; a committed DELETE or INSERT) to the first
// answer that shows it on every replica, p50 and p99 over 20 revocations and 20 mints, and the p99
// of requests sent meanwhile from another process while a bulk reload runs, against the same
// client's p99 while nothing changes, and the servers' own longest event-loop delay in each. For
// PostgreSQL also `npm run db -- import` of that data, and the time for a member added to (removed
// from) an organization of a million members to reach both replicas.
import { execFileSync, spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs'
import { rename, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { serverArgs, startPostgres } from './bench-postgres.mjs'

const sha256 = (text) => createHash('sha256').update(text).digest('hex')
const fmt = (n, digits = 0) => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })
const quantile = (values, q) => { const s = [...values].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(s.length * q))] }
const rssMb = (pid) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024

/** keys.json's text for these keys (key i's secret is `scale-key-i`), and organizations.json's. */
function keysText (count, organizations, revoked = new Set(), minted = 0) {
  const parts = []
  for (let i = 0; i < count + minted; i++) {
    if (revoked.has(i)) continue
    parts.push(`{"name":"key-${i}","sha256":"${sha256(`scale-key-${i}`)}","kind":"${i % 10 === 0 ? 'management' : 'standard'}","organization_id":"org_${i % organizations}"}`)
  }
  return `[${parts.join(',')}]`
}

function organizationsText (count) {
  const parts = []
  for (let o = 0; o < count; o++) {
    const members = Array.from({ length: 10 }, (_, m) => `{"id":"user_${o}_${m}","email":"u${m}@org${o}.example","first_name":"First","last_name":"Last","role":"${m === 0 ? 'org:admin' : 'org:member'}"}`)
    parts.push(`{"id":"org_${o}","name":"Organization ${o}","members":[${members.join(',')}]}`)
  }
  return `[${parts.join(',')}]`
}

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

async function scaleFiles ({ root, work, keys, organizations, changes }) {
  const dir = join(work, 'files')
  execFileSync('mkdir', ['-p', dir])
  for (const file of ['providers.json', 'zdr-endpoints.json']) execFileSync('cp', [join(root, 'fixtures', file), dir])
  await writeFile(join(dir, 'organizations.json'), organizationsText(organizations))
  await writeFile(join(dir, 'keys.json'), keysText(keys, organizations))
  const server = startServer(root, { FIXTURES_DIR: dir, PORT: '3701' }, work, 'files')
  const key = 'scale-key-1'
  const startMs = await firstAnswer(server, key)
  await sleep(2000)
  const rssStart = rssMb(server.child.pid)
  const revoked = new Set()
  let minted = 0
  const write = async () => {
    await writeFile(join(dir, 'keys.json.tmp'), keysText(keys, organizations, revoked, minted))
    return async () => rename(join(dir, 'keys.json.tmp'), join(dir, 'keys.json'))
  }
  const times = { revocation: [], mint: [] }
  for (let n = 0; n < changes; n++) {
    // Timed: revocations and mints, alternated; then more changes of the same kinds, untimed.
    const revoke = n % 2 === 0
    const subject = revoke ? 2 + n : keys + minted
    if (revoke) revoked.add(subject)
    else minted++
    const ms = await timeChange([server], `scale-key-${subject}`, revoke ? 401 : 200, await write())
    if (n < 40) times[revoke ? 'revocation' : 'mint'].push(ms)
  }
  await sleep(2000)
  const rssChanged = rssMb(server.child.pid)
  // A bulk reload: every key's organization changes.
  const bulkText = keysText(keys, organizations, revoked, minted).replaceAll('"organization_id":"org_', '"organization_id":"moved_')
  await writeFile(join(dir, 'keys.json.tmp'), bulkText)
  const bulk = await latencyDuringBulk(`${server.url}/v1/providers`, key, [server],
    () => rename(join(dir, 'keys.json.tmp'), join(dir, 'keys.json')),
    // Served once a management key's organization reads "moved": its member listing answers 404 then (key 1000: the revocations take keys 2 to 200).
    async () => await status(`${server.url}/v1/organization/members`, 'scale-key-1000') === 404)
  server.child.kill('SIGTERM')
  return { startMs, rssStart, rssChanged, times, bulk }
}

async function scalePostgres ({ root, work, keys, organizations, changes }) {
  const database = await startPostgres()
  const dir = join(work, 'files')
  const { default: pg } = await import('pg')
  const client = new pg.Client({ connectionString: database.url })
  const servers = []
  try {
    await client.connect()
    const env = { PATH: process.env.PATH, DATABASE_URL: database.url }
    execFileSync(process.execPath, [join(root, 'dist/cli/db.js'), 'migrate'], { env, stdio: 'pipe' })
    // The files of the files section, as they were written (keys.json as first written).
    await writeFile(join(dir, 'keys.json'), keysText(keys, organizations))
    const importStarted = performance.now()
    execFileSync(process.execPath, [join(root, 'dist/cli/db.js'), 'import', '--fixtures-dir', dir], { env, stdio: 'pipe' })
    const importMs = performance.now() - importStarted
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
    const large = await largeOrganization(client, servers)
    return { importMs, startMs, joinMs, rssStart, rssChanged, times, bulk, large, version: database.version }
  } finally {
    for (const server of servers) server.child.kill('SIGTERM')
    await client.end().catch(() => {})
    database.close()
  }
}

/**
 * One organization of a million members (made with SQL), then 20 members added and 20 removed, one
 * at a time: milliseconds from the commit until every replica's member count shows it.
 */
async function largeOrganization (client, servers, members = 1_000_000) {
  await client.query("INSERT INTO organizations (id, name) VALUES ('org_large', 'Large')")
  await client.query(`INSERT INTO members (organization_id, id, position, email, first_name, last_name, role)
    SELECT 'org_large', 'user_' || i, i * 10, 'user' || i || '@large.example', 'First', 'Last', 'org:member' FROM generate_series(1, ${members}) AS i`)
  await client.query("INSERT INTO keys VALUES ('large', $1, 'management', 'org_large')", [sha256('large-key')])
  const count = async (server) => {
    const res = await fetch(`${server.url}/v1/organization/members?limit=1`, { headers: { authorization: 'Bearer large-key' } }).catch(() => undefined)
    return res?.status === 200 ? (await res.json()).total_count : -1
  }
  const counted = (total) => Promise.all(servers.map(async (server) => { while (await count(server) !== total) await sleep(1) }))
  await counted(members)
  const times = { added: [], removed: [] }
  let total = members
  for (let n = 0; n < 40; n++) {
    const add = n % 2 === 0
    // Spread over the page order: between two members, or one of them (never the same one twice).
    const at = 1 + Math.floor((n + 0.5) * members / 40)
    if (add) await client.query("INSERT INTO members (organization_id, id, position, email, role) VALUES ('org_large', $1, $2, 'new@large.example', 'org:member')", [`new_${n}`, at * 10 + 5])
    else await client.query("DELETE FROM members WHERE organization_id = 'org_large' AND id = $1", [`user_${at}`])
    const from = performance.now()
    await counted(total += add ? 1 : -1)
    times[add ? 'added' : 'removed'].push(performance.now() - from)
  }
  return times
}

export async function benchScale ({ root, keys = 1_000_000, organizations = 100_000, changes = 100 }) {
  const work = mkdtempSync(join(tmpdir(), 'bench-scale-'))
  try {
    const files = await scaleFiles({ root, work, keys, organizations, changes })
    const postgres = await scalePostgres({ root, work, keys, organizations, changes })
    const ms = (n) => `${fmt(n)} ms`
    const row = (label, r) => [
      `| ${label}: start, spawn to first 200${label === 'files' ? '' : ' (two replicas at once)'} | ${ms(r.startMs)} |`,
      `| ${label}: RSS after start, and after ${changes} changes | ${fmt(r.rssStart)} MB, ${fmt(r.rssChanged)} MB |`,
      `| ${label}: revocation to 401, p50 / p99 of 20 | ${ms(quantile(r.times.revocation, 0.5))} / ${ms(quantile(r.times.revocation, 0.99))} |`,
      `| ${label}: mint to 200, p50 / p99 of 20 | ${ms(quantile(r.times.mint, 0.5))} / ${ms(quantile(r.times.mint, 0.99))} |`,
      `| ${label}: requests, p99 (max); event loop's longest delay, with nothing changing | ${fmt(r.bulk.idle.p99, 1)} ms (${fmt(r.bulk.idle.max, 1)} ms); ${ms(r.bulk.idle.loop)} |`,
      `| ${label}: the same during a bulk reload of ${fmt(r.bulk.bulkMs)} ms | ${fmt(r.bulk.busy.p99, 1)} ms (${fmt(r.bulk.busy.max, 1)} ms); ${ms(r.bulk.busy.loop)} |`
    ]
    const lines = [
      '## Gateway scale',
      '',
      `${fmt(keys)} keys and ${fmt(organizations)} organizations of 10 members (keys.json ${fmt(keysText(keys, organizations).length / 1e6)} MB,`,
      `organizations.json ${fmt(organizationsText(organizations).length / 1e6)} MB). Files: one process; PostgreSQL ${postgres.version}: two replicas, every`,
      'time to the slower of the two. A change to keys.json is a rename of the whole file; the bulk reload is every key',
      'moved to another organization (files), and `UPDATE members SET first_name` on every member (PostgreSQL). Requests:',
      '10 at a time from another process, on `GET /v1/providers`; the event loop\'s longest delay is the servers\' own',
      '`nodejs_eventloop_lag_max_seconds` over the same time (the slower replica\'s).',
      '',
      '| Measure | Value |',
      '|---|---:|',
      ...row('files', files),
      ...row('PostgreSQL', postgres),
      `| PostgreSQL: start of a third replica while the two serve, spawn to first 200 | ${ms(postgres.joinMs)} |`,
      `| PostgreSQL: a member added to an organization of 1,000,000, p50 / p99 of 20 | ${ms(quantile(postgres.large.added, 0.5))} / ${ms(quantile(postgres.large.added, 0.99))} |`,
      `| PostgreSQL: a member removed from it, p50 / p99 of 20 | ${ms(quantile(postgres.large.removed, 0.5))} / ${ms(quantile(postgres.large.removed, 0.99))} |`,
      `| PostgreSQL: \`npm run db -- import\` of that data | ${ms(postgres.importMs)} |`
    ]
    return { results: { files, postgres }, lines }
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
