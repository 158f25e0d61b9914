// The key table's rows of npm run bench: what building the index of a million keys costs, and what a
// lookup by SHA-256 costs (the one every authenticated request makes), found and not found; and that
// hashes sharing their first digits (placeholders such as lpad(n, 64, '0')) build in as little time;
// and what auth's whole lookup costs (the key's object made, its expiry read) for a key that expires
// against one that does not, a quarter of the keys expiring.
// No server: the table of dist/ alone. scripts/bench.mjs calls benchKeyTable();
// `npm run build && node scripts/bench-key-table.mjs` runs it alone. Settings: BENCH_KEY_TABLE_KEYS
// (1000000), BENCH_KEY_TABLE_ROUNDS (5; the figures are medians).
import { randomBytes } from 'node:crypto'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

const KEYS = Number(process.env.BENCH_KEY_TABLE_KEYS ?? 1_000_000)
const ROUNDS = Number(process.env.BENCH_KEY_TABLE_ROUNDS ?? 5)
const DEGENERATE = 60_000

const fmt = (n, digits = 0) => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]

const keysOf = (shas) => shas.map((sha256, i) => ({ name: `key-${i}`, sha256, kind: i % 10 === 0 ? 'management' : 'standard', organization_id: `org_${i % 100_000}` }))
const randomShas = (count) => Array.from({ length: count }, () => randomBytes(32).toString('hex'))

function shuffled (values) {
  for (let i = values.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1))
    ;[values[i], values[j]] = [values[j], values[i]]
  }
  return values
}

/** Milliseconds `run` takes. */
function timed (run) {
  const started = performance.now()
  run()
  return performance.now() - started
}

/** Nanoseconds a lookup of each of `shas` takes, on average. */
function lookupNs (table, shas) {
  let found = 0
  const ms = timed(() => { for (const sha of shas) if (table.rowOfSha(sha) >= 0) found++ })
  // Read, so that the loop is not optimised away.
  if (found < 0) throw new Error('unreachable')
  return ms * 1e6 / shas.length
}

/** Nanoseconds auth's lookup of each of `shas` takes: the key found as an object, and its expiry compared with now. */
function authNs (table, expiryOf, shas) {
  const now = Date.now()
  let expired = 0
  const ms = timed(() => { for (const sha of shas) if (expiryOf(table.bySha.get(sha)) <= now) expired++ })
  if (expired < 0) throw new Error('unreachable')
  return ms * 1e6 / shas.length
}

export async function benchKeyTable ({ root }) {
  const { KeyTable, expiryOf } = await import(pathToFileURL(join(root, 'dist/repositories/key-table.js')).href)
  const keys = keysOf(randomShas(KEYS))
  // Found: every key, in random order (sorted hashes would walk the index in order). Not found: hashes of no key.
  const present = shuffled(keys.map((key) => key.sha256))
  const absent = randomShas(KEYS)
  const degenerate = keysOf(Array.from({ length: DEGENERATE }, (_, i) => String(i).padStart(64, '0')))

  const build = []
  const hit = []
  const miss = []
  const degenerateBuild = []
  // A quarter of the keys expire, a year from now: auth's lookup of those, and of the others.
  const year = Date.now() + 365 * 86_400_000
  const expiring = keys.map((key, i) => i % 4 === 0 ? { ...key, expires_at: new Date(year + i).toISOString() } : key)
  const expiringShas = shuffled(expiring.filter((_, i) => i % 4 === 0).map((key) => key.sha256))
  const lastingShas = shuffled(expiring.filter((_, i) => i % 4 !== 0).map((key) => key.sha256)).slice(0, expiringShas.length)
  const authExpiring = []
  const authLasting = []
  for (let round = 0; round < ROUNDS; round++) {
    let table
    build.push(timed(() => { table = KeyTable.of(keys, 'keys') }))
    hit.push(lookupNs(table, present))
    miss.push(lookupNs(table, absent))
    degenerateBuild.push(timed(() => KeyTable.of(degenerate, 'keys')))
    table = KeyTable.of(expiring, 'keys')
    authLasting.push(authNs(table, expiryOf, lastingShas))
    authExpiring.push(authNs(table, expiryOf, expiringShas))
  }
  const results = { keys: KEYS, buildMs: median(build), hitNs: median(hit), missNs: median(miss), degenerate: DEGENERATE, degenerateBuildMs: median(degenerateBuild), authLastingNs: median(authLasting), authExpiringNs: median(authExpiring) }
  const lines = [
    '## Key table',
    '',
    `The index of keys by SHA-256 alone (\`src/repositories/key-table.ts\`), no server; medians of ${ROUNDS} rounds.`,
    '',
    '| Measure | Value |',
    '|---|---:|',
    `| build, ${fmt(KEYS)} keys with random hashes | ${fmt(results.buildMs)} ms |`,
    `| lookup by SHA-256 among them, found | ${fmt(results.hitNs)} ns |`,
    `| lookup by SHA-256 among them, not found | ${fmt(results.missNs)} ns |`,
    `| build, ${fmt(DEGENERATE)} keys whose hashes are lpad(n, 64, '0') | ${fmt(results.degenerateBuildMs)} ms |`,
    `| auth's lookup (the key made, its expiry compared), a quarter expiring: a key without expiry | ${fmt(results.authLastingNs)} ns |`,
    `| the same, a key that expires | ${fmt(results.authExpiringNs)} ns |`
  ]
  return { results, lines }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const { lines } = await benchKeyTable({ root: new URL('..', import.meta.url).pathname })
  console.log(lines.join('\n'))
}
