// Two sections of npm run bench, for servers started as `npm start` starts them, from files.
// "Memory per record": each data set is the bundled fixtures with one file replaced by N records of
// one kind; a record's cost is the server's RSS after start, minus that of a server with the bundled
// fixtures alone, divided by N. The peak is the RSS's high-water mark while the server read its data
// (VmHWM). A data file is refused over 8 MiB: a data set whose N records would not fit holds the most
// that do (a round number), and its row says how many. "Data files refused": a server holding N keys
// from files is given, by rename, a keys.json spoiled in one way, once just under 8 MiB (read, parsed,
// refused) and once of 150 MB (refused by its size, before a byte is read); the time from the rename
// to the refusal (its log line's time), the RSS's growth meanwhile (sampled every 10 ms), and the
// event loop's longest delay meanwhile (nodejs_eventloop_lag_max_seconds). scripts/bench.mjs calls
// benchRecords(); `npm run build && node scripts/bench-records.mjs` runs it alone. BENCH_RECORDS sets
// N (50000).
import { spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { closeSync, cpSync, mkdtempSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { serverArgs } from './bench-postgres.mjs'

const fmt = (n, digits = 0) => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })
const memory = (pid) => {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  const kb = (field) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)[1]) * 1024
  return { rss: kb('VmRSS'), peak: kb('VmHWM') }
}

/** Writes a JSON array of `count` elements, `element(i)` each, a chunk at a time; answers its size. */
function writeArray (path, count, element, { start = '[', end = ']' } = {}) {
  const fd = openSync(path, 'w')
  let size = 0
  let chunk = start
  for (let i = 0; i < count; i++) {
    chunk += (i === 0 ? '' : ',') + element(i)
    if (chunk.length > 1 << 20 || i === count - 1) {
      size += writeSync(fd, i === count - 1 ? chunk + end : chunk)
      chunk = ''
    }
  }
  if (count === 0) size += writeSync(fd, start + end)
  closeSync(fd)
  return size
}

/** The largest data file the server reads (MAX_FILE_BYTES): a larger one is refused by its size. */
const FILE_LIMIT = 8 * 1024 * 1024
/** The size of the files refused by their size alone (those this section once streamed through). */
const HUGE_BYTES = 150_000_000

/**
 * Writes `write(n)` for the largest n, `count` or less, whose file is at most `limit` bytes: n is
 * `count` when that fits, else a multiple of `step` (a data set of organizations of 10 keeps whole
 * ones). Answers n and the file's size.
 */
function writeUnder (limit, count, write, step = 1000) {
  let n = count
  for (;;) {
    const bytes = write(n)
    if (bytes <= limit) return { n, bytes }
    const next = Math.floor(n * (limit / bytes) * 0.995 / step) * step
    if (next <= 0 || next >= n) throw new Error(`no ${step} records fit under ${limit} bytes`)
    n = next
  }
}

const sha256 = (text) => createHash('sha256').update(text).digest('hex')
const member = (i) => `{"id":"user_${i}","email":"person${i}@org.example","first_name":"First${i}","last_name":"Last${i}","role":"org:member"}`

/** The data sets: what one record is, and the file of N of them. */
const DATA_SETS = [
  {
    label: 'keys (`key-123456`, one of 10 organizations)',
    file: 'keys.json',
    write: (path, n) => writeArray(path, n, (i) => `{"name":"key-${i}","sha256":"${sha256(`k${i}`)}","kind":"standard","organization_id":"org_${i % 10}"}`)
  },
  {
    label: 'keys named with 256 characters',
    file: 'keys.json',
    write: (path, n) => writeArray(path, n, (i) => `{"name":"${String(i).padStart(256, 'k')}","sha256":"${sha256(`k${i}`)}","kind":"standard","organization_id":"org_${i % 10}"}`)
  },
  {
    label: 'organizations of no member',
    file: 'organizations.json',
    write: (path, n) => writeArray(path, n, (i) => `{"id":"org_${i}","name":"Organization ${i}","members":[]}`)
  },
  {
    label: 'organizations of one member',
    file: 'organizations.json',
    write: (path, n) => writeArray(path, n, (i) => `{"id":"org_${i}","name":"Organization ${i}","members":[${member(i)}]}`)
  },
  {
    label: 'members, in organizations of 10',
    file: 'organizations.json',
    step: 10,
    write: (path, n) => writeArray(path, n / 10, (o) => `{"id":"org_${o}","name":"Organization ${o}","members":[${Array.from({ length: 10 }, (_, m) => member(o * 10 + m)).join(',')}]}`)
  },
  {
    label: 'members, in one organization',
    file: 'organizations.json',
    write: (path, n) => writeArray(path, n, member, { start: '[{"id":"org_big","name":"Big","members":[', end: ']}]' })
  }
]

