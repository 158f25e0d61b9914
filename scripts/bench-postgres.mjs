// The PostgreSQL rows of npm run bench: revocation latency on three replicas of one database, and
// the reload of a large organization after a change to one of its members, and to all of them. scripts/bench.mjs calls
// benchPostgres(); `npm run build && node scripts/bench-postgres.mjs` runs it alone (settings:
// BENCH_PG_REVOCATIONS, 20; BENCH_PG_MEMBERS, 100000: the most an organization may have, MAX_MEMBERS; BENCH_PG_REPLICAS, 3).
//
// It starts a PostgreSQL server of its own (Debian's binaries, /usr/lib/postgresql/N/bin; as the
// postgres user when run as root) in a temporary folder, on a free port, and removes it after.
import { execFileSync, spawn } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir, userInfo } from 'node:os'
import { join } from 'node:path'
import { once } from 'node:events'

const sha256 = (text) => createHash('sha256').update(text).digest('hex')
const median = (values) => { const s = [...values].sort((a, b) => a - b); return s[Math.floor(s.length / 2)] }
const fmt = (n, digits = 0) => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })

export async function freePort () {
  const server = createServer().listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address()
  server.close()
  await once(server, 'close')
  return port
}

/** A throw-away cluster: initdb, pg_ctl start, with `settings` (`-c name=value`) besides; `close()` stops it and removes its folder. */
export async function startPostgres (settings = {}) {
  const versions = readdirSync('/usr/lib/postgresql').filter((name) => /^\d+$/.test(name)).sort((a, b) => b - a)
  const bin = versions.map((version) => `/usr/lib/postgresql/${version}/bin`).find((dir) => existsSync(join(dir, 'initdb')))
  if (!bin) throw new Error('no PostgreSQL server binaries in /usr/lib/postgresql/N/bin (apt-get install -y postgresql)')
  const dir = mkdtempSync(join(tmpdir(), 'bench-pg-'))
  const asRoot = userInfo().uid === 0
  const run = (program, args) => asRoot
    ? execFileSync('runuser', ['-u', 'postgres', '--', join(bin, program), ...args], { stdio: 'pipe' })
    : execFileSync(join(bin, program), args, { stdio: 'pipe' })
  if (asRoot) execFileSync('chown', ['postgres:postgres', dir])
  const port = await freePort()
  const data = join(dir, 'data')
  run('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--locale=C', '--no-sync'])
  // Commits as a real deployment makes them (fsync on): a revocation's time includes its commit.
  const options = Object.entries(settings).map(([name, value]) => ` -c ${name}=${value}`).join('')
  run('pg_ctl', ['-D', data, '-o', `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1${options}`, '-l', join(dir, 'log'), '-w', 'start'])
  return {
    url: `postgresql://postgres@127.0.0.1:${port}/postgres`,
    version: /\d+(\.\d+)+/.exec(execFileSync(join(bin, 'postgres'), ['--version'], { encoding: 'utf8' }))[0],
    close () {
      try { run('pg_ctl', ['-D', data, '-m', 'immediate', 'stop']) } catch {}
      rmSync(dir, { recursive: true, force: true })
    }
  }
}

/** The arguments `npm start` gives node, dist/server.js under `root` last: the benches start the server as it does. */
export function serverArgs (root) {
  // [exec] node <arguments> dist/server.js: a root of an older commit may lack the exec.
  const start = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).scripts.start.split(' ').filter((word) => word !== 'exec')
  return [...start.slice(1, -1), join(root, start.at(-1))]
}

function rssMb (pid) {
  return Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024
}

