// npm run bench: measures the service against a raw node:http baseline that writes the very
// same response bytes, in one run, alternating the two (A B A B ...), and prints the table that
// BENCHMARKS.md holds. The load comes from wrk (a separate C process; installed from Debian when
// missing), because an in-process Node.js load generator tops out near the server's own speed
// on a 2-core machine.
//
// On this 2-core machine the servers are pinned to one core and wrk (and this process) to the other
// (taskset): left to the scheduler, wrk and the server sometimes share a core and a run loses a third
// of its rate.
//
// Settings (environment): BENCH_DURATION seconds per run (3), BENCH_ROUNDS (6),
// BENCH_CONNECTIONS (50), BENCH_OUTPUT file to write the report to (BENCHMARKS.md; "-" for none),
// BENCH_SCALE (0 leaves out the gateway-scale section), BENCH_BEFORE (a checkout of an older commit, built:
// the gateway-scale section measures it too, in the same run, and prints the two side by side;
// BENCH_AFTER_FIRST=1 measures this build first), BENCH_SCALE_KEYS, BENCH_SCALE_ORGANIZATIONS and
// BENCH_SCALE_CHANGES (the gateway-scale sizes: 1000000, 100000, 100; smaller for a quick check).
//
// The services run with their default settings (metrics and rate limits on), but for the per-key
// limit: one key sends some 50,000 requests a second here, far over the default 6,000 a minute, and
// refused requests would measure the 429. RATE_LIMIT_PER_MINUTE is raised instead: every request is
// still counted, which is the whole cost of the limit.
import { execFile, execFileSync, spawn } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { closeSync, cpSync, createWriteStream, mkdtempSync, openSync, readFileSync, renameSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs'
import { cpus, tmpdir, totalmem } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { parseArgs, promisify } from 'node:util'
import { benchPostgres, serverArgs } from './bench-postgres.mjs'
import { benchKeyTable } from './bench-key-table.mjs'
import { benchStructures } from './bench-structures.mjs'
import { benchCommands } from './bench-commands.mjs'
import { benchRecords } from './bench-records.mjs'
import { benchScale, checkScaleSettings, scaleSettings } from './bench-scale.mjs'

const execFileAsync = promisify(execFile)

const HELP = `Measures the service against servers that write the same bytes, and writes the table BENCHMARKS.md holds
(docs/performance.md, "The bench"). It takes two cores, wrk (installed from Debian when missing), and a
quarter of an hour for its gateway-scale section alone.

usage: npm run bench
       BENCH_OUTPUT=- npm run bench   (prints the table only)

  -h, --help  prints this help

Settings are environment variables: BENCH_DURATION (seconds a run, 3), BENCH_ROUNDS (6), BENCH_CONNECTIONS
(50), BENCH_OUTPUT (BENCHMARKS.md, - for none), BENCH_SCALE (0 leaves out the gateway-scale section),
BENCH_BEFORE (a built checkout to measure beside this one), BENCH_AFTER_FIRST, BENCH_SCALE_KEYS,
BENCH_SCALE_ORGANIZATIONS, BENCH_SCALE_CHANGES.
`

try {
  if (parseArgs({ options: { help: { type: 'boolean', short: 'h' } }, strict: true }).values.help) {
    process.stdout.write(HELP)
    process.exit(0)
  }
} catch (error) {
  process.stderr.write(`${error.message.split('. ')[0].replace(/^./, (first) => first.toLowerCase())}; see npm run bench -- --help\n`)
  process.exit(2)
}

const DURATION = Number(process.env.BENCH_DURATION ?? 3)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 6)
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50)
const OUTPUT = process.env.BENCH_OUTPUT ?? 'BENCHMARKS.md'
// BENCH_SCALE=0 leaves out the gateway-scale section (scripts/bench-scale.mjs), a quarter of an hour (twice that with BENCH_BEFORE).
const SCALE = process.env.BENCH_SCALE !== '0'
// BENCH_BEFORE, BENCH_AFTER_FIRST and the sizes (BENCH_SCALE_KEYS...): scripts/bench-scale.mjs.
const SCALE_SETTINGS = scaleSettings()
if (SCALE) checkScaleSettings(SCALE_SETTINGS)
const ROOT = new URL('..', import.meta.url).pathname
const BASELINE = join(ROOT, 'scripts/bench-baseline.mjs')
// Fastify alone (one route, no hook), answering the same bytes: what the framework costs by itself.
const FASTIFY_ALONE = join(ROOT, 'scripts/bench-fastify.mjs')
// No framework, and the service's per-request work (key hash, counter, access line...) inline: the least it costs.
const FEATURES_FLOOR = join(ROOT, 'scripts/bench-floor.mjs')
// The service with auth or validation taken out, for their cost (no setting turns them off). The
// preload replaces a module of the service, so both services of those rows run tsc's output as it
// is, one file per module (MODULES), not the bundle that `npm run build` makes of dist/main.js.
const WITHOUT = join(ROOT, 'scripts/bench-without.mjs')
const MODULES = join(ROOT, 'node_modules/.cache/bench-modules')

// The bundled management key of Acme AI (README, "Development keys").
const BUNDLED_KEY = 'sk-or-v1-dev-acme-mgmt-6f1d0c7a9b2e4f8c8d3a1b5e7c9f0a2d'
const BENCH_KEY = `sk-or-v1-${randomBytes(32).toString('hex')}`
const BENCH_SETTINGS = { RATE_LIMIT_PER_MINUTE: '1000000000' }
const MEMBERS_PAGE = '/v1/organization/members?offset=100&limit=100'

const work = mkdtempSync(join(tmpdir(), 'bench-'))
const children = new Set()
let nextPort = 3400

process.on('exit', () => {
  for (const child of children) child.kill('SIGKILL')
  rmSync(work, { recursive: true, force: true })
})
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(130))

