// The gateway-scale rows of npm run bench: a million keys and a hundred thousand organizations of
// ten members in PostgreSQL, two replicas (data files hold at most 8 MiB each: data of this size is
// PostgreSQL's). scripts/bench.mjs calls benchScale(); `npm run build && node scripts/bench-scale.mjs`
// runs it alone; both take these settings: BENCH_SCALE_KEYS (1000000), BENCH_SCALE_ORGANIZATIONS
// (100000), BENCH_SCALE_CHANGES (100: the changes made before RSS is read again; 40 of them are the
// timed revocations and mints), and BENCH_BEFORE and BENCH_AFTER_FIRST (below).
//
// Before and after in one run: BENCH_BEFORE=/path/to/an/older/checkout (its dist/ built, its
// node_modules installed) measures that build too, in the same run on the same PostgreSQL server,
// one build after the other (the older first; BENCH_AFTER_FIRST=1 turns the order round), and prints
// the two side by side. Each build has a database of its own, made by its own `dist/cli/db.js`:
// `migrate` (each its own schema version), then `import` of the same files (the bundled providers and
// endpoints, and the first keys and organizations, as many as files of at most 8 MiB hold, which
// both builds read), then the rest of the rows added by the same SQL; the two databases hold the same
// rows.
//
// It reports, for each build: the COPY floor (PostgreSQL handing over every row a replica reads at
// start, to nothing), the start of two replicas at once (spawn to first 200) and its ratio to the
// floor, RSS after start and after the changes, the time from a committed DELETE or INSERT to the
// first answer that shows it on both replicas (p50 and p99 over 20 revocations and 20 mints), the
// p99 of requests sent meanwhile from another process while nothing changes and during a bulk
// reload, and the servers' own longest event-loop delay in each, a revocation committed right after an
// UPDATE of half the keys (which makes the replicas read the keys whole), the start of a third replica while
// the two serve, a member added to (removed from) an organization of 10 until both replicas show it,
// and `npm run db -- import` of the files.
import { execFileSync, spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { closeSync, cpSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmdirSync, rmSync, writeFileSync, writeSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { setTimeout as sleep } from 'node:timers/promises'
import { freePort, serverArgs, startPostgres } from './bench-postgres.mjs'

const sha256 = (text) => createHash('sha256').update(text).digest('hex')
const fmt = (n, digits = 0) => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })
const quantile = (values, q) => { const s = [...values].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(s.length * q))] }
const median = (values) => quantile(values, 0.5)
const rssMb = (pid) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024

/** A data file's limit (MAX_FILE_BYTES): the imported files stay under it, for the build that refuses larger ones. */
const FILE_LIMIT = 8 * 1024 * 1024
/** The keys and organizations imported from files (some 7 and 6 MB); the rest is added by SQL. */
const IMPORTED_KEYS = 50_000
const IMPORTED_ORGANIZATIONS = 5_000
/** The management key (`scale-key-1000`) of the organization of 10 whose members change; no change revokes it. */
const MEMBER_KEY = 1000

// Key i: secret `scale-key-i`, a management key when i is a multiple of 10, of organization i mod the
// number of organizations. Organization o: 10 members, the first its admin. The files and the SQL
// below make the same rows (positions included), checked by counting them.
const keyJson = (i, organizations) => `{"name":"key-${i}","sha256":"${sha256(`scale-key-${i}`)}","kind":"${i % 10 === 0 ? 'management' : 'standard'}","organization_id":"org_${i % organizations}"}`
const organizationJson = (o) => `{"id":"org_${o}","name":"Organization ${o}","members":[${Array.from({ length: 10 }, (_, m) =>
  `{"id":"user_${o}_${m}","email":"u${m}@org${o}.example","first_name":"First","last_name":"Last","role":"${m === 0 ? 'org:admin' : 'org:member'}"}`).join(',')}]}`
