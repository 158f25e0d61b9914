// Two sections of npm run bench, for servers started as `npm start` starts them, from files.
// "Memory per record": each data set is the bundled fixtures with one file replaced by N records of
// one kind; a record's cost is the server's RSS after start, minus that of a server with the bundled
// fixtures alone, divided by N. The peak is the RSS's high-water mark while the server read its data
// (VmHWM). "Large files refused": a server holding a million keys is given, by rename, a keys.json of
// the same million keys spoiled in one way; the time from the rename to the log line of the refusal,
// the RSS's growth meanwhile (sampled every 10 ms), and the event loop's longest delay meanwhile
// (nodejs_eventloop_lag_max_seconds). scripts/bench.mjs calls benchRecords(); `npm run build && node
// scripts/bench-records.mjs` runs it alone. BENCH_RECORDS sets N (500000).
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
    env: { PATH: process.env.PATH, PORT: '0', FIXTURES_DIR: dir },
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

/** keys.json of a million keys, spoiled in each way, and the refusal a server holding them gives. */
const BAD_FILES = [
  { label: 'a record cut short at its end', write: (path, n) => writeArray(path, n, key, { end: ',{"name":}]' }) },
  { label: 'a write caught half-way (cut in a record)', write: (path, n) => writeArray(path, n, key, { end: ',{"name":"key-x","sha256":"0123' }) },
  { label: 'the array inside an object', write: (path, n) => writeArray(path, n, key, { start: '{"keys":[', end: ']}' }) },
  {
    label: 'a last key named with 100 MB',
    write: (path, n) => writeArray(path, n + 1, (i) => i < n ? key(i) : `{"name":"${'k'.repeat(100_000_000)}","sha256":"${sha256('x')}","kind":"standard","organization_id":"org_0"}`)
  }
]

async function badFiles (root, work, keys) {
  const dir = join(work, 'bad')
  cpSync(join(root, 'fixtures'), dir, { recursive: true })
  writeArray(join(dir, 'keys.json'), keys, key)
  const server = await start(root, dir)
  const rows = []
  try {
    for (const bad of BAD_FILES) {
      const bytes = bad.write(join(work, 'keys.json'), keys)
      await loopDelay(server)
      const before = memory(server.child.pid).rss
      let peak = before
      const sampler = setInterval(() => { peak = Math.max(peak, memory(server.child.pid).rss) }, 10)
      const from = server.output.length
      const started = performance.now()
      renameSync(join(work, 'keys.json'), join(dir, 'keys.json'))
      let line
      while (!(line = server.output.slice(from).split('\n').find((text) => text.includes('"msg":"change refused')))) await sleep(5)
      const took = performance.now() - started
      clearInterval(sampler)
      const delay = await loopDelay(server)
      const problem = JSON.parse(line).problem
      rows.push(`| ${bad.label} | ${fmt(bytes / 1e6)} MB | ${fmt(took)} ms | ${fmt(before / 1e6)} MB | +${fmt((peak - before) / 1e6)} MB | ${fmt(delay)} ms | \`${problem}\` |`)
    }
  } finally {
    server.child.kill('SIGKILL')
  }
  return rows
}

export async function benchRecords ({ root, records = 500_000, keys = 1_000_000 }) {
  const work = mkdtempSync(join(tmpdir(), 'bench-records-'))
  try {
    const base = await measure(root, join(root, 'fixtures'))
    const rows = []
    for (const set of DATA_SETS) {
      const dir = join(work, 'data')
      rmSync(dir, { recursive: true, force: true })
      cpSync(join(root, 'fixtures'), dir, { recursive: true })
      const bytes = set.write(join(dir, set.file), records)
      const { rss, peak } = await measure(root, dir)
      rows.push(`| ${fmt(records)} ${set.label} | ${fmt(bytes / 1e6, 1)} MB | ${fmt(rss / 1e6)} MB | ${fmt(peak / 1e6)} MB | ${fmt((rss - base.rss) / records)} B |`)
    }
    const lines = [
      '## Memory per record',
      '',
      `A server started on the bundled fixtures with one file replaced by ${fmt(records)} records of one kind;`,
      'a record\'s cost is the RSS after start, less that of the bundled fixtures alone',
      `(${fmt(base.rss / 1e6)} MB, peak ${fmt(base.peak / 1e6)} MB), divided by the number of records.`,
      '',
      '| Data | File | RSS after start | Peak RSS | A record |',
      '|---|---:|---:|---:|---:|',
      ...rows,
      '',
      '## Large files refused',
      '',
      `A server holding ${fmt(keys)} keys (from files) is given, by rename, a keys.json of the same keys on one line,`,
      'spoiled in one way: the time to the log line of its refusal, the RSS before and its growth meanwhile, and',
      'the event loop\'s longest delay meanwhile (`nodejs_eventloop_lag_max_seconds`). The keys served do not change.',
      '',
      '| keys.json with | File | Refused after | RSS before | RSS meanwhile | Event loop\'s longest delay | Problem logged |',
      '|---|---:|---:|---:|---:|---:|---|',
      ...await badFiles(root, work, keys)
    ]
    return { lines }
  } finally {
    rmSync(work, { recursive: true, force: true })
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { lines } = await benchRecords({ root: new URL('..', import.meta.url).pathname, records: Number(process.env.BENCH_RECORDS ?? 500_000) })
  console.log(lines.join('\n'))
}