function ensureWrk () {
  try {
    return execFileSync('wrk', ['--version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).split('\n')[0]
  } catch (error) {
    if (error.code !== 'ENOENT' && error.stdout) return error.stdout.split('\n')[0] // wrk --version exits 1
  }
  console.error('wrk not found: installing it from Debian (apt-get install wrk)')
  execFileSync('sh', ['-c', 'apt-get update -qq && apt-get install -y -qq wrk'], { stdio: 'inherit' })
  return ensureWrk()
}

// Core 0 for the load, the last core for the servers (and their helper threads).
const SERVER_CORE = String(cpus().length - 1)
const pinned = (core, command, args) => ['taskset', ['-c', core, command, ...args]]
// This process too (every thread) goes on the load's core: its polls, and its copying of the services'
// logs, took turns with a starting service on its core (measured with an organization of 1,000,000 members
// in a file, before files were limited to 8 MiB: 1.8 to 2.2 s instead of 1.5).
// PostgreSQL's part (its server, its replicas) runs on every core, as it always did.
const pinSelf = (cores) => execFileSync('taskset', ['-a', '-p', '-c', cores, String(process.pid)], { stdio: 'ignore' })
pinSelf('0')

const sha256 = (text) => createHash('sha256').update(text).digest('hex')

// The largest data sets of the files source: a data file is refused over 8 MiB (MAX_FILE_BYTES), and
// these are the round sizes under it (the organization some 6.3 MB, the keys some 7.3 MB; makeDataset
// checks). Larger data is PostgreSQL's: "Gateway scale" (scripts/bench-scale.mjs).
const LARGE_MEMBERS = 50_000
const MANY_KEYS = 50_000
const FILE_LIMIT = 8 * 1024 * 1024

/**
 * A fixtures folder: the bundled providers and endpoints, one organization of `members`, `keys` keys;
 * with `expiring`, every fourth key expires (a year from now), the bench's own among them.
 */
function makeDataset (name, { members, keys, expiring = false }) {
  const dir = join(work, name)
  cpSync(join(ROOT, 'fixtures'), dir, { recursive: true })
  // Written in slices, so that this process's heap stays small: its garbage collector shares the
  // load generator's core during the measurements.
  const fd = openSync(join(dir, 'organizations.json'), 'w')
  writeSync(fd, '[{"id":"org_bench","name":"Bench","members":[')
  for (let start = 0; start < members; start += 10_000) {
    const slice = []
    for (let i = start; i < Math.min(start + 10_000, members); i++) {
      slice.push(JSON.stringify({ id: `user_${i}`, email: `member${i}@bench.example`, first_name: `First${i}`, last_name: `Last${i}`, role: i === 0 ? 'org:admin' : 'org:member' }))
    }
    writeSync(fd, (start === 0 ? '' : ',') + slice.join(','))
  }
  writeSync(fd, ']}]')
  closeSync(fd)
  const expiry = (i) => expiring && i % 4 === 0 ? { expires_at: new Date(Date.now() + 365 * 86_400_000).toISOString() } : {}
  const records = [{ name: 'bench', sha256: sha256(BENCH_KEY), kind: 'management', organization_id: 'org_bench', ...expiry(0) }]
  for (let i = 1; i < keys; i++) {
    records.push({ name: `key-${i}`, sha256: sha256(`other-key-${i}`), kind: i % 2 ? 'standard' : 'management', organization_id: 'org_bench', ...expiry(i) })
  }
  writeFileSync(join(dir, 'keys.json'), JSON.stringify(records))
  for (const file of ['organizations.json', 'keys.json']) {
    const { size } = statSync(join(dir, file))
    if (size > FILE_LIMIT) throw new Error(`${name}/${file}: ${size} bytes, over the ${FILE_LIMIT}-byte limit of a data file: the server would refuse it`)
  }
  return dir
}

function rssMb (pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)[1]) / 1024
}

/**
 * Starts the service as `npm start` and the container do (serverArgs), its stdout a pipe that this
 * process copies to a file, as a container runtime takes a container's log; times the first 200.
 */
async function startService (name, fixturesDir, key, settings = {}, without = undefined, modules = false) {
  const port = nextPort++
  const log = createWriteStream(join(work, `${name}.log`))
  const started = performance.now()
  const args = serverArgs(ROOT)
  if (modules) {
    args.splice(-1, 1, join(MODULES, 'server.js'))
    // The bundled fixtures are found relative to dist/, which MODULES is not.
    fixturesDir ??= join(ROOT, 'fixtures')
  }
  if (without) args.splice(-1, 0, '--import', WITHOUT)
  const child = spawn(...pinned(SERVER_CORE, process.execPath, args), {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH,
      PORT: String(port),
      ...BENCH_SETTINGS,
      ...settings,
      ...(fixturesDir ? { DATA_DIR: fixturesDir } : {}),
      ...(without ? { BENCH_WITHOUT: without, BENCH_KEY_SHA256: sha256(key) } : {})
    },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  child.stdout.pipe(log)
  child.stderr.pipe(log)
  children.add(child)
  const url = `http://127.0.0.1:${port}`
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${name}: the service exited: ${readFileSync(join(work, `${name}.log`), 'utf8')}`)
    try {
      const res = await fetch(`${url}/v1/providers`, { headers: { authorization: `Bearer ${key}` } })
      await res.arrayBuffer()
      if (res.status === 200) break
    } catch {}
    await sleep(5)
  }
  const firstAnswerMs = performance.now() - started
  await sleep(500)
  return { name, url, key, child, firstAnswerMs, rssAfterStart: rssMb(child.pid) }
}

/**
 * Starts a baseline answering with the bytes the service sends for `path` (and these headers): the
 * raw node:http one (BASELINE), or another server script taking the same arguments.
 */
async function startBaseline (service, path, requestHeaders, script = BASELINE) {
  // fetch asks for gzip by default and decodes it: the baseline is given what wrk gets, uncompressed.
  const res = await fetch(`${service.url}${path}`, { headers: { authorization: `Bearer ${service.key}`, 'accept-encoding': 'identity', ...requestHeaders } })
  const headers = {}
  for (const [name, value] of res.headers) {
    if (!['date', 'connection', 'keep-alive'].includes(name)) headers[name] = value
  }
  const file = join(work, `baseline-${nextPort}.json`)
  writeFileSync(file, JSON.stringify({ status: res.status, headers, body: Buffer.from(await res.arrayBuffer()).toString('base64') }))
  const port = nextPort++
  const child = spawn(...pinned(SERVER_CORE, process.execPath, [script, file, String(port)]), { stdio: ['ignore', 'pipe', 'inherit'] })
  children.add(child)
  await once(child.stdout, 'data')
  return { url: `http://127.0.0.1:${port}`, child, status: res.status }
}

/** A redis-server of its own, on the servers' core, persisting nothing. */
async function startRedis () {
  const port = nextPort++
  const child = spawn(...pinned(SERVER_CORE, 'redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', work, '--save', '', '--appendonly', 'no']), { stdio: ['ignore', 'pipe', 'inherit'] })
  children.add(child)
  let output = ''
  for await (const chunk of child.stdout) {
    output += chunk
    if (output.includes('Ready to accept connections')) break
  }
  child.stdout.resume()
  return { url: `redis://127.0.0.1:${port}`, child }
}

