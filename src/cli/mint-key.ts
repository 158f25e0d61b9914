// Mints an API key (prints it once, records only its SHA-256) or revokes one, in the data the
// servers read: the database when DATABASE_URL is set, else keys.json of the data folder.
// Running servers follow the change; no restart.
import { hash, randomBytes } from 'node:crypto'
import { access } from 'node:fs/promises'
import { join } from 'node:path'
import { loadConfig } from '../config.js'
import { validateRecords } from '../repositories/records.js'
import { FIXTURE_FILES } from '../repositories/sources/files.js'
import { readJsonFile, writeJsonFile } from '../repositories/json-file.js'
import { connectPostgres, locationOf } from '../repositories/sources/postgres.js'
import { deleteKey, insertKey, organizationExists } from '../repositories/sources/postgres-write.js'
import { KEY_KINDS, type ApiKey } from '../schemas/fixtures.js'
import { readCommandLine, refuseCommandLine } from './command-line.js'

const USAGE = 'usage: npm run key -- --kind standard|management --org <organization id> --name <label> [--fixtures-dir <dir>]' +
  ' | npm run key -- revoke --name <label> [--fixtures-dir <dir>]'

const HELP = `Mints an API key, or revokes one, where the servers read keys: the keys table when DATABASE_URL is
set, else keys.json of a data folder. Running servers follow the change without a restart.

usage: npm run key -- --kind standard|management --org <organization id> --name <label> [--fixtures-dir <dir>]
       npm run key -- revoke --name <label> [--fixtures-dir <dir>]

  --kind standard|management  a standard key lists providers and endpoints; a management key also
                              lists the members of its organization
  --org <organization id>     the organization the key belongs to
  --name <label>              the key's name, unique: what revoke takes
  --fixtures-dir <dir>        keys.json of this folder, even when DATABASE_URL is set (default:
                              DATABASE_URL, else FIXTURES_DIR; never the bundled fixtures/)
  -h, --help                  prints this help

The key is printed once, on stdout; only its SHA-256 is recorded. Capture it without npm's banner:
  KEY=$(npm run -s key -- --kind standard --org <organization id> --name <label> --fixtures-dir <dir>)
`

/** Where keys are kept: the keys table, or keys.json of a folder. */
interface KeyStore {
  where: string
  add(key: ApiKey): Promise<void>
  /** False when there is no key of that name. */
  remove(name: string): Promise<boolean>
  /** False when the store knows of no organization of that id. */
  hasOrganization(id: string): Promise<boolean>
  close(): Promise<void>
}

async function openStore (fixturesDir: string | undefined): Promise<KeyStore> {
  const config = loadConfig()
  // An explicit folder wins; then the source the server would use.
  if (fixturesDir === undefined && config.DATABASE_URL) {
    const client = await connectPostgres(config.DATABASE_URL, config.DATABASE_CONNECT_TIMEOUT_MS, {
      onRetry: (line) => { process.stderr.write(`${line}\n`) }
    })
    return {
      where: `table keys of ${locationOf(config.DATABASE_URL)}`,
      add: (key) => insertKey(client, key),
      remove: (name) => deleteKey(client, name),
      hasOrganization: (id) => organizationExists(client, id),
      close: () => client.end()
    }
  }
  // The bundled fixtures are tracked by git: keys minted there would end up in a commit.
  const dir = fixturesDir ?? (process.env.FIXTURES_DIR ? config.FIXTURES_DIR : undefined)
  if (dir === undefined) {
    throw new Error('no data to write into: pass --fixtures-dir <dir>, or set FIXTURES_DIR or DATABASE_URL (the bundled fixtures/ folder is left alone)')
  }
  const file = join(dir, FIXTURE_FILES.keys)
  const write = (keys: ApiKey[]) => writeJsonFile(file, keys)
  return {
    where: file,
    async add (key) {
      const keys = await readKeys(file, true)
      if (keys.some((existing) => existing.name === key.name)) throw new Error(`a key named ${JSON.stringify(key.name)} exists already in ${file}`)
      await write([...keys, key])
    },
    async remove (name) {
      const keys = await readKeys(file, false)
      const kept = keys.filter((key) => key.name !== name)
      if (kept.length === keys.length) return false
      await write(kept)
      return true
    },
    async hasOrganization (id) {
      const organizations = await readJsonFile(join(dir, FIXTURE_FILES.organizations), FIXTURE_FILES.organizations).catch(() => [])
      return Array.isArray(organizations) && organizations.some((organization) => organization?.id === id)
    },
    close: async () => {}
  }
}

/** The keys of keys.json, checked; none when it does not exist yet and `mayBeMissing`. */
async function readKeys (file: string, mayBeMissing: boolean): Promise<ApiKey[]> {
  if (mayBeMissing && await access(file).then(() => false, (error: NodeJS.ErrnoException) => error.code === 'ENOENT')) return []
  return validateRecords('keys', await readJsonFile(file, FIXTURE_FILES.keys), FIXTURE_FILES.keys)
}

async function main () {
  const { positionals, values } = readCommandLine('key', {
    kind: { type: 'string' },
    org: { type: 'string' },
    name: { type: 'string' },
    'fixtures-dir': { type: 'string' }
  }, true)
  if (values.help) {
    process.stdout.write(HELP)
    return
  }
  const revoking = positionals[0] === 'revoke'
  const kind = KEY_KINDS.find((k) => k === values.kind)
  const valid = revoking
    ? positionals.length === 1 && values.name && values.kind === undefined && values.org === undefined
    : positionals.length === 0 && kind !== undefined && values.org && values.name
  if (!valid) refuseCommandLine('key', USAGE)
  const name = values.name!

  const store = await openStore(values['fixtures-dir'])
  try {
    if (revoking) {
      if (!await store.remove(name)) throw new Error(`no key named ${JSON.stringify(name)} in ${store.where}`)
      process.stderr.write(`revoked key ${JSON.stringify(name)} in ${store.where}; running servers refuse it from their next reload, without a restart\n`)
      return
    }
    // 32 random bytes: 256 bits, far beyond guessing; the prefix tells people what the string is.
    const key = `sk-or-v1-${randomBytes(32).toString('hex')}`
    await store.add({ name, sha256: hash('sha256', key), kind: kind!, organization_id: values.org! })
    if (kind === 'management' && !await store.hasOrganization(values.org!)) {
      process.stderr.write(`warning: no organization ${values.org} in the directory; this key will get 404 on the member listing\n`)
    }
    process.stderr.write(`recorded ${kind} key ${JSON.stringify(name)} for ${values.org} in ${store.where}; running servers accept it from their next reload, without a restart.\nThe key (shown once, not stored):\n`)
    process.stdout.write(`${key}\n`)
  } finally {
    await store.close()
  }
}

main().catch((error: Error) => {
  process.stderr.write(`${error.message.split('\n')[0]}\n`)
  process.exit(1)
})
