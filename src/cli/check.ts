// Validates a data folder the way the server does at start, without starting one: for CI pipelines
// that build data. Usage: npm run check -- --fixtures-dir DIR (default: FIXTURES_DIR, else the bundled data)
import { parseArgs } from 'node:util'
import { loadConfig } from '../config.js'
import { countRecords } from '../repositories/records.js'
import { loadFixtures } from '../repositories/sources/files.js'

async function main () {
  const { values } = parseArgs({ options: { 'fixtures-dir': { type: 'string' } } })
  const dir = values['fixtures-dir'] ?? loadConfig().FIXTURES_DIR
  const data = await loadFixtures(dir)
  const { providers, endpoints, organizations, members, keys } = countRecords(data)
  process.stdout.write(`${dir}: valid: ${providers} providers, ${endpoints} ZDR endpoints, ` +
    `${organizations} organizations, ${members} members, ${keys} keys\n`)
}

main().catch((error: Error) => {
  // One line, as the server says it at start (file, record, field).
  process.stderr.write(`invalid: ${error.message}\n`)
  process.exit(1)
})