/** Bytes of the body as sent (Content-Length, compressed or not). */
async function bodyBytes (url, headers) {
  const res = await fetch(url, { headers: { 'accept-encoding': 'identity', ...headers } })
  await res.arrayBuffer()
  return Number(res.headers.get('content-length'))
}

function stop (child) {
  child.kill('SIGTERM')
  children.delete(child)
  return once(child, 'exit')
}

const UNITS = { us: 0.001, ms: 1, s: 1000 }
const toMs = (text) => { const [, n, unit] = /([\d.]+)(us|ms|s)/.exec(text); return Number(n) * UNITS[unit] }

// Asynchronous: this process must keep copying the services' logs while wrk runs.
async function wrk (url, headers, seconds = DURATION) {
  const args = ['-t1', `-c${CONNECTIONS}`, `-d${seconds}s`, '--latency']
  for (const [name, value] of Object.entries(headers)) args.push('-H', `${name}: ${value}`)
  const { stdout: out } = await execFileAsync(...pinned('0', 'wrk', [...args, url]), { encoding: 'utf8' })
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out)
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(out)
  return {
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)[1]),
    p50: toMs(/^\s+50%\s+(\S+)/m.exec(out)[1]),
    p99: toMs(/^\s+99%\s+(\S+)/m.exec(out)[1]),
    errors: (non2xx ? Number(non2xx[1]) : 0) + (socket ? socket.slice(1).reduce((sum, n) => sum + Number(n), 0) : 0)
  }
}

const median = (values) => { const s = [...values].sort((a, b) => a - b); return s[Math.floor(s.length / 2)] }
const summarize = (runs) => ({
  rps: median(runs.map((r) => r.rps)),
  p50: median(runs.map((r) => r.p50)),
  p99: median(runs.map((r) => r.p99)),
  errors: runs.reduce((sum, r) => sum + r.errors, 0)
})

/**
 * Alternates two targets for ROUNDS rounds after a short warm-up of each, A first in one round and
 * B first in the next (A B B A A B ...), so that neither gains from its place. The ratio B/A is the
 * median of the ratios of each round's adjacent runs, which drifts of the machine between rounds
 * affect less than a ratio of medians.
 */
async function alternate ([a, b]) {
  for (const t of [a, b]) await wrk(t.url, t.headers, 1)
  const runs = [[], []]
  for (let round = 0; round < ROUNDS; round++) {
    for (const side of round % 2 === 0 ? [0, 1] : [1, 0]) {
      const t = side === 0 ? a : b
      runs[side].push(await wrk(t.url, t.headers))
    }
  }
  return { a: summarize(runs[0]), b: summarize(runs[1]), ratio: median(runs[1].map((r, i) => r.rps / runs[0][i].rps)) }
}

const fmt = (n, digits = 0) => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })
const ms = (n) => `${fmt(n, 2)} ms`

const poll = () => sleep(1)

/** Milliseconds from `change()` until `seen()` holds, asking as fast as one request after another goes. */
async function timeUntil (change, seen) {
  const started = performance.now()
  await change()
  while (!(await seen())) await poll()
  return performance.now() - started
}

const statusOf = async (url, key) => {
  const res = await fetch(url, { headers: { authorization: `Bearer ${key}` } })
  await res.arrayBuffer()
  return res.status
}

/** Replaces a file whole, by rename, as an operator's `mv` does. */
function replaceFile (file, text) {
  writeFileSync(`${file}.tmp`, text)
  renameSync(`${file}.tmp`, file)
}

/**
 * Live data with the files source: how long a revocation takes to answer 401, how long a change
 * takes to be served and what memory it needs, and whether requests fail while the data changes.
 */
