// Validates a data folder the way the server does at start, without starting one: for CI pipelines
// that build data.
import { loadConfig } from '../config.js'
import { countRecords, describeCounts, orphanKeys } from '../repositories/records.js'
import { loadDataFolder } from '../repositories/sources/files.js'
import { DATA_DIR_OPTIONS, dataDirOf, readCommandLine } from './command-line.js'

const HELP = `Validates a data folder the way the server does at start, without starting a server.

usage: npm run check -- [--data-dir <dir>] [--strict]

  --data-dir <dir>  the folder to check (default: DATA_DIR, else the bundled fixtures/)
  --strict          refuses (exits 1) a key whose organization organizations.json does not have
  -h, --help        prints this help

Prints the counts of a valid folder and exits 0, or the first problem (file, record, field) and exits 1.
A key of an organization that organizations.json does not have is valid, as the server serves it (its
member listing answers 404): a warning names it, on stderr, and the check still exits 0; with --strict,
what a pipeline that builds data wants, it names it the same way and exits 1.
`

async function main () {
  const { values } = readCommandLine('check', { ...DATA_DIR_OPTIONS, strict: { type: 'boolean' } })
  if (values.help) {
    process.stdout.write(HELP)
    return
  }
  const dir = dataDirOf('check', values) ?? loadConfig().DATA_DIR
  const data = await loadDataFolder(dir)
  const orphans = orphanKeys(data)
  if (values.strict && orphans.length > 0) {
    for (const line of orphans) process.stderr.write(`invalid: ${line}\n`)
    process.exit(1)
  }
  process.stdout.write(`${dir}: valid: ${describeCounts(countRecords(data))}\n`)
  for (const line of orphans) process.stderr.write(`warning: ${line}\n`)
}

main().catch((error: Error) => {
  // One line, as the server says it at start (file, record, field).
  process.stderr.write(`invalid: ${error.message}\n`)
  process.exit(1)
})
