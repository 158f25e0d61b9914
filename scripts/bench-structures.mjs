// What each specialised structure of the data layer saves against the simple one it replaces, at the
// size its source is for (1,000,000 keys in PostgreSQL): the key table against two Maps of key
// objects (memory and build), the hand-written key check against the schema's compiled one, and an
// overlay change against copying a Map. No server: the modules of dist/ alone, each measure in a
// process of its own (--expose-gc) so that one's heap does not weigh on another's. scripts/bench.mjs
// calls benchStructures(); `npm run build && node scripts/bench-structures.mjs` runs it alone.
// BENCH_STRUCTURES_KEYS sets the size (1000000).
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

const KEYS = Number(process.env.BENCH_STRUCTURES_KEYS ?? 1_000_000)
const ROOT = join(fileURLToPath(import.meta.url), '..', '..')
const fmt = (n, digits = 0) => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })

const keyOf = (i) => ({ name: `key-${i}`, sha256: createHash('sha256').update(`k${i}`).digest('hex'), kind: i % 10 === 0 ? 'management' : 'standard', organization_id: `org_${i % 100_000}` })

/** One measure, in this process: run by a child. */
async function measure (which) {
  const { KeyTable, isApiKey } = await import(pathToFileURL(join(ROOT, 'dist/repositories/key-table.js')).href)
  const { LayeredMap } = await import(pathToFileURL(join(ROOT, 'dist/repositories/layered-map.js')).href)
  const { TypeCompiler } = await import('@sinclair/typebox/compiler')
  const { ApiKeySchema } = await import(pathToFileURL(join(ROOT, 'dist/schemas/keys-and-organizations.js')).href)
  const heap = () => { globalThis.gc(); globalThis.gc(); const m = process.memoryUsage(); return m.heapUsed + m.arrayBuffers }
  const timed = (run) => { const started = performance.now(); const value = run(); return [performance.now() - started, value] }
  if (which === 'table' || which === 'maps') {
    // Made a batch at a time and dropped, as a whole read of the table makes them.
    const before = heap()
    const [ms, held] = timed(() => {
      if (which === 'table') return KeyTable.of((function * () { for (let i = 0; i < KEYS; i++) yield keyOf(i) })(), 'keys')
      const byName = new Map()
      const bySha = new Map()
      for (let i = 0; i < KEYS; i++) {
        const key = keyOf(i)
        byName.set(key.name, key)
        bySha.set(key.sha256, key)
      }
      return [byName, bySha]
    })
    const bytes = heap() - before
    if (held === undefined) throw new Error('unreachable')
    return { ms, bytesPerKey: bytes / KEYS }
  }
  if (which === 'check') {
    const keys = Array.from({ length: KEYS }, (_, i) => keyOf(i))
    const compiled = TypeCompiler.Compile(ApiKeySchema)
    const [schemaMs] = timed(() => keys.every((key) => compiled.Check(key)))
    const [handMs] = timed(() => keys.every((key) => isApiKey(key)))
    return { schemaMs, handMs }
  }
  if (which === 'overlay') {
    const map = new Map()
    for (let i = 0; i < KEYS; i++) map.set(`key-${i}`, i)
    let layered = LayeredMap.of(map)
    const [overlayMs] = timed(() => { for (let i = 0; i < 100; i++) layered = layered.with([[`key-${i}`, undefined]]) })
    let copy = map
    const [copyMs] = timed(() => { for (let i = 0; i < 10; i++) { copy = new Map(copy); copy.delete(`key-${i}`) } })
    return { overlayMs: overlayMs / 100, copyMs: copyMs / 10 }
  }
  throw new Error(`no measure ${which}`)
}

function inChild (which) {
  const out = execFileSync(process.execPath, ['--expose-gc', fileURLToPath(import.meta.url), which], { encoding: 'utf8', env: { ...process.env }, maxBuffer: 1 << 20 })
  return JSON.parse(out)
}

export async function benchStructures () {
  const table = inChild('table')
  const maps = inChild('maps')
  const check = inChild('check')
  const overlay = inChild('overlay')
  return [
    '## Data structures, against the simple ones',
    '',
    `Each at ${fmt(KEYS)} keys (what a replica holds at gateway scale), in a process of its own, no server; heap and`,
    'array buffers after two full collections.',
    '',
    '| Structure | Simple alternative | Structure | Alternative |',
    '|---|---|---:|---:|',
    `| key table (\`key-table.ts\`): memory a key | two \`Map\`s of key objects, by name and by SHA-256 | ${fmt(table.bytesPerKey)} B | ${fmt(maps.bytesPerKey)} B |`,
    `| key table: build | the two \`Map\`s | ${fmt(table.ms)} ms | ${fmt(maps.ms)} ms |`,
    `| hand-written key check (\`isApiKey\`), every key | the schema's compiled check | ${fmt(check.handMs)} ms | ${fmt(check.schemaMs)} ms |`,
    `| overlay (\`layered-map.ts\`): one revocation | a copy of the \`Map\` less one key | ${fmt(overlay.overlayMs, 3)} ms | ${fmt(overlay.copyMs)} ms |`,
    ''
  ]
}

// Run as a program: one measure in a child of benchStructures (its argument), or the whole table. Imported
// (by bench.mjs), nothing: the arguments are then bench.mjs's own.
if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  if (process.argv[2] !== undefined) process.stdout.write(JSON.stringify(await measure(process.argv[2])))
  else console.log((await benchStructures()).join('\n'))
}