async function liveDataFiles ({ print, target, small, large }) {
  print()
  print('## Live data: files')
  print()
  print('A change is written by rename; the server reads and installs it about 100 ms (its debounce) after the')
  print('folder says it changed. Times are from the rename to the first answer that shows the change.')
  print()

  // Revocation: 20 keys, each removed in turn; the time to the first 401.
  const revoked = Array.from({ length: 20 }, (_, i) => ({ key: `sk-or-v1-revoke-${i}-${randomBytes(8).toString('hex')}`, name: `revoke-${i}` }))
  const keysFile = join(small, 'keys.json')
  const baseKeys = JSON.parse(readFileSync(keysFile, 'utf8'))
  let keys = [...baseKeys, ...revoked.map(({ key, name }) => ({ name, sha256: sha256(key), kind: 'standard', organization_id: 'org_bench' }))]
  replaceFile(keysFile, JSON.stringify(keys))
  const service = await startService('live-files', small, BENCH_KEY)
  const revocations = []
  for (const { key, name } of revoked) {
    keys = keys.filter((record) => record.name !== name)
    revocations.push(await timeUntil(() => replaceFile(keysFile, JSON.stringify(keys)), async () => await statusOf(`${service.url}/v1/providers`, key) === 401))
  }
  const p50 = median(revocations)
  const max = Math.max(...revocations)
  print('| Measure | p50 | max |')
  print('|---|---:|---:|')
  print(`| revocation, one process, 20 keys: rename to first 401 | ${ms(p50)} | ${ms(max)} |`)
  target('revocation with files, one process (max of 20)', '< 1 s', ms(max), max < 1000)

  // Requests while the data changes ten times a second: none may fail.
  const providersFile = join(small, 'providers.json')
  const providers = JSON.parse(readFileSync(providersFile, 'utf8'))
  let storming = true
  const storm = (async () => {
    for (let n = 0; storming; n++) {
      replaceFile(providersFile, JSON.stringify(providers.map((p, i) => i === 0 ? { ...p, name: `${p.name} ${n}` } : p)))
      await sleep(100)
    }
  })()
  const url = `${service.url}/v1/providers`
  const quiet = await wrk(url, { authorization: `Bearer ${BENCH_KEY}` })
  const changing = await wrk(url, { authorization: `Bearer ${BENCH_KEY}` })
  storming = false
  await storm
  print()
  print('| GET /v1/providers, 50 connections | req/s | p99 | Failed requests |')
  print('|---|---:|---:|---:|')
  print(`| data unchanged | ${fmt(quiet.rps)} | ${ms(quiet.p99)} | ${quiet.errors} |`)
  print(`| providers.json replaced 10 times a second | ${fmt(changing.rps)} | ${ms(changing.p99)} | ${changing.errors} |`)
  target('failed requests while the data changes 10 times a second', '0', String(changing.errors), changing.errors === 0)
  await stop(service.child)

  // Reload time and memory: one member changed in the bundled data and in the largest organization a file holds.
  print()
  print('| Data | Change served after | RSS before | Peak RSS while reloading | Peak / before |')
  print('|---|---:|---:|---:|---:|')
  for (const [label, dir, offset] of [['bundled lists, 100 members', small, 0], [`organization of ${fmt(LARGE_MEMBERS)} members`, large, LARGE_MEMBERS - 1]]) {
    const svc = await startService(`reload-${offset}`, dir, BENCH_KEY)
    const file = join(dir, 'organizations.json')
    const text = readFileSync(file, 'utf8')
    const before = rssMb(svc.child.pid)
    let peak = before
    const sampler = setInterval(() => { peak = Math.max(peak, rssMb(svc.child.pid)) }, 5)
    const page = `${svc.url}/v1/organization/members?offset=${offset}&limit=1`
    const elapsed = await timeUntil(
      () => replaceFile(file, text.replace(`"member${offset}@bench.example"`, `"renamed${offset}@bench.example"`)),
      async () => {
        const res = await fetch(page, { headers: { authorization: `Bearer ${BENCH_KEY}` } })
        return (await res.text()).includes(`renamed${offset}@`)
      })
    await sleep(200)
    clearInterval(sampler)
    print(`| ${label} | ${ms(elapsed)} | ${fmt(before, 1)} MB | ${fmt(peak, 1)} MB | ${fmt(peak / before, 2)} |`)
    if (offset > 0) target(`reload of ${fmt(LARGE_MEMBERS)} members: peak RSS against steady`, '<= 1.5', fmt(peak / before, 2), peak / before <= 1.5)
    replaceFile(file, text)
    await stop(svc.child)
  }
}

/** Milliseconds from spawn to exit of `node -e 0` on the servers' core: what Node.js itself takes. */
async function timeNodeAlone () {
  const started = performance.now()
  const child = spawn(...pinned(SERVER_CORE, process.execPath, ['-e', '0']), { stdio: 'ignore' })
  await once(child, 'exit')
  return performance.now() - started
}

const START_ROUNDS = 7

/**
 * The first 200 after start with the bundled fixtures, START_ROUNDS times in turn with Node.js alone and
 * the service without V8's compile cache (as a container whose cache cannot be read): medians, least
 * and most of each.
 */
async function timeStarts () {
  const runs = { node: [], warm: [], cold: [] }
  // Once first, so that the compile cache holds this build.
  await stop((await startService('start-warm-up', undefined, BUNDLED_KEY)).child)
  for (let round = 0; round < START_ROUNDS; round++) {
    runs.node.push(await timeNodeAlone())
    for (const [kind, settings] of [['warm', {}], ['cold', { NODE_DISABLE_COMPILE_CACHE: '1' }]]) {
      const service = await startService(`start-${kind}-${round}`, undefined, BUNDLED_KEY, settings)
      runs[kind].push(service.firstAnswerMs)
      await stop(service.child)
    }
  }
  return Object.fromEntries(Object.entries(runs).map(([kind, times]) => [kind, { median: median(times), least: Math.min(...times), most: Math.max(...times) }]))
}