const rowsSql = ({ keys, organizations }, from) => [
  `INSERT INTO organizations (id, position, name) SELECT 'org_' || o, o, 'Organization ' || o FROM generate_series(${from.organizations}, ${organizations - 1}) AS o`,
  `INSERT INTO members (organization_id, id, position, email, first_name, last_name, role)
    SELECT 'org_' || o, 'user_' || o || '_' || m, m, 'u' || m || '@org' || o || '.example', 'First', 'Last', CASE WHEN m = 0 THEN 'org:admin' ELSE 'org:member' END
    FROM generate_series(${from.organizations}, ${organizations - 1}) AS o, generate_series(0, 9) AS m`,
  `INSERT INTO keys (name, sha256, kind, organization_id)
    SELECT 'key-' || i, encode(sha256(('scale-key-' || i)::bytea), 'hex'), CASE WHEN i % 10 = 0 THEN 'management' ELSE 'standard' END, 'org_' || (i % ${organizations})
    FROM generate_series(${from.keys}, ${keys - 1}) AS i`
]

/** Writes a JSON array of `element(i)` for i in [0, count), a chunk at a time; answers its size. */
function writeArray (path, count, element) {
  const fd = openSync(path, 'w')
  let size = 0
  let chunk = '['
  for (let i = 0; i < count; i++) {
    chunk += (i === 0 ? '' : ',') + element(i)
    if (chunk.length > 1 << 20) { size += writeSync(fd, chunk); chunk = '' }
  }
  size += writeSync(fd, chunk + ']')
  closeSync(fd)
  return size
}

/** The folder every build imports: the bundled lists, and the first keys and organizations. */
function importFiles (root, work, { keys, organizations }) {
  const dir = join(work, 'import')
  cpSync(join(root, 'fixtures'), dir, { recursive: true })
  const counts = { keys: Math.min(keys, IMPORTED_KEYS), organizations: Math.min(organizations, IMPORTED_ORGANIZATIONS) }
  const sizes = {
    keys: writeArray(join(dir, 'keys.json'), counts.keys, (i) => keyJson(i, organizations)),
    organizations: writeArray(join(dir, 'organizations.json'), counts.organizations, organizationJson)
  }
  for (const [kind, size] of Object.entries(sizes)) {
    if (size > FILE_LIMIT) throw new Error(`${kind}.json to import: ${size} bytes, over the limit of a data file (${FILE_LIMIT})`)
  }
  return { dir, counts, sizes }
}

async function status (url, key) {
  const res = await fetch(url, { headers: { authorization: `Bearer ${key}` } }).catch(() => undefined)
  await res?.arrayBuffer()
  return res?.status ?? 0
}

/**
 * A cgroup (v1's cpu controller, or v2's) that holds its processes to `percent` of one CPU, as a
 * container's CPU limit does; its cgroup.procs file, or undefined where no cgroup can be made here
 * (not root, no cpu controller).
 */
function cpuQuota (percent) {
  const period = 100_000
  for (const [root, write] of [
    ['/sys/fs/cgroup/cpu', (dir) => { writeFileSync(join(dir, 'cpu.cfs_period_us'), String(period)); writeFileSync(join(dir, 'cpu.cfs_quota_us'), String(period * percent / 100)) }],
    ['/sys/fs/cgroup', (dir) => writeFileSync(join(dir, 'cpu.max'), `${period * percent / 100} ${period}`)]
  ]) {
    const dir = join(root, `model-gateway-directory-bench-${process.pid}`)
    try {
      mkdirSync(dir)
      write(dir)
      return { procs: join(dir, 'cgroup.procs'), remove: () => rmdirSync(dir) }
    } catch {
      try { rmdirSync(dir) } catch {}
    }
  }
  return undefined
}

/**
 * Starts `root`'s dist/server.js as `npm start` does; its output goes to a file, read by nobody (as a
 * log collector that keeps up). With `cgroup` (cpuQuota), the server joins it before it runs.
 */
