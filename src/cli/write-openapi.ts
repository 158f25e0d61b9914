// Writes docs/openapi.json: the document the server serves at /v1/openapi.json, byte for byte,
// committed so that a change of the contract shows in review.
import { mkdir, writeFile } from 'node:fs/promises'
import { dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { buildApp } from '../app.js'
import { fixedSnapshots } from '../repositories/lifecycle.js'
import { RECORD_KINDS } from '../registry.js'
import { readCommandLine } from './command-line.js'

const OPENAPI_FILE = fileURLToPath(new URL('../../docs/openapi.json', import.meta.url))

const HELP = `Writes docs/openapi.json: the document the server serves at /v1/openapi.json, byte for byte.
It is committed, so that a change of the contract shows in review; a test fails until it is rewritten.

usage: npm run openapi

  -h, --help  prints this help
`

async function main () {
  if (readCommandLine('openapi', {}).values.help) {
    process.stdout.write(HELP)
    return
  }
  // The document depends on the routes, not on the data: an empty directory will do.
  const app = buildApp({ snapshots: await fixedSnapshots(Object.fromEntries(RECORD_KINDS.map((kind) => [kind, []])) as never) })
  const res = await app.inject({ url: '/v1/openapi.json' })
  await app.close()
  if (res.statusCode !== 200) throw new Error(`GET /v1/openapi.json answered ${res.statusCode}: ${res.body}`)
  await mkdir(dirname(OPENAPI_FILE), { recursive: true })
  await writeFile(OPENAPI_FILE, res.body)
  process.stderr.write(`wrote ${OPENAPI_FILE}\n`)
}

main().catch((error: Error) => {
  process.stderr.write(`${error.message}\n`)
  process.exit(1)
})