async function main () {
  const wrkVersion = ensureWrk()
  const lines = []
  const print = (line = '') => { lines.push(line); console.log(line) }


  // fetch loads its HTTP client on first use: not a cost of the service's start, so paid here.
  await fetch('http://127.0.0.1:1/').catch(() => {})
  // First, while this process is still quiet: generating the large data sets churns memory.
  const starts = await timeStarts()
  const bundled = await startService('bundled', undefined, BUNDLED_KEY)
  const auth = (service) => ({ authorization: `Bearer ${service.key}` })

  print(`# Benchmarks`)
  print()
  print(`Command: \`npm run bench\` (${ROUNDS} rounds of ${DURATION} s per target, alternated; ${CONNECTIONS} connections;` +
    ` load from ${wrkVersion.split(' [')[0]}, one thread, a separate process pinned to core 0 with this script; servers pinned to core ${SERVER_CORE}).`)
  print(`Machine: ${cpus().length} × ${cpus()[0].model.trim()}, ${fmt(totalmem() / 2 ** 30, 0)} GiB; Node.js ${process.version}; ${new Date().toISOString().slice(0, 10)}.`)
  print('The service runs with its default configuration (LOG_LEVEL=info, one access line per request, metrics and rate')
  print(`limits on; the per-key limit raised to ${BENCH_SETTINGS.RATE_LIMIT_PER_MINUTE} a minute, so that the load is counted, never refused), its stdout`)
  print('a pipe copied to a file, as a container runtime takes it. The baseline is a raw `node:http` server writing the')
  print('same status, headers and body from a precomputed buffer. Rates and latencies are medians over the rounds;')
  print('a ratio is the median of the ratios of the two adjacent runs of each round.')
  print()
  print('## Service against baseline (bundled fixtures)')
  print()
  print('"Fastify alone" is Fastify with one route and no hook, plugin or logger, answering the same bytes, against')
  print('the same baseline in the same run: what the framework costs by itself, the most the service could reach.')
  print('"Features, no framework" (`scripts/bench-floor.mjs`, for the operations with an aim) is a raw `node:http`')
  print('server doing inline, as cheaply as we know how, the work every request of the service does: a request id, the')
  print('check of repeated headers, the SHA-256 of the key and its lookup, a per-key counter and the three rate-limit')
  print('headers, a histogram bucket, one access line batched as the service batches them; the precomputed body, no')
  print('routing, no query, no page assembled. The least those features cost on this machine, outside any framework.')
  print()
  print('| Operation | Service req/s | Baseline req/s | Ratio | Fastify alone: ratio | Features, no framework: ratio | Service p50 / p99 | Baseline p50 / p99 | Errors |')
  print('|---|---:|---:|---:|---:|---:|---:|---:|---:|')

  // `target`: the least ratio service/baseline aimed at (issue 29; the baseline sends the same headers),
  // with every default on.
  const operations = [
    { label: 'GET /v1/providers', path: '/v1/providers', target: 0.75 },
    { label: 'GET /v1/endpoints/zdr', path: '/v1/endpoints/zdr', target: 0.75 },
    { label: 'GET /v1/organization/members?offset=100&limit=100', path: MEMBERS_PAGE, target: 0.65 },
    { label: 'GET /v1/providers, If-None-Match (304)', path: '/v1/providers', conditional: true },
    { label: 'GET /v1/endpoints/zdr, If-None-Match (304)', path: '/v1/endpoints/zdr', conditional: true }
  ]
  const targets = []
  const target = (name, aim, figure, met) => targets.push(`| ${name} | ${aim} | ${figure} | ${met ? 'met' : '**missed**'} |`)
  // Each operation's ratio to its baseline, for the aim that a page costs what a list costs (issue 49).
  const ratios = new Map()
  for (const op of operations) {
    const headers = { ...auth(bundled) }
    if (op.conditional) {
      const res = await fetch(`${bundled.url}${op.path}`, { headers })
      await res.arrayBuffer()
      headers['if-none-match'] = res.headers.get('etag') ?? '"none"'
    }
    const conditionalHeaders = op.conditional ? { 'if-none-match': headers['if-none-match'] } : {}
    const baseline = await startBaseline(bundled, op.path, conditionalHeaders)
    // Baseline first, so that the ratio reads service/baseline.
    const { a: b, b: s, ratio } = await alternate([{ url: baseline.url, headers }, { url: `${bundled.url}${op.path}`, headers }])
    const fastify = await startBaseline(bundled, op.path, conditionalHeaders, FASTIFY_ALONE)
    const alone = await alternate([{ url: baseline.url, headers }, { url: `${fastify.url}${op.path}`, headers }])
    await stop(fastify.child)
    let floor
    if (op.target) {
      const inline = await startBaseline(bundled, op.path, conditionalHeaders, FEATURES_FLOOR)
      floor = (await alternate([{ url: baseline.url, headers }, { url: `${inline.url}${op.path}`, headers }])).ratio
      await stop(inline.child)
    }
    await stop(baseline.child)
    ratios.set(op.path + (op.conditional ? ' 304' : ''), ratio)
    print(`| ${op.label} | ${fmt(s.rps)} | ${fmt(b.rps)} | ${fmt(ratio, 2)} | ${fmt(alone.ratio, 2)} | ${floor === undefined ? '—' : fmt(floor, 2)} | ${ms(s.p50)} / ${ms(s.p99)} | ${ms(b.p50)} / ${ms(b.p99)} | ${s.errors} |`)
    if (op.target) target(`${op.label}: service/baseline`, `>= ${op.target}`, fmt(ratio, 2), ratio >= op.target)
    // The aim against the floor: the service's ratio over the floor's, both against the same baseline.
    if (floor !== undefined) target(`${op.label}: service/features without a framework`, '>= 0.9', fmt(ratio / floor, 2), ratio / floor >= 0.9)
    target(`${op.label}: p99 at ${CONNECTIONS} connections`, '< 5 ms', ms(s.p99), s.p99 < 5)
  }
  {
    // Against its own baseline each: the page's body is smaller than the list's, which its baseline
    // sends faster, so this compares what each costs above the least a Node.js server costs.
    const relative = ratios.get(MEMBERS_PAGE) / ratios.get('/v1/providers')
    target('member page against the providers list, each against its baseline', '>= 0.9', fmt(relative, 2), relative >= 0.9)
  }
  const bundledRssAfterLoad = rssMb(bundled.child.pid)
  // The p99 of the rows after these (compression, features), for the aim that every row keeps under 5 ms.
  const otherP99 = []

  print()
  print('## Compression (service against itself, alternated)')
  print()
  print('Bytes of the body on the wire and rate for each encoding the client asks (Accept-Encoding); the lists are')
  print('compressed once for each snapshot, a member page the first time it is asked for, then kept with its other')
  print('codings, tags and headers (up to 16 MiB of pages, the least recently used out first).')
  print()
  print('| Operation | Encoding | Body bytes | req/s | Ratio to identity | p99 | Errors |')
  print('|---|---|---:|---:|---:|---:|---:|')
  for (const op of operations.filter((op) => !op.conditional)) {
    const url = `${bundled.url}${op.path}`
    const identityBytes = await bodyBytes(url, auth(bundled))
    for (const coding of ['gzip', 'br']) {
      const headers = { ...auth(bundled), 'accept-encoding': coding }
      const { a: plain, b: packed, ratio } = await alternate([{ url, headers: auth(bundled) }, { url, headers }])
      if (coding === 'gzip') print(`| ${op.label} | identity | ${fmt(identityBytes)} | ${fmt(plain.rps)} | 1.00 | ${ms(plain.p99)} | ${plain.errors} |`)
      print(`| ${op.label} | ${coding} | ${fmt(await bodyBytes(url, headers))} | ${fmt(packed.rps)} | ${fmt(ratio, 2)} | ${ms(packed.p99)} | ${packed.errors} |`)
      otherP99.push(plain.p99, packed.p99)
      if (op.path === MEMBERS_PAGE) {
        target(`member page in ${coding}: rate against identity`, '>= 0.8', fmt(ratio, 2), ratio >= 0.8)
        target(`member page in ${coding}: p99 at ${CONNECTIONS} connections`, '< 5 ms', ms(packed.p99), packed.p99 < 5)
      }
    }
  }
  await stop(bundled.child)

  print()
  print('## Cost of each feature (the default service against the same one with the feature off)')
  print()
  print('Same data (bundled), same request with a key (`GET /v1/providers`; the member page for validation, the only')
  print('operation with a query), two services started side by side. A ratio under 1 is what the feature costs.')
  print('Auth and validation have no setting to turn them off: their "off" service is started with')
  print('`scripts/bench-without.mjs` preloaded (auth: no header read, no SHA-256, the key\'s record pinned on each')
  print('request; validation: the query read as two numbers, no Ajv, no integer check); both services of those two')
  print('rows run tsc\'s output unbundled, since the preload replaces a module. CORS is off by default, so')
  print('its row turns it on (with an `Origin` that it allows), and the Redis row shares the counters in a local')
  print('redis-server instead of memory. The first row starts the same service twice: how far its ratio is from 1.00')
  print('is what this run\'s noise alone reads. Over loopback a feature reads costlier than its own work: in CPU')
  print('profiles of the service with and without its access line, the time in the answers\' `writev` per request')
  print('grew with the rest (23 µs against 18): likely the cost of waking wrk, which waits more often for a slower server.')
  print()
  print('| Feature | Turned off by | On req/s | Off req/s | Ratio on/off | On p99 | Off p99 | Errors |')
  print('|---|---|---:|---:|---:|---:|---:|---:|')
  execFileSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', join(ROOT, 'tsconfig.build.json'), '--outDir', MODULES], { stdio: 'inherit' })
  const redis = await startRedis()
  const dashboard = 'https://dash.example'
  // `aim`: the least ratio on/off aimed at (issue 29), each feature doing all it does.
  const features = [
    // Two services alike: what the ratio of a feature that costs nothing reads in this run.
    { label: 'none (the same service twice)', off: {}, describe: 'nothing' },
    { label: 'auth (bearer check, SHA-256, key lookup)', without: 'auth', describe: 'bench-without.mjs: auth', aim: 0.95 },
    { label: 'access line (one per request)', off: { LOG_LEVEL: 'warn' }, aim: 0.95 },
    { label: 'metrics', off: { METRICS: 'false' }, aim: 0.95 },
    { label: 'rate limits (in memory)', off: { RATE_LIMIT_PER_MINUTE: '0', RATE_LIMIT_ANONYMOUS_PER_MINUTE: '0' }, aim: 0.95 },
    { label: 'validation of the member query', without: 'validation', path: MEMBERS_PAGE, describe: 'bench-without.mjs: validation' },
    { label: 'metrics and rate limits', off: { METRICS: 'false', RATE_LIMIT_PER_MINUTE: '0', RATE_LIMIT_ANONYMOUS_PER_MINUTE: '0' } },
    { label: 'rate limits shared in Redis', on: { REDIS_URL: redis.url }, off: {}, describe: `REDIS_URL against in memory`, aim: 0.9 },
    { label: 'CORS', on: { CORS_ORIGINS: dashboard }, off: {}, headers: { origin: dashboard }, describe: `CORS_ORIGINS=${dashboard}, Origin sent`, aim: 0.95 },
    // Issue 36: the key asked for expires (a comparison with the clock per request), among 50,000 a quarter of which do.
    {
      label: 'keys that expire (a quarter of 50,000, the one asked for among them)',
      off: {},
      fixtures: { on: makeDataset('expiring', { members: 100, keys: 50_000, expiring: true }), off: makeDataset('not-expiring', { members: 100, keys: 50_000 }) },
      key: BENCH_KEY,
      describe: 'the same keys without expires_at',
      aim: 0.95
    }
  ]
  for (const feature of features) {
    const path = feature.path ?? '/v1/providers'
    const modules = feature.without !== undefined
    const key = feature.key ?? BUNDLED_KEY
    const on = await startService(`${feature.label}-on`, feature.fixtures?.on, key, feature.on, undefined, modules)
    const off = await startService(`${feature.label}-off`, feature.fixtures?.off, key, feature.off, feature.without, modules)
    const headers = { ...auth(on), ...feature.headers }
    // The preload took hold: without auth, a request without a key is served.
    if (feature.without === 'auth' && (await fetch(`${off.url}${path}`)).status !== 200) throw new Error('bench-without.mjs did not replace the auth plugin')
    const { a: o, b: f, ratio } = await alternate([{ url: `${off.url}${path}`, headers }, { url: `${on.url}${path}`, headers }])
    const setting = feature.describe ?? Object.entries(feature.off).map(([name, value]) => `${name}=${value}`).join(' ')
    print(`| ${feature.label} | ${setting} | ${fmt(f.rps)} | ${fmt(o.rps)} | ${fmt(ratio, 2)} | ${ms(f.p99)} | ${ms(o.p99)} | ${f.errors + o.errors} |`)
    if (feature.aim) target(`${feature.label}: on against off`, `>= ${feature.aim}`, fmt(ratio, 2), ratio >= feature.aim)
    otherP99.push(f.p99, o.p99)
    await Promise.all([stop(on.child), stop(off.child)])
  }
  await stop(redis.child)
  {
    const worst = Math.max(...otherP99)
    target(`every row of compression and features: p99 at ${CONNECTIONS} connections (the largest)`, '< 5 ms', ms(worst), worst < 5)
  }

  console.error(`preparing data sets (an organization of ${fmt(LARGE_MEMBERS)} members, a keys file of ${fmt(MANY_KEYS)} keys)...`)
  const small = makeDataset('members-100', { members: 100, keys: 3 })
  const large = makeDataset(`members-${LARGE_MEMBERS}`, { members: LARGE_MEMBERS, keys: 3 })
  const manyKeys = makeDataset(`keys-${MANY_KEYS}`, { members: 100, keys: MANY_KEYS })

  print()
  print('## Scaling (service against itself, alternated)')
  print()
  print('Both member pages hold 100 members, so only the size of the organization differs: the small')
  print('organization is read from its start, the large one at its far end.')
  print()
  print('| Operation | Small req/s | Large req/s | Ratio large/small | Small p99 | Large p99 | Errors |')
  print('|---|---:|---:|---:|---:|---:|---:|')
  const svcSmall = await startService('members-100', small, BENCH_KEY)
  const svcLarge = await startService(`members-${LARGE_MEMBERS}`, large, BENCH_KEY)
  const svcKeys = await startService(`keys-${MANY_KEYS}`, manyKeys, BENCH_KEY)
  {
    const { a: s, b: l, ratio } = await alternate([
      { url: `${svcSmall.url}/v1/organization/members?offset=0&limit=100`, headers: auth(svcSmall) },
      { url: `${svcLarge.url}/v1/organization/members?offset=${LARGE_MEMBERS - 100}&limit=100`, headers: auth(svcLarge) }
    ])
    print(`| members page, 100 members → ${fmt(LARGE_MEMBERS)} members | ${fmt(s.rps)} | ${fmt(l.rps)} | ${fmt(ratio, 2)} | ${ms(s.p99)} | ${ms(l.p99)} | ${s.errors + l.errors} |`)
    target(`members page, ${fmt(LARGE_MEMBERS)} members against 100`, 'at most 10 % slower', fmt(ratio, 2), ratio >= 0.9)
  }
  {
    const { a: s, b: l, ratio } = await alternate([
      { url: `${svcSmall.url}/v1/providers`, headers: auth(svcSmall) },
      { url: `${svcKeys.url}/v1/providers`, headers: auth(svcKeys) }
    ])
    print(`| providers, 3 keys → ${fmt(MANY_KEYS)} keys | ${fmt(s.rps)} | ${fmt(l.rps)} | ${fmt(ratio, 2)} | ${ms(s.p99)} | ${ms(l.p99)} | ${s.errors + l.errors} |`)
    target(`providers, ${fmt(MANY_KEYS)} keys against 3`, 'at most 10 % slower', fmt(ratio, 2), ratio >= 0.9)
  }
  const largeRssAfterLoad = rssMb(svcLarge.child.pid)

  // The cache of member pages filled past its bound (16 MiB of bodies and their objects): distinct pages
  // of the large organization, each in both codings, 8 at a time.
  const cachePages = 12_000
  const cacheRssBefore = rssMb(svcLarge.child.pid)
  {
    let next = 0
    await Promise.all(Array.from({ length: 8 }, async () => {
      while (next < cachePages) {
        const offset = next++
        for (const coding of ['gzip', 'br']) {
          const res = await fetch(`${svcLarge.url}/v1/organization/members?offset=${offset}&limit=100`, { headers: { ...auth(svcLarge), 'accept-encoding': coding } })
          await res.arrayBuffer()
        }
      }
    }))
  }
  const cacheRssAfter = rssMb(svcLarge.child.pid)

  print()
  print('## Resources')
  print()
  print('| Data | First 200 after start | RSS after start | RSS after load |')
  print('|---|---:|---:|---:|')
  print(`| bundled fixtures | ${fmt(bundled.firstAnswerMs)} ms | ${fmt(bundled.rssAfterStart, 1)} MB | ${fmt(bundledRssAfterLoad, 1)} MB |`)
  print(`| organization of ${fmt(LARGE_MEMBERS)} members | ${fmt(svcLarge.firstAnswerMs)} ms | ${fmt(svcLarge.rssAfterStart, 1)} MB | ${fmt(largeRssAfterLoad, 1)} MB |`)
  print(`| keys file of ${fmt(MANY_KEYS)} keys | ${fmt(svcKeys.firstAnswerMs)} ms | ${fmt(svcKeys.rssAfterStart, 1)} MB | — |`)
  print()
  print(`The first 200 after start with the bundled fixtures (\`GET /v1/providers\`, asked every 5 ms from the spawn on, as`)
  print(`above), ${START_ROUNDS} starts of each, in turn, before any load, beside Node.js alone; least, median and most. Without`)
  print('the compile cache is a container whose cache cannot be read (the image brings one: docs/performance.md, "Start-up").')
  print()
  print('| Start | Least | Median | Most |')
  print('|---|---:|---:|---:|')
  for (const [label, { least, median: middle, most }] of [
    ['`node -e 0`: Node.js alone, spawn to exit', starts.node],
    ['the service, spawn to first 200 (`npm start`, compile cache kept from the start before)', starts.warm],
    ['the same without the compile cache (`NODE_DISABLE_COMPILE_CACHE=1`)', starts.cold]
  ]) print(`| ${label} | ${fmt(least)} ms | ${fmt(middle)} ms | ${fmt(most)} ms |`)
  print()
  print(`The cache of member pages, filled past its bound of 16 MiB (bodies in each coding sent, 1.5 KiB for the objects of each answer): ${fmt(cachePages)}`)
  print(`distinct pages of 100 (each in gzip and br) of the organization of ${fmt(LARGE_MEMBERS)} members, asked for 8 at a time.`)
  print()
  print('| RSS before | RSS after | Growth |')
  print('|---:|---:|---:|')
  print(`| ${fmt(cacheRssBefore, 1)} MB | ${fmt(cacheRssAfter, 1)} MB | ${fmt(cacheRssAfter - cacheRssBefore, 1)} MB |`)
  target('page cache filled past its bound: RSS growth', '< 32 MB', `${fmt(cacheRssAfter - cacheRssBefore, 1)} MB`, cacheRssAfter - cacheRssBefore < 32)
  await Promise.all([svcSmall, svcLarge, svcKeys].map((s) => stop(s.child)))
  target('RSS with the bundled fixtures, after start and after load', '< 100 MB', `${fmt(bundled.rssAfterStart, 1)} / ${fmt(bundledRssAfterLoad, 1)} MB`, Math.max(bundled.rssAfterStart, bundledRssAfterLoad) < 100)
  target(`first 200 after start, bundled fixtures (median of ${START_ROUNDS})`, '< 250 ms', `${fmt(starts.warm.median)} ms`, starts.warm.median < 250)
  // The aims for 1,000,000 members in a file were < 2 s and < 250 MB (measured 1,670 ms and 241 MB); a
  // file of 50,000 is one JSON.parse of 6.3 MB: 315 to 350 ms to the first 200 pinned to a core on a
  // quiet machine, 500 ms and more on a busy one, and 120 to 130 MB, measured on 2026-11-27.
  target(`first 200 after start, ${fmt(LARGE_MEMBERS)} members`, '< 1 s', `${fmt(svcLarge.firstAnswerMs)} ms`, svcLarge.firstAnswerMs < 1000)
  target(`RSS with ${fmt(LARGE_MEMBERS)} members, after start and after load`, '< 150 MB', `${fmt(svcLarge.rssAfterStart, 1)} / ${fmt(largeRssAfterLoad, 1)} MB`, Math.max(svcLarge.rssAfterStart, largeRssAfterLoad) < 150)

  await liveDataFiles({ print, target, small, large })

  console.error('Key table: 1,000,000 keys built and looked up...')
  const { lines: keyTableLines } = await benchKeyTable({ root: ROOT })
  print()
  for (const line of keyTableLines) print(line)

  console.error('Data structures against the simple ones, at 1,000,000 keys...')
  print()
  for (const line of await benchStructures()) print(line)

  console.error('Commands: npm run key against what it runs, unbundled and bundled...')
  {
    const { results: commands, lines: commandLines } = await benchCommands({ root: ROOT, work, pin: (command, args) => pinned(SERVER_CORE, command, args) })
    print()
    for (const line of commandLines) print(line)
    // Issue 48: a script that mints many keys needs well under a second a command.
    const slowest = Math.max(...commands.filter((c) => c.npm).map((c) => c.medianMs))
    target('a key command through npm (npm run key: list, mint), median', '< 500 ms', ms(slowest), slowest < 500)
  }

  console.error('PostgreSQL: revocation on three replicas, reload of 1,000,000 members...')
  pinSelf(`0-${cpus().length - 1}`)
  const { results: pg, lines: pgLines } = await benchPostgres({ root: ROOT })
  print()
  for (const line of pgLines) print(line)
  target('revocation with PostgreSQL, every one of 3 replicas (max of 20)', '< 200 ms', ms(pg.revocation.maxMs), pg.revocation.maxMs < 200)

  console.error('Memory per record, and data files refused (about half a minute)...')
  const { lines: recordLines } = await benchRecords({ root: ROOT })
  print()
  for (const line of recordLines) print(line)

  if (SCALE) {
    const { keys, organizations, changes, before } = SCALE_SETTINGS
    console.error(`Gateway scale: ${fmt(keys)} keys and ${fmt(organizations)} organizations in PostgreSQL, two replicas (about ${before ? '30 minutes: this build and BENCH_BEFORE' : '15 minutes'} at full size)...`)
    const { results: scale, lines: scaleLines } = await benchScale({ root: ROOT, ...SCALE_SETTINGS })
    print()
    for (const line of scaleLines) print(line)
    const r = scale.after
    target(`gateway scale: RSS after start and after ${changes} changes`, '< 600 MB', `${fmt(r.rssStart)} / ${fmt(r.rssChanged)} MB`, Math.max(r.rssStart, r.rssChanged) < 600)
    // p99 of 20 is the slowest of the 20.
    const changeP99 = Math.max(...r.times.revocation, ...r.times.mint)
    target('gateway scale: revocation and mint on both replicas, p99 of 20 each', '< 100 ms', ms(changeP99), changeP99 < 100)
    // Issue 29: a replica's start within 3 times what PostgreSQL itself takes to hand over its rows
    // (the floor is one replica's rows: the third replica, started alone, is the start it compares with).
    target('gateway scale: start of a replica against the COPY floor', '<= 3×', `${fmt(r.joinMs / r.floorMs, 1)}× (${ms(r.joinMs)})`, r.joinMs <= 3 * r.floorMs)
    // Issue 27: no slower than the build before, measured in the same run (BENCH_BEFORE).
    if (scale.before) target('gateway scale: start against the build before (BENCH_BEFORE)', 'no slower', `${ms(r.startMs)} against ${ms(scale.before.startMs)}`, r.startMs <= scale.before.startMs)
  }

  print()
  print('## Targets')
  print()
  print('| Target | Aim | Measured | |')
  print('|---|---|---:|---|')
  for (const line of targets) print(line)

  if (OUTPUT !== '-') {
    writeFileSync(join(ROOT, OUTPUT), lines.join('\n') + '\n')
    console.error(`\nwritten to ${OUTPUT}`)
  }
}

await main()