function startServer (root, env, work, name, cgroup) {
  const started = performance.now()
  const [command, args] = cgroup === undefined
    ? [process.execPath, serverArgs(root)]
    : ['/bin/sh', ['-c', 'echo $$ > "$0" && exec "$@"', cgroup.procs, process.execPath, ...serverArgs(root)]]
  const child = spawn(command, args, {
    cwd: root,
    env: { PATH: process.env.PATH, LOG_LEVEL: 'info', RATE_LIMIT_PER_MINUTE: '1000000000', RATE_LIMIT_ANONYMOUS_PER_MINUTE: '1000000000', ...env },
    stdio: ['ignore', openSync(join(work, `${name}.log`), 'w'), openSync(join(work, `${name}.err`), 'w')]
  })
  const exited = new Promise((resolve) => child.once('exit', resolve))
  return { child, started, exited, url: `http://127.0.0.1:${env.PORT}`, log: join(work, `${name}.log`), err: join(work, `${name}.err`) }
}

async function stopServer (server) {
  if (server.child.exitCode === null) server.child.kill('SIGTERM')
  await server.exited
}

/** Waits for the first 200 with this key; answers the milliseconds since the server was spawned. */
async function firstAnswer (server, key) {
  for (;;) {
    if (server.child.exitCode !== null || server.child.signalCode !== null) throw new Error(`a server exited: ${readFileSync(server.err, 'utf8').slice(-1000)}${readFileSync(server.log, 'utf8').slice(-2000)}`)
    if (await status(`${server.url}/v1/providers`, key) === 200) return performance.now() - server.started
    await sleep(10)
  }
}

/** Milliseconds from `change()` (resolved when committed) until every server answers `expected` for the key. */
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

/**
 * The floor of a start: PostgreSQL handing over every row a replica reads at start (keys,
 * organizations, members), by COPY in the binary form the replicas read, drained into nothing.
 * The median of 3 (the first also warms the cache for the replicas, as any read before them would).
 */
async function copyFloor (client) {
  const { to } = await import('pg-copy-streams')
  const queries = ['SELECT name, sha256, kind, organization_id FROM keys', 'SELECT id, name FROM organizations',
    'SELECT organization_id, id, email, first_name, last_name, role FROM members']
  const times = []
  for (let round = 0; round < 3; round++) {
    const started = performance.now()
    for (const query of queries) {
      await pipeline(client.query(to(`COPY (${query}) TO STDOUT (FORMAT binary)`)), new Writable({ write (_chunk, _encoding, done) { done() } }))
    }
    times.push(performance.now() - started)
  }
  return median(times)
}

/**
 * 20 members added to an organization of 10 (that of key MEMBER_KEY) and 20 removed, alternated,
 * one at a time: milliseconds from the commit until every replica's member count shows it. A change
 * of members is read by its organization.
 */
async function memberChanges (client, servers, organization) {
  const count = async (server) => {
    const res = await fetch(`${server.url}/v1/organization/members?limit=1`, { headers: { authorization: `Bearer scale-key-${MEMBER_KEY}` } }).catch(() => undefined)
    return res?.status === 200 ? (await res.json()).total_count : -1
  }
  const counted = (total) => Promise.all(servers.map(async (server) => { while (await count(server) !== total) await sleep(1) }))
  await counted(10)
  const times = { added: [], removed: [] }
  let total = 10
  for (let n = 0; n < 40; n++) {
    const add = n % 2 === 0
    if (add) await client.query("INSERT INTO members (organization_id, id, position, email, role) VALUES ($1, $2, 10, 'new@org.example', 'org:member')", [organization, `new_${n}`])
    else await client.query('DELETE FROM members WHERE organization_id = $1 AND id = $2', [organization, `new_${n - 1}`])
    const from = performance.now()
    await counted(total += add ? 1 : -1)
    times[add ? 'added' : 'removed'].push(performance.now() - from)
  }
  return times
}

/** The members an organization grows to, the most one may have (member-list.ts, MAX_MEMBERS). */
const LARGE_MEMBERS = 100_000

/**
 * An organization of 10 (that of MEMBER_KEY) grown to LARGE_MEMBERS in one statement, then one of its
 * members changed: each until both replicas serve it, with the requests' latency and the servers'
 * longest event-loop delay meanwhile (latencyDuringBulk), and the replicas' RSS after.
 */
