// Validates a data folder the way the server does at start, without starting one: for CI pipelines
// that build data. Usage: npm run check -- --fixtures-dir DIR (default: FIXTURES_DIR, else the bundled data)
import { parseArgs } from 'node:util'
import { loadConfig } from '../config.js'
import { loadFixtures } from '../repositories/sources/files.js'

async function main () {
  const { values } = parseArgs({ options: { 'fixtures-dir': { type: 'string' } } })
  const dir = values['fixtures-dir'] ?? loadConfig().FIXTURES_DIR
  const data = await loadFixtures(dir)
  const members = data.organizations.reduce((sum, organization) => sum + organization.members.length, 0)
  process.stdout.write(`${dir}: valid: ${data.providers.length} providers, ${data.endpoints.length} ZDR endpoints, ` +
    `${data.organizations.length} organizations, ${members} members, ${data.keys.length} keys\n`)
}

main().catch((error: Error) => {
  // One line, as the server says it at start (file, record, field).
  process.stderr.write(`invalid: ${error.message}\n`)
  process.exit(1)
})
