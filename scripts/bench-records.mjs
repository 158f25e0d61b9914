// A section of npm run bench, for servers started as `npm start` starts them, from files.
// "Memory per record": each data set is the bundled fixtures with one file replaced by N records of
// one kind; a record's cost is the server's RSS after start, minus that of a server with the bundled
// fixtures alone, divided by N. The peak is the RSS's high-water mark while the server read its data
// (VmHWM). N is what a data file of at most 8 MiB holds of the largest records (keys named with 256
// characters). scripts/bench.mjs calls benchRecords(); `npm run build && node
// scripts/bench-records.mjs` runs it alone. BENCH_RECORDS sets N (20000).
import { spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { closeSync, cpSync, mkdtempSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs'
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

export async function benchRecords ({ root, records = 20_000 }) {
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
      ...rows
    ]
    return { lines }
  } finally {
    rmSync(work, { recursive: true, force: true })
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { lines } = await benchRecords({ root: new URL('..', import.meta.url).pathname, records: Number(process.env.BENCH_RECORDS ?? 20_000) })
  console.log(lines.join('\n'))
}