async function largeOrganization (client, servers, key, organization) {
  const membersPage = (offset) => Promise.all(servers.map(async (server) => {
    const res = await fetch(`${server.url}/v1/organization/members?offset=${offset}&limit=1`, { headers: { authorization: `Bearer scale-key-${MEMBER_KEY}` } })
    return res.status === 200 ? await res.text() : ''
  }))
  const url = `${servers[0].url}/v1/providers`
  const total = (await client.query('SELECT count(*)::int AS n FROM members WHERE organization_id = $1', [organization])).rows[0].n
  const grown = await latencyDuringBulk(url, key, servers,
    () => client.query(`INSERT INTO members (organization_id, id, position, email, role)
      SELECT $1, 'large_' || n, 100 + n, 'large' || n || '@org.example', 'org:member' FROM generate_series(1, $2::int) AS n`, [organization, LARGE_MEMBERS - total]),
    async () => (await membersPage(0)).every((text) => text.includes(`"total_count":${LARGE_MEMBERS}`)))
  // The member at the end of the page order: the last of the list rewritten.
  const changed = await latencyDuringBulk(url, key, servers,
    () => client.query("UPDATE members SET first_name = 'Changed' WHERE organization_id = $1 AND id = $2", [organization, `large_${LARGE_MEMBERS - total}`]),
    async () => (await membersPage(LARGE_MEMBERS - 1)).every((text) => text.includes('"Changed"')))
  await sleep(2000)
  return { grown, changed, rss: Math.max(...servers.map((s) => rssMb(s.child.pid))) }
}