/** Starts dist/server.js on the database; resolves once it listens (its log says where). */
function startReplica (root, url, children) {
  const child = spawn(process.execPath, serverArgs(root), {
    // The polling below sends thousands of requests a minute with one key: no limit in the way.
    env: { PATH: process.env.PATH, PORT: '0', DATABASE_URL: url, RATE_LIMIT_PER_MINUTE: '1000000000', RATE_LIMIT_ANONYMOUS_PER_MINUTE: '1000000000' },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  children.add(child)
  let output = ''
  return new Promise((resolve, reject) => {
    const look = (chunk) => {
      output += chunk
      const match = /listening at (http:\/\/[^"\s]+)/i.exec(output)
      if (match) {
        // From here on the access lines are read and dropped, as a log collector would take them.
        child.stdout.off('data', look)
        child.stdout.resume()
        resolve({ child, url: match[1] })
      }
    }
    child.stdout.on('data', look)
    child.stderr.on('data', (chunk) => { output += chunk })
    child.once('exit', () => reject(new Error(`a replica exited: ${output}`)))
  })
}

async function status (url, key) {
  const res = await fetch(url, { headers: { authorization: `Bearer ${key}` } })
  await res.arrayBuffer()
  return res.status
}

/**
 * Measures, on a PostgreSQL server of its own:
 * - revocation: for each of `revocations` keys, the time from the DELETE's commit (as the client
 *   sees it) to the first 401 on each of `replicas` replicas, each polled without pause;
 * - reload: the time from the commit of a change to the last member of an organization of
 *   `members` members to the first answer that shows it, then the same for a change to every
 *   member (either change reads the organization whole), and the peak RSS meanwhile (sampled).
 * Answers the figures and the Markdown lines of a section for BENCHMARKS.md.
 */
export async function benchPostgres ({ root, revocations = 20, members = 100_000, replicas = 3 }) {
  const { default: pg } = await import('pg')
  const { migrate } = await import(join(root, 'dist/repositories/sources/postgres-schema.js'))
  const { replaceDirectory } = await import(join(root, 'dist/repositories/sources/postgres-write.js'))
  const { loadDataFolder } = await import(join(root, 'dist/repositories/sources/files.js'))

  const database = await startPostgres()
  const children = new Set()
  const client = new pg.Client({ connectionString: database.url })
  try {
    await client.connect()
    await migrate(client)
    await replaceDirectory(client, await loadDataFolder(join(root, 'fixtures')))

    // Revocation on every replica.
    const servers = await Promise.all(Array.from({ length: replicas }, () => startReplica(root, database.url, children)))
    const latencies = servers.map(() => [])
    for (let i = 0; i < revocations; i++) {
      const key = `sk-or-v1-${randomBytes(32).toString('hex')}`
      await client.query("INSERT INTO keys VALUES ($1, $2, 'standard', 'org_bench')", [`bench-${i}`, sha256(key)])
      for (const server of servers) while (await status(`${server.url}/v1/providers`, key) !== 200);
      let committedAt
      const polls = servers.map(async (server) => {
        for (;;) {
          const code = await status(`${server.url}/v1/providers`, key)
          if (code === 401 && committedAt !== undefined) return performance.now() - committedAt
        }
      })
      await client.query('DELETE FROM keys WHERE name = $1', [`bench-${i}`])
      committedAt = performance.now()
      const times = await Promise.all(polls)
      times.forEach((ms, index) => latencies[index].push(ms))
    }
    for (const server of servers) {
      server.child.kill('SIGTERM')
      children.delete(server.child)
    }
    const all = latencies.flat()

    // Reload of one large organization.
    const key = `sk-or-v1-${randomBytes(32).toString('hex')}`
    await client.query('BEGIN')
    await client.query("INSERT INTO organizations (id, position, name) VALUES ('org_bench', 2, 'Bench')")
    await client.query(`INSERT INTO members (organization_id, id, position, email, first_name, last_name, role)
      SELECT 'org_bench', 'user_' || i, i, 'member' || i || '@bench.example', 'First' || i, 'Last' || i,
        CASE WHEN i = 0 THEN 'org:admin' ELSE 'org:member' END
      FROM generate_series(0, $1 - 1) AS i`, [members])
    await client.query("INSERT INTO keys VALUES ('bench-large', $1, 'management', 'org_bench')", [sha256(key)])
    await client.query('COMMIT')
    // As autovacuum would shortly after such a load (npm run db -- import does it at once).
    await client.query('ANALYZE members')
    const started = performance.now()
    const server = await startReplica(root, database.url, children)
    const page = `${server.url}/v1/organization/members?offset=${members - 1}&limit=1`
    while (await status(page, key) !== 200);
    const firstAnswerMs = performance.now() - started
    const reloads = []
    let peakRss = rssMb(server.child.pid)
    const sampler = setInterval(() => { peakRss = Math.max(peakRss, rssMb(server.child.pid)) }, 5)
    // Milliseconds from the commit of `sql` to the first answer whose last member reads `name`.
    const timed = async (sql, name) => {
      await client.query(sql, [name])
      const committedAt = performance.now()
      for (;;) {
        const res = await fetch(page, { headers: { authorization: `Bearer ${key}` } })
        if ((await res.json()).data[0]?.first_name === name) return performance.now() - committedAt
      }
    }
    // One member changed, then every member: either way the organization is read again whole (a
    // change of members reads its organization), so the two differ by the rows written, not read.
    for (let round = 0; round < 3; round++) {
      reloads.push(await timed(`UPDATE members SET first_name = $1 WHERE organization_id = 'org_bench' AND id = 'user_${members - 1}'`, `Changed${round}`))
    }
    const wholeMs = await timed("UPDATE members SET first_name = $1 WHERE organization_id = 'org_bench'", 'Everyone')
    clearInterval(sampler)
    server.child.kill('SIGTERM')
    children.delete(server.child)

    const results = {
      revocation: { p50Ms: median(all), maxMs: Math.max(...all), perReplicaMaxMs: latencies.map((list) => Math.max(...list)) },
      largeOrganization: { members, firstAnswerMs, reloadMedianMs: median(reloads), reloadMaxMs: Math.max(...reloads), wholeMs, peakRssMb: peakRss }
    }
    const lines = [
      '## PostgreSQL',
      '',
      `PostgreSQL ${database.version} on the same machine (fsync on); the replicas run as \`npm start\` does, LOG_LEVEL=info.`,
      '',
      '| Measure | p50 | max |',
      '|---|---:|---:|',
      `| Revocation: DELETE's commit → first 401, ${revocations} revocations × ${replicas} replicas | ${fmt(results.revocation.p50Ms, 1)} ms | ${fmt(results.revocation.maxMs, 1)} ms |`,
      `| One member of an organization of ${fmt(members)} changed (commit → first answer showing it), 3 changes | ${fmt(results.largeOrganization.reloadMedianMs)} ms | ${fmt(results.largeOrganization.reloadMaxMs)} ms |`,
      `| Every member of it changed in one statement (the organization read whole), once | ${fmt(wholeMs)} ms | |`,
      '',
      `Start on that database: first 200 after ${fmt(firstAnswerMs)} ms; peak RSS while reloading ${fmt(peakRss, 1)} MB.`
    ]
    return { results, lines }
  } finally {
    for (const child of children) child.kill('SIGKILL')
    await client.end().catch(() => {})
    database.close()
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { lines } = await benchPostgres({
    root: new URL('..', import.meta.url).pathname,
    revocations: Number(process.env.BENCH_PG_REVOCATIONS ?? 20),
    members: Number(process.env.BENCH_PG_MEMBERS ?? 100_000),
    replicas: Number(process.env.BENCH_PG_REPLICAS ?? 3)
  })
  console.log(lines.join('\n'))
}
