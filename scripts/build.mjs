// `npm run build`: tsc, then the bundles of the server and the commands (bundle.mjs). With --if-stale, only when something
// the build reads changed since the last build that succeeded: npm start, the commands (npm run key,
// check, db, docs) and the tests' set-up then start at once when nothing changed, and still never
// run code older than the sources. Comparing modification times answers sooner than tsc's incremental
// build, which reads every file again, and leaves the bundle to decide apart.
import { execFileSync } from 'node:child_process'
import { existsSync, readdirSync, statSync, utimesSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'

const HELP = `Compiles src/ to dist/ (tsc), then bundles the server into dist/main.js and each command into its
file of dist/cli/ (scripts/bundle.mjs).

usage: npm run build
       node scripts/build.mjs --if-stale   (what npm start, npm run key, check, db, docs and bench run first)

  --if-stale  builds only when a source, a setting of the build or a dependency changed since the last build
  -h, --help  prints this help
`

let options
try {
  options = parseArgs({ options: { 'if-stale': { type: 'boolean' }, help: { type: 'boolean', short: 'h' } }, strict: true }).values
} catch (error) {
  process.stderr.write(`${error.message.split('. ')[0].replace(/^./, (first) => first.toLowerCase())}; see npm run build -- --help\n`)
  process.exit(2)
}
if (options.help) {
  process.stdout.write(HELP)
  process.exit(0)
}

process.chdir(fileURLToPath(new URL('..', import.meta.url)))

/**
 * Stops with one line when the dependencies are not all there, rather than with the stack trace of the
 * first module that cannot be found (in tsc, or in the command run next on a build left from before).
 * npm ci and npm install write node_modules/.package-lock.json when they have installed everything: a
 * failed or interrupted npm ci leaves none. npm ci --omit=dev writes it without the compiler.
 */
function refuseWithoutDependencies (building) {
  const missing = !existsSync('node_modules/.package-lock.json')
    ? 'the dependencies are not installed (node_modules/.package-lock.json is missing)'
    : building && !existsSync('node_modules/typescript/bin/tsc') ? 'TypeScript is not installed (npm ci --omit=dev leaves it out)' : undefined
  if (missing === undefined) return
  process.stderr.write(`cannot build: ${missing}: run npm ci\n`)
  process.exit(1)
}

/**
 * Written when a build succeeds, dated when it started: a file saved while tsc ran is newer, and is
 * built next time. A build that failed writes none, so the next one runs again and says why.
 */
const STAMP = 'dist/.build-stamp'

/**
 * What the build reads: the sources (a file added, renamed or deleted changes its folder's time), the
 * compiler's settings, the build itself, and the dependencies the bundle holds (npm ci and npm install
 * rewrite node_modules/.package-lock.json).
 */
const INPUTS = ['src', 'tsconfig.json', 'tsconfig.build.json', 'scripts/build.mjs', 'scripts/bundle.mjs', 'package.json', 'package-lock.json', 'node_modules/.package-lock.json']

/** The latest modification time of `path` and, for a folder, of all it holds; 0 when it does not exist. */
function lastChange (path) {
  const stat = statSync(path, { throwIfNoEntry: false })
  if (stat === undefined) return 0
  if (!stat.isDirectory()) return stat.mtimeMs
  return Math.max(stat.mtimeMs, ...readdirSync(path).map((entry) => lastChange(join(path, entry))))
}

function isCurrent () {
  const built = statSync(STAMP, { throwIfNoEntry: false })?.mtimeMs
  // Equal counts as changed: on a file system that keeps whole seconds, a file saved in the second the
  // build started may not have been read.
  return built !== undefined && INPUTS.every((input) => lastChange(input) < built)
}

const building = !(options['if-stale'] && isCurrent())
refuseWithoutDependencies(building)
if (building) {
  const started = new Date()
  try {
    execFileSync(process.execPath, ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.build.json'], { stdio: 'inherit' })
  } catch (error) {
    // tsc has said why on stderr.
    process.exit(error.status ?? 1)
  }
  await import('./bundle.mjs')
  writeFileSync(STAMP, '')
  utimesSync(STAMP, started, started)
}
