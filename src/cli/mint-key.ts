// Mints an API key: prints it once and records only its SHA-256 in keys.json.
// Usage: npm run key -- --kind management --org org_x --name ci [--fixtures-dir DIR]
import { hash, randomBytes } from 'node:crypto'
import { rename, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { loadConfig } from '../config.js'
import { FIXTURE_FILES, loadFixtures } from '../repositories/sources/files.js'
import { KEY_KINDS, type ApiKey } from '../schemas/fixtures.js'

const USAGE = 'usage: npm run key -- --kind standard|management --org <organization id> --name <label> [--fixtures-dir <dir>]'

async function main () {
  const { values } = parseArgs({
    options: {
      kind: { type: 'string' },
      org: { type: 'string' },
      name: { type: 'string' },
      'fixtures-dir': { type: 'string' }
    }
  })
  const kind = KEY_KINDS.find((k) => k === values.kind)
  if (kind === undefined || !values.org || !values.name) throw new Error(USAGE)

  const dir = values['fixtures-dir'] ?? loadConfig().FIXTURES_DIR
  const data = await loadFixtures(dir)
  if (data.keys.some((key) => key.name === values.name)) throw new Error(`a key named ${JSON.stringify(values.name)} exists already in ${join(dir, FIXTURE_FILES.keys)}`)
  if (kind === 'management' && !data.organizations.some((organization) => organization.id === values.org)) {
    process.stderr.write(`warning: no organization ${values.org} in ${FIXTURE_FILES.organizations}; this key will get 404 on the member listing\n`)
  }

  // 32 random bytes: 256 bits, far beyond guessing; the prefix tells people what the string is.
  const key = `sk-or-v1-${randomBytes(32).toString('hex')}`
  const record: ApiKey = { name: values.name, sha256: hash('sha256', key), kind, organization_id: values.org }
  const file = join(dir, FIXTURE_FILES.keys)
  // Write then rename, so a server starting at the same moment never reads half a file.
  await writeFile(`${file}.tmp`, JSON.stringify([...data.keys, record], null, 2) + '\n')
  await rename(`${file}.tmp`, file)

  process.stderr.write(`recorded ${kind} key ${JSON.stringify(values.name)} for ${values.org} in ${file}; restart the server to use it.\nThe key (shown once, not stored):\n`)
  process.stdout.write(`${key}\n`)
}

main().catch((error: Error) => {
  process.stderr.write(`${error.message}\n`)
  process.exit(1)
})
