// Builds compared at gateway scale, PostgreSQL, in one run on one machine: for each checkout given
// (its dist/ built, its node_modules installed; the last one's scripts and libraries run this), a
// database of its own migrated and imported by its own `npm run db`, then 1,000,000 keys and 100,000
// organizations of 10 members added with the same SQL; the COPY floor (PostgreSQL handing over
// every row a replica reads at start, to nothing); two replicas started at once; a revocation, a
// mint and a member changed in an organization of 10, each until both replicas show it (p50 / p99
// of 20); RSS after start and after 100 changes.
//   node scripts/bench-compare.mjs /path/to/older/checkout /path/to/this/checkout
import { spawn, execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { setTimeout as sleep } from 'node:timers/promises'
const roots = process.argv.slice(2)
const main = roots.at(-1)
const { startPostgres, serverArgs } = await import(`${main}/scripts/bench-postgres.mjs`)
const { default: pg } = await import(`${main}/node_modules/pg/lib/index.js`)
const { to: copyTo } = await import(`${main}/node_modules/pg-copy-streams/index.js`)
const sha = (t) => createHash('sha256').update(t).digest('hex')
const q = (values, p) => { const s = [...values].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))] }
const rss = (pid) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024
const pgs = await startPostgres()
const server = new pg.Client({ connectionString: pgs.url }); await server.connect()
let databases = 0
pgs.createDatabase = async () => { const name = `scale_${++databases}`; await server.query(`CREATE DATABASE ${name}`); return pgs.url.replace(/\/postgres$/, `/${name}`) }
const results = {}
let port = 18100
for (const root of roots) {
  const url = await pgs.createDatabase()
  const env = { ...process.env, DATABASE_URL: url }
  execFileSync(process.execPath, [`${root}/dist/cli/db.js`, 'migrate'], { env, stdio: 'ignore' })
  execFileSync(process.execPath, [`${root}/dist/cli/db.js`, 'import', '--fixtures-dir', `${root}/fixtures`], { env, stdio: 'ignore' })
  const admin = new pg.Client({ connectionString: url }); await admin.connect()
  await admin.query(`INSERT INTO organizations (id, position, name) SELECT 'org_' || i, i, 'Org ' || i FROM generate_series(0, 99999) i`)
  await admin.query(`INSERT INTO members (organization_id, id, position, email, first_name, last_name, role) SELECT 'org_' || i, 'u' || m, m, 'u' || m || '@o' || i || '.example', 'First', 'Last', 'org:member' FROM generate_series(0, 99999) i, generate_series(1, 10) m`)
  await admin.query(`INSERT INTO keys SELECT 'key-' || i, encode(sha256(('scale-key-' || i)::bytea), 'hex'), CASE WHEN i % 10 = 0 THEN 'management' ELSE 'standard' END, 'org_' || (i % 100000) FROM generate_series(0, 999999) i`)
  await admin.query('VACUUM ANALYZE')
  // The floor: PostgreSQL handing over every row a replica reads at start.
  const floorStart = performance.now()
  for (const sql of ['SELECT name, sha256, kind, organization_id FROM keys', 'SELECT id, name FROM organizations', 'SELECT organization_id, id, email, first_name, last_name, role FROM members']) {
    await pipeline(admin.query(copyTo(`COPY (${sql}) TO STDOUT (FORMAT binary)`)), new Writable({ write (_c, _e, cb) { cb() } }))
  }
  const floorMs = performance.now() - floorStart
  const replica = (p) => {
    const started = performance.now()
    const child = spawn(process.execPath, serverArgs(root), { cwd: root, env: { PATH: process.env.PATH, PORT: String(p), DATABASE_URL: url, RATE_LIMIT_PER_MINUTE: '1000000000', RATE_LIMIT_ANONYMOUS_PER_MINUTE: '1000000000', LOG_LEVEL: 'warn' }, stdio: ['ignore', 'ignore', 'inherit'] })
    return { child, started, url: `http://127.0.0.1:${p}` }
  }
  const status = async (r, key, path = '/v1/providers') => { const res = await fetch(`${r.url}${path}`, { headers: { authorization: `Bearer ${key}` } }).catch(() => undefined); await res?.arrayBuffer(); return res?.status ?? 0 }
  const body = async (r, key, path) => { const res = await fetch(`${r.url}${path}`, { headers: { authorization: `Bearer ${key}` } }).catch(() => undefined); return res ? await res.text() : '' }
  const replicas = [replica(port++), replica(port++)]
  const startMs = await Promise.all(replicas.map(async (r) => { while (await status(r, 'scale-key-1') !== 200) await sleep(10); return performance.now() - r.started }))
  const rssStart = replicas.map((r) => rss(r.child.pid))
  const timeTo = async (change, check) => {
    const t = performance.now(); await change()
    return Math.max(...await Promise.all(replicas.map(async (r) => { while (!await check(r)) await sleep(1); return performance.now() - t })))
  }
  const revocation = []; const mint = []; const member = []
  for (let i = 0; i < 20; i++) {
    revocation.push(await timeTo(() => admin.query('DELETE FROM keys WHERE name = $1', [`key-${100 + i}`]), async (r) => await status(r, `scale-key-${100 + i}`) === 401))
    mint.push(await timeTo(() => admin.query("INSERT INTO keys VALUES ($1, $2, 'standard', 'org_5')", [`minted-${i}`, sha(`minted-key-${i}`)]), async (r) => await status(r, `minted-key-${i}`) === 200))
    member.push(await timeTo(() => admin.query("UPDATE members SET first_name = $1 WHERE organization_id = 'org_10' AND id = 'u3'", [`Changed ${i}`]), async (r) => (await body(r, 'scale-key-10', '/v1/organization/members?limit=5')).includes(`Changed ${i}`)))
  }
  for (let i = 0; i < 40; i++) await admin.query('DELETE FROM keys WHERE name = $1', [`key-${1000 + i}`])
  await sleep(2000)
  const rssAfter = replicas.map((r) => rss(r.child.pid))
  for (const r of replicas) r.child.kill('SIGTERM')
  await admin.end()
  results[root] = { floorMs, startMs: Math.max(...startMs), rssStart: Math.max(...rssStart), rssAfter: Math.max(...rssAfter), revocation: [q(revocation, 0.5), q(revocation, 0.99)], mint: [q(mint, 0.5), q(mint, 0.99)], member: [q(member, 0.5), q(member, 0.99)] }
  console.log(root, JSON.stringify(results[root]))
  await sleep(2000)
}
await server.end()
await pgs.close()
const f = (n) => Math.round(n).toLocaleString('en-US')
console.log(`| Measure | ${roots.map((r) => r.split('/').at(-1)).join(' | ')} |`)
console.log(`|---|${roots.map(() => '---:').join('|')}|`)
const row = (label, get) => console.log(`| ${label} | ${roots.map((r) => get(results[r])).join(' | ')} |`)
row('COPY floor: keys, organizations and members to nothing', (r) => `${f(r.floorMs)} ms`)
row('start, two replicas at once, spawn to first 200 (slower)', (r) => `${f(r.startMs)} ms (${(r.startMs / r.floorMs).toFixed(1)}× the floor)`)
row('RSS after start, after 100 changes', (r) => `${f(r.rssStart)} MB, ${f(r.rssAfter)} MB`)
row('revocation to 401 on both replicas, p50 / p99 of 20', (r) => `${f(r.revocation[0])} / ${f(r.revocation[1])} ms`)
row('mint to 200 on both replicas, p50 / p99 of 20', (r) => `${f(r.mint[0])} / ${f(r.mint[1])} ms`)
row('a member changed in an organization of 10, on both, p50 / p99 of 20', (r) => `${f(r.member[0])} / ${f(r.member[1])} ms`)
