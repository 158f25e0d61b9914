// The commands' rows of npm run bench (issue 48: a script that mints many keys needs well under a second
// a command): the wall time of `npm run key` as a user runs it, listing and minting, against what it is
// made of, measured in the same run: Node.js's own start (`node -e ''`, the floor), the staleness check
// that npm run runs first (`node scripts/build.mjs --if-stale`, nothing to build), the bundled command
// alone, and the same command unbundled (tsc's output, one file per module, as dist/cli was before
// scripts/bundle.mjs bundled it). Each command runs in turn, in the other order every other round.
// scripts/bench.mjs calls benchCommands(); `npm run build && node scripts/bench-commands.mjs` runs it
// alone. Settings: BENCH_COMMAND_ROUNDS (20; the figures are medians).
import { execFileSync, spawn } from 'node:child_process'
import { once } from 'node:events'
import { copyFileSync, cpSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

const ROUNDS = Number(process.env.BENCH_COMMAND_ROUNDS ?? 20)
const ORGANIZATION = 'org_2vQmAcme0001'

const fmt = (n, digits = 0) => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]

/** Milliseconds from spawning `command` to its exit; throws with its output when it fails. */
async function timed ([command, args], cwd) {
  const started = performance.now()
  const child = spawn(command, args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (chunk) => { stderr += chunk })
  const [code] = await once(child, 'exit')
  const elapsed = performance.now() - started
  if (code !== 0) throw new Error(`${command} ${args.join(' ')} exited ${code}: ${stderr}`)
  return elapsed
}

/**
 * `work`: a folder of the caller's, emptied by it. `pin(command, args)` answers the command and arguments
 * that run it where the caller wants it (a core of its own); as it is by default.
 */
export async function benchCommands ({ root, work, pin = (command, args) => [command, args] }) {
  const data = join(work, 'commands-data')
  cpSync(join(root, 'fixtures'), data, { recursive: true })
  // tsc's output as it is, in a folder that finds the packages and the module type as dist/ does.
  const unbundled = join(work, 'commands-unbundled')
  execFileSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', join(root, 'tsconfig.build.json'), '--outDir', join(unbundled, 'dist')], { stdio: 'inherit' })
  copyFileSync(join(root, 'package.json'), join(unbundled, 'package.json'))
  symlinkSync(join(root, 'node_modules'), join(unbundled, 'node_modules'))
  // The commands find the migrations at the package's root, above dist/, as in the image.
  symlinkSync(join(root, 'migrations'), join(unbundled, 'migrations'))

  const list = ['list', '--data-dir', data]
  // A name of its own each time: mint refuses a name it has.
  let minted = 0
  const mint = () => ['--kind', 'standard', '--org', ORGANIZATION, '--name', `bench-${minted++}`, '--data-dir', data]
  const rows = [
    { label: "`node -e ''`: Node.js's own start, the floor", run: () => [process.execPath, ['-e', '']] },
    { id: 'check', label: '`node scripts/build.mjs --if-stale`, nothing to build: what npm run runs first', run: () => [process.execPath, ['scripts/build.mjs', '--if-stale']] },
    { label: '`node dist/cli/mint-key.js list`, unbundled (one file per module)', run: () => [process.execPath, [join(unbundled, 'dist/cli/mint-key.js'), ...list]] },
    { id: 'bundled', label: '`node dist/cli/mint-key.js list`, bundled', run: () => [process.execPath, ['dist/cli/mint-key.js', ...list]] },
    { id: 'npm', label: '`npm run -s key -- list`', run: () => ['npm', ['run', '-s', 'key', '--', ...list]], npm: true },
    { label: '`npm run -s key -- --kind standard ...`, a key minted', run: () => ['npm', ['run', '-s', 'key', '--', ...mint()]], npm: true }
  ]
  // Once each first: the files read, the build's stamp checked.
  for (const row of rows) await timed(pin(...row.run()), root)
  const times = rows.map(() => [])
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? rows.keys() : [...rows.keys()].reverse()
    for (const i of order) times[i].push(await timed(pin(...rows[i].run()), root))
  }
  rmSync(unbundled, { recursive: true, force: true })

  const results = rows.map((row, i) => ({ label: row.label, npm: row.npm === true, medianMs: median(times[i]), minMs: Math.min(...times[i]), maxMs: Math.max(...times[i]) }))
  const medianOf = (id) => results[rows.findIndex((row) => row.id === id)].medianMs
  const lines = [
    '## Commands',
    '',
    `Wall time from spawn to exit of \`npm run key\` (the bundled fixtures' keys, copied) and of what it runs, each in turn,`,
    `${ROUNDS} rounds; medians, and the fastest and slowest run. \`npm run\` runs \`node scripts/build.mjs --if-stale && exec node dist/cli/mint-key.js\`.`,
    '',
    '| Command | Median | Fastest | Slowest |',
    '|---|---:|---:|---:|',
    ...results.map((r) => `| ${r.label} | ${fmt(r.medianMs)} ms | ${fmt(r.minMs)} ms | ${fmt(r.maxMs)} ms |`),
    '',
    `npm's own part of \`npm run -s key -- list\` (its median less those of the check and of the bundled command): ${fmt(medianOf('npm') - medianOf('check') - medianOf('bundled'))} ms.`
  ]
  return { results, lines }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const work = mkdtempSync(join(tmpdir(), 'bench-commands-'))
  try {
    const { lines } = await benchCommands({ root: new URL('..', import.meta.url).pathname, work })
    console.log(lines.join('\n'))
  } finally {
    rmSync(work, { recursive: true, force: true })
  }
}