/** Starts the server on `dir`; answers once it listens, with its output so far (which grows). */
async function start (root, dir) {
  const child = spawn(process.execPath, serverArgs(root), {
    env: { PATH: process.env.PATH, PORT: '0', DATA_DIR: dir },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  const server = { child, output: '', url: '' }
  child.stdout.on('data', (chunk) => { server.output += chunk })
  child.stderr.on('data', (chunk) => { server.output += chunk })
  await new Promise((resolve, reject) => {
    const look = () => {
      const match = /listening at (http:\/\/[^"\s]+)/i.exec(server.output)
      if (match) {
        server.url = match[1]
        child.stdout.off('data', look)
        resolve()
      }
    }
    child.stdout.on('data', look)
    child.once('exit', () => reject(new Error(`the server exited: ${server.output.slice(-2000)}`)))
  })
  return server
}

/** Starts the server on `dir`; once it listens and has idled a second, answers its memory. */
async function measure (root, dir) {
  const { child } = await start(root, dir)
  try {
    await sleep(1000)
    return memory(child.pid)
  } finally {
    child.kill('SIGKILL')
  }
}

/** The longest event-loop delay since the last scrape (ms): prom-client resets it at each. */
async function loopDelay (server) {
  const text = await (await fetch(`${server.url}/metrics`)).text()
  return Number(/^nodejs_eventloop_lag_max_seconds (\S+)$/m.exec(text)[1]) * 1000
}

const key = (i) => `{"name":"key-${i}","sha256":"${sha256(`k${i}`)}","kind":"standard","organization_id":"org_${i % 10}"}`
/** A key whose name is `bytes` long, far over what a name may be: valid JSON, refused by the schema. */
const longKey = (bytes) => `{"name":"${'k'.repeat(bytes)}","sha256":"${sha256('x')}","kind":"standard","organization_id":"org_0"}`

/**
 * keys.json spoiled in each way, as `n` keys and what spoils them: written just under FILE_LIMIT
 * (read whole and refused) and at HUGE_BYTES (refused by its size, `huge`). `longName`: the bytes of
 * the one long name in each.
 */
const BAD_FILES = [
  { label: 'a record cut short at its end', write: (path, n) => writeArray(path, n, key, { end: ',{"name":}]' }) },
  { label: 'a write caught half-way (cut in a record)', write: (path, n) => writeArray(path, n, key, { end: ',{"name":"key-x","sha256":"0123' }) },
  { label: 'the array inside an object', write: (path, n) => writeArray(path, n, key, { start: '{"keys":[', end: ']}' }) },
  {
    label: 'a last key named with 1 MB (100 MB in the 150 MB file)',
    longName: { limit: 1_000_000, huge: 100_000_000 },
    write (path, n, huge) { return writeArray(path, n + 1, (i) => i < n ? key(i) : longKey(this.longName[huge ? 'huge' : 'limit'])) }
  }
]

/** How many keys make a file of about `bytes` with this spoiling (keys of 6 digits or less). */
function keysFor (bad, bytes, huge) {
  return Math.floor((bytes - (bad.longName?.[huge ? 'huge' : 'limit'] ?? 0)) / (key(999_999).length + 1))
}

/**
 * Renames `path` in as the server's keys.json; answers how its refusal went. The time is that of the
 * refusal's log line (its `time`, the server's clock, which is this one's): the log is written in
 * batches, up to a second after. /metrics is asked only before and after: each scrape resets the
 * event loop's longest delay, and one made right after a long task loses that task's delay.
 */
async function refusal (server, path, dir) {
  await loopDelay(server)
  const before = memory(server.child.pid).rss
  let peak = before
  const sampler = setInterval(() => { peak = Math.max(peak, memory(server.child.pid).rss) }, 10)
  const from = server.output.length
  const renamedAt = Date.now()
  renameSync(path, join(dir, 'keys.json'))
  let line
  while (!(line = server.output.slice(from).split('\n').find((text) => text.includes('"msg":"change refused')))) {
    if (server.child.exitCode !== null) throw new Error(`the server exited: ${server.output.slice(-2000)}`)
    await sleep(20)
  }
  clearInterval(sampler)
  peak = Math.max(peak, memory(server.child.pid).rss)
  const { time, problem } = JSON.parse(line)
  return { ms: time - renamedAt, growth: peak - before, delay: await loopDelay(server), problem }
}

async function badFiles (root, work, keys) {
  const dir = join(work, 'bad')
  rmSync(dir, { recursive: true, force: true })
  cpSync(join(root, 'fixtures'), dir, { recursive: true })
  const served = writeArray(join(dir, 'keys.json'), keys, key)
  if (served > FILE_LIMIT) throw new Error(`keys.json of ${keys} keys: ${served} bytes, over the limit of a data file`)
  const server = await start(root, dir)
  const rows = []
  const hugeProblems = new Set()
  try {
    for (const bad of BAD_FILES) {
      const path = join(work, 'keys.json')
      const { bytes } = writeUnder(FILE_LIMIT, keysFor(bad, FILE_LIMIT, false), (n) => bad.write(path, n, false), 100)
      const limit = await refusal(server, path, dir)
      const hugeBytes = bad.write(path, keysFor(bad, HUGE_BYTES, true), true)
      const huge = await refusal(server, path, dir)
      hugeProblems.add(huge.problem.replace(String(hugeBytes), 'N'))
      rows.push(`| ${bad.label} | ${fmt(bytes / 1e6, 1)} MB | ${fmt(limit.ms)} ms | +${fmt(limit.growth / 1e6)} MB | ${fmt(limit.delay)} ms | ` +
        `${fmt(hugeBytes / 1e6)} MB | ${fmt(huge.ms)} ms | +${fmt(huge.growth / 1e6)} MB | ${fmt(huge.delay)} ms | \`${limit.problem}\` |`)
    }
  } finally {
    server.child.kill('SIGKILL')
  }
  // The files over the limit are refused for their size alone: one problem, whatever spoils them.
  const problems = [...hugeProblems].map((problem) => `\`${problem}\``).join(', ')
  return { rows, problems }
}

export async function benchRecords ({ root, records = 50_000 }) {
  const work = mkdtempSync(join(tmpdir(), 'bench-records-'))
  try {
    const base = await measure(root, join(root, 'fixtures'))
    const rows = []
    for (const set of DATA_SETS) {
      const dir = join(work, 'data')
      rmSync(dir, { recursive: true, force: true })
      cpSync(join(root, 'fixtures'), dir, { recursive: true })
      const { n, bytes } = writeUnder(FILE_LIMIT, records, (count) => set.write(join(dir, set.file), count), set.step ?? 1000)
      const { rss, peak } = await measure(root, dir)
      rows.push(`| ${fmt(n)} ${set.label}${n < records ? ' (the most under 8 MiB)' : ''} | ${fmt(bytes / 1e6, 1)} MB | ${fmt(rss / 1e6)} MB | ${fmt(peak / 1e6)} MB | ${fmt((rss - base.rss) / n)} B |`)
    }
    const refused = await badFiles(root, work, records)
    const lines = [
      '## Memory per record',
      '',
      `A server started on the bundled fixtures with one file replaced by ${fmt(records)} records of one kind (or the most`,
      'that fit in a data file, 8 MiB); a record\'s cost is the RSS after start, less that of the bundled fixtures alone',
      `(${fmt(base.rss / 1e6)} MB, peak ${fmt(base.peak / 1e6)} MB), divided by the number of records.`,
      '',
      '| Data | File | RSS after start | Peak RSS | A record |',
      '|---|---:|---:|---:|---:|',
      ...rows,
      '',
      '## Data files refused',
      '',
      `A server holding ${fmt(records)} keys (from files) is given, by rename, a keys.json spoiled in one way: once just`,
      `under the limit of 8 MiB (read whole, parsed, refused), once of ${fmt(HUGE_BYTES / 1e6)} MB (refused by its size before a byte`,
      'is read). The time from the rename to its refusal (the time of the log line that says it; the folder\'s',
      'debounce, 100 ms, included), the RSS\'s growth meanwhile, and the event loop\'s longest delay meanwhile',
      '(`nodejs_eventloop_lag_max_seconds`).',
      'The keys served do not change.',
      '',
      '| keys.json with | Under 8 MiB | Refused after | RSS meanwhile | Event loop\'s longest delay | Over the limit | Refused after | RSS meanwhile | Event loop\'s longest delay | Problem logged (under 8 MiB) |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|---|',
      ...refused.rows,
      '',
      `Each file over the limit was refused with ${refused.problems} (N its size), whatever spoiled it.`
    ]
    return { lines }
  } finally {
    rmSync(work, { recursive: true, force: true })
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { lines } = await benchRecords({ root: new URL('..', import.meta.url).pathname, records: Number(process.env.BENCH_RECORDS ?? 50_000) })
  console.log(lines.join('\n'))
}