/** The build's commit, and whether its src/ differs from it. */
function describeBuild (root) {
  try {
    const commit = execFileSync('git', ['-C', root, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim()
    const changed = execFileSync('git', ['-C', root, 'status', '--porcelain', '--', 'src'], { encoding: 'utf8' }).trim() !== ''
    return `${commit}${changed ? ' with changes to src/' : ''}`
  } catch {
    return 'no git commit'
  }
}

/** One build measured on a database of its own, on the PostgreSQL server `database`. */
async function measureBuild ({ build, database, server, files, work, keys, organizations, changes }) {
  const { default: pg } = await import('pg')
  const name = `scale_${build.label}`
  await server.query(`DROP DATABASE IF EXISTS ${name}`)
  await server.query(`CREATE DATABASE ${name}`)
  const url = database.url.replace(/\/postgres$/, `/${name}`)
  const client = new pg.Client({ connectionString: url })
  const servers = []
  try {
    await client.connect()
    // Its own schema and its own import, by its own npm run db.
    const db = (...args) => execFileSync(process.execPath, [join(build.root, 'dist/cli/db.js'), ...args], { cwd: build.root, env: { PATH: process.env.PATH, DATABASE_URL: url }, stdio: 'pipe' })
    db('migrate')
    const importStarted = performance.now()
    db('import', '--data-dir', files.dir)
    const importMs = performance.now() - importStarted
    // The rest of the rows, past what files hold: the same SQL for every build.
    console.error(`${build.label}: adding the rows up to ${fmt(keys)} keys and ${fmt(organizations)} organizations of 10...`)
    for (const sql of rowsSql({ keys, organizations }, files.counts)) await client.query(sql)
    await client.query('VACUUM ANALYZE')
    const { rows: [held] } = await client.query('SELECT (SELECT count(*) FROM keys) AS keys, (SELECT count(*) FROM organizations) AS organizations, (SELECT count(*) FROM members) AS members')
    if (Number(held.keys) !== keys || Number(held.organizations) !== organizations || Number(held.members) !== organizations * 10) {
      throw new Error(`${build.label}: the database holds ${JSON.stringify(held)}, not ${keys} keys and ${organizations} organizations of 10`)
    }
    const floorMs = await copyFloor(client)
    console.error(`${build.label}: COPY floor ${fmt(floorMs)} ms; starting two replicas...`)

    // Ports the system hands out, not fixed ones: another bench on the machine may hold those.
    const ports = new Set()
    while (ports.size < 3) ports.add(await freePort())
    const [one, two, three] = ports
    servers.push(startServer(build.root, { DATABASE_URL: url, PORT: String(one) }, work, `${build.label}-1`),
      startServer(build.root, { DATABASE_URL: url, PORT: String(two) }, work, `${build.label}-2`))
    const key = 'scale-key-1'
    const startMs = Math.max(...await Promise.all(servers.map((s) => firstAnswer(s, key))))
    await sleep(2000)
    const rssStart = Math.max(...servers.map((s) => rssMb(s.child.pid)))
    const times = { revocation: [], mint: [] }
    for (let n = 0; n < changes; n++) {
      // Timed: revocations (keys 2, 4, ... 100: never MEMBER_KEY) and mints, alternated; then more of the same, untimed.
      const revoke = n % 2 === 0
      const subject = revoke ? 2 + n : keys + n
      const ms = await timeChange(servers, `scale-key-${subject}`, revoke ? 401 : 200, revoke
        ? () => client.query('DELETE FROM keys WHERE name = $1', [`key-${subject}`])
        : () => client.query("INSERT INTO keys (name, sha256, kind, organization_id) VALUES ($1, $2, 'standard', 'org_1')", [`key-${subject}`, sha256(`scale-key-${subject}`)]))
      if (n < 40) times[revoke ? 'revocation' : 'mint'].push(ms)
    }
    await sleep(2000)
    const rssChanged = Math.max(...servers.map((s) => rssMb(s.child.pid)))
    // A rolling update: one more replica starts while the two serve (the start above is two at once).
    const joining = startServer(build.root, { DATABASE_URL: url, PORT: String(three) }, work, `${build.label}-3`)
    const joinMs = await firstAnswer(joining, key).finally(() => stopServer(joining))
    // A replica held to a fifth of a CPU (a container's limit on a busy node) starts too, only slower.
    const quota = cpuQuota(20)
    let throttledMs
    if (quota !== undefined) {
      const throttled = startServer(build.root, { DATABASE_URL: url, PORT: String(three) }, work, `${build.label}-20pc`, quota)
      throttledMs = await firstAnswer(throttled, key).catch((error) => `failed: ${error.message.split('\n').filter(Boolean).at(-1)}`).finally(() => stopServer(throttled))
      quota.remove()
    }
    // A bulk reload: every member's row is written again, and every organization read again.
    console.error(`${build.label}: bulk reload, member changes...`)
    const bulk = await latencyDuringBulk(`${servers[0].url}/v1/providers`, key, servers,
      () => client.query("UPDATE members SET first_name = 'Bulk'"),
      async () => (await (await fetch(`${servers[0].url}/v1/organization/members?limit=1`, { headers: { authorization: `Bearer scale-key-${MEMBER_KEY}` } })).text()).includes('"Bulk"'))
    // A revocation committed right after a statement over half the keys, more than the change log names:
    // the keys are read whole, and the revocation, which follows what was committed before it, waits for that read.
    await loopDelay(servers)
    await client.query("UPDATE keys SET disabled = false WHERE name LIKE 'key-%' AND right(name, 1) IN ('0', '2', '4', '6', '8')")
    const afterBulk = { ms: await timeChange(servers, `scale-key-${keys - 1}`, 401, () => client.query('DELETE FROM keys WHERE name = $1', [`key-${keys - 1}`])) }
    afterBulk.loop = await loopDelay(servers)
    afterBulk.rss = Math.max(...servers.map((s) => rssMb(s.child.pid)))
    const members = await memberChanges(client, servers, `org_${MEMBER_KEY % organizations}`)
    const large = await largeOrganization(client, servers, key, `org_${MEMBER_KEY % organizations}`)
    return { floorMs, importMs, startMs, joinMs, throttledMs, rssStart, rssChanged, times, bulk, afterBulk, members, large }
  } finally {
    await Promise.all(servers.map(stopServer))
    await client.end().catch(() => {})
    await server.query(`DROP DATABASE IF EXISTS ${name}`).catch(() => {})
  }
}

/**
 * Throws unless the settings can be measured: sizes that leave room for the changes made, and
 * `before` a checkout built and installed (its dist/ and its node_modules). npm run bench asks first,
 * so that a wrong BENCH_BEFORE is told at once, not after the other sections.
 */
export function checkScaleSettings ({ before, keys, organizations, changes }) {
  // Revocations take keys 2, 4, ...: never as far as MEMBER_KEY.
  if (!(changes >= 40 && 2 + changes < MEMBER_KEY)) throw new Error(`BENCH_SCALE_CHANGES: at least 40 (20 revocations and 20 mints are timed), less than ${MEMBER_KEY - 2}`)
  if (!(organizations >= 2) || !(keys > Math.max(MEMBER_KEY, 2 + changes))) {
    throw new Error(`BENCH_SCALE_KEYS: more than ${Math.max(MEMBER_KEY, 2 + changes)} (the keys changed, and the key of the organization whose members change); BENCH_SCALE_ORGANIZATIONS: at least 2`)
  }
  if (before === undefined) return
  for (const path of ['package.json', 'dist/server.js', 'dist/cli/db.js', 'node_modules']) {
    if (!existsSync(join(resolve(before), path))) throw new Error(`BENCH_BEFORE=${before}: no ${path} (a checkout of an older commit, with npm ci and npm run build run in it)`)
  }
}

/**
 * `before`: the root of an older build to measure beside this one (BENCH_BEFORE), or undefined.
 * Answers each build's figures (`results.after`, `results.before`) and the section's lines.
 */
export async function benchScale ({ root, before, keys = 1_000_000, organizations = 100_000, changes = 100, afterFirst = false }) {
  checkScaleSettings({ before, keys, organizations, changes })
  const builds = [{ label: 'after', root: resolve(root) }]
  if (before) {
    builds[afterFirst ? 'push' : 'unshift']({ label: 'before', root: resolve(before) })
  }
  for (const build of builds) build.describe = describeBuild(build.root)
  const work = mkdtempSync(join(tmpdir(), 'bench-scale-'))
  const database = await startPostgres()
  const { default: pg } = await import('pg')
  const server = new pg.Client({ connectionString: database.url })
  try {
    await server.connect()
    const files = importFiles(root, work, { keys, organizations })
    const results = {}
    for (const build of builds) {
      results[build.label] = await measureBuild({ build, database, server, files, work, keys, organizations, changes })
      // The next build's start on a quiet machine.
      await server.query('CHECKPOINT')
      await sleep(2000)
    }

    const ms = (n) => `${fmt(n)} ms`
    const p = (values) => `${ms(quantile(values, 0.5))} / ${ms(quantile(values, 0.99))}`
    const columns = builds.length === 1 ? ['Value'] : builds.map((build) => build.label)
    const row = (label, cell) => `| ${label} | ${builds.map((build) => cell(results[build.label])).join(' | ')} |`
    const lines = [
      '## Gateway scale',
      '',
      `${fmt(keys)} keys and ${fmt(organizations)} organizations of 10 members in PostgreSQL ${database.version} (data files hold`,
      'at most 8 MiB each: data of this size is PostgreSQL\'s), two replicas, every time to the slower of the two. The',
      'floor is PostgreSQL itself handing over every row a replica reads at start (`COPY (SELECT ...) TO STDOUT` of',
      'keys, organizations and members, in the binary form the replicas read, drained into nothing; median of 3),',
      'measured on the same database just before the replicas start. The bulk reload is `UPDATE members SET',
      'first_name` on every member. Requests: 10 at a time from another process, on `GET /v1/providers`; the event',
      'loop\'s longest delay is the servers\' own `nodejs_eventloop_lag_max_seconds` over the same time (the slower',
      `replica's). The import is \`npm run db -- import\` of files under the limit: the bundled lists,`,
      `${fmt(files.counts.keys)} keys (${fmt(files.sizes.keys / 1e6, 1)} MB) and ${fmt(files.counts.organizations)} organizations of 10 (${fmt(files.sizes.organizations / 1e6, 1)} MB); the rest of the rows are`,
      'added by SQL (`INSERT ... SELECT ... generate_series`).',
      ...(builds.length === 1
        ? []
        : ['', `Two builds in one run, one after the other, each on a database of its own made by its own \`npm run db\`
(migrate and import) and the same SQL: ${builds.map((build) => `${build.label}, ${build.describe} (\`${build.root}\`)`).join('; ')}.`]),
      '',
      `| Measure | ${columns.join(' | ')} |`,
      `|---|${columns.map(() => '---:').join('|')}|`,
      row('COPY floor: keys, organizations and members, every row a replica reads at start', (r) => ms(r.floorMs)),
      row('start, two replicas at once, spawn to first 200', (r) => `${ms(r.startMs)} (${fmt(r.startMs / r.floorMs, 1)}× the floor)`),
      row(`RSS after start, and after ${changes} changes`, (r) => `${fmt(r.rssStart)} MB, ${fmt(r.rssChanged)} MB`),
      row('revocation to 401 on both replicas, p50 / p99 of 20', (r) => p(r.times.revocation)),
      row('mint to 200 on both replicas, p50 / p99 of 20', (r) => p(r.times.mint)),
      row('requests, p99 (max); event loop\'s longest delay, with nothing changing', (r) => `${fmt(r.bulk.idle.p99, 1)} ms (${fmt(r.bulk.idle.max, 1)} ms); ${ms(r.bulk.idle.loop)}`),
      row('the same during a bulk reload (its duration)', (r) => `${fmt(r.bulk.busy.p99, 1)} ms (${fmt(r.bulk.busy.max, 1)} ms); ${ms(r.bulk.busy.loop)} (${ms(r.bulk.bulkMs)})`),
      row('a revocation committed right after an `UPDATE` of half the keys, to 401 on both replicas (the floor\'s multiple); event loop\'s longest delay; RSS after', (r) => `${ms(r.afterBulk.ms)} (${fmt(r.afterBulk.ms / r.floorMs, 1)}× the floor); ${ms(r.afterBulk.loop)}; ${fmt(r.afterBulk.rss)} MB`),
      row('start of a third replica while the two serve, spawn to first 200', (r) => `${ms(r.joinMs)} (${fmt(r.joinMs / r.floorMs, 1)}× the floor)`),
      row('start of a replica held to 20 % of a CPU (a cgroup\'s quota), spawn to first 200', (r) => typeof r.throttledMs === 'number' ? `${ms(r.throttledMs)} (${fmt(r.throttledMs / r.floorMs, 1)}× the floor)` : r.throttledMs ?? 'not measured: no cgroup could be made'),
      row('a member added to an organization of 10, on both replicas, p50 / p99 of 20', (r) => p(r.members.added)),
      row('a member removed from it, p50 / p99 of 20', (r) => p(r.members.removed)),
      row(`that organization grown to ${fmt(LARGE_MEMBERS)} members in one statement: requests p99 (max); event loop's longest delay (until served)`, (r) => `${fmt(r.large.grown.busy.p99, 1)} ms (${fmt(r.large.grown.busy.max, 1)} ms); ${ms(r.large.grown.busy.loop)} (${ms(r.large.grown.bulkMs)})`),
      row('then one of its members changed: the same', (r) => `${fmt(r.large.changed.busy.p99, 1)} ms (${fmt(r.large.changed.busy.max, 1)} ms); ${ms(r.large.changed.busy.loop)} (${ms(r.large.changed.bulkMs)})`),
      row('RSS after, with that organization', (r) => `${fmt(r.large.rss)} MB`),
      row(`\`npm run db -- import\` of the files (${fmt(files.counts.keys)} keys, ${fmt(files.counts.organizations * 10)} members)`, (r) => ms(r.importMs))
    ]
    return { results, lines }
  } finally {
    await server.end().catch(() => {})
    database.close()
    rmSync(work, { recursive: true, force: true })
  }
}

/** The settings from the environment, for npm run bench and for this script run alone. */
export function scaleSettings (env = process.env) {
  return {
    before: env.BENCH_BEFORE || undefined,
    afterFirst: env.BENCH_AFTER_FIRST === '1',
    keys: Number(env.BENCH_SCALE_KEYS ?? 1_000_000),
    organizations: Number(env.BENCH_SCALE_ORGANIZATIONS ?? 100_000),
    changes: Number(env.BENCH_SCALE_CHANGES ?? 100)
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { lines } = await benchScale({ root: new URL('..', import.meta.url).pathname, ...scaleSettings() })
  console.log(lines.join('\n'))
}
