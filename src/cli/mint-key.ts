// Mints an API key (prints it once, records only its SHA-256) or revokes one, in the data the
// servers read: the database when DATABASE_URL is set, else keys.json of the data folder.
// Running servers follow the change; no restart.
import { hash, randomBytes } from 'node:crypto'
import { access, open, readFile, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { isGiven, loadConfig } from '../config.js'
import { recordProblem, validateRecords } from '../repositories/records.js'
import { FIXTURE_FILES } from '../repositories/sources/files.js'
import { readJsonFile, writeJsonFile } from '../repositories/json-file.js'
import { connectPostgres, locationOf } from '../repositories/sources/postgres.js'
import { deleteKey, insertKey, listKeys, organizationExists, rotateKey } from '../repositories/sources/postgres-write.js'
import { instantText, timestampMs, timestampText } from '../schemas/formats.js'
import { formatDuration, parseDuration } from './duration.js'
import { KEY_KINDS, type ApiKey } from '../schemas/fixtures.js'
import { DATA_DIR_OPTIONS, dataDirOf, readCommandLine, refuseCommandLine, refuseUnknownCommand } from './command-line.js'

const USAGE = 'usage: npm run key -- --kind standard|management --org <organization id> --name <label> [--expires-in <duration> | --expires-at <time>] [--data-dir <dir>]' +
  ' | npm run key -- rotate --name <label> [--grace <duration>] [--new-name <label>] [--data-dir <dir>]' +
  ' | npm run key -- revoke --name <label> [--data-dir <dir>] | npm run key -- list [--data-dir <dir>]'

const HELP = `Mints an API key, rotates, revokes or lists them, where the servers read keys: the keys table when
DATABASE_URL is set, else keys.json of a data folder. Running servers follow the change without a restart.

usage: npm run key -- --kind standard|management --org <organization id> --name <label> [--expires-in <duration> | --expires-at <time>] [--data-dir <dir>]
       npm run key -- rotate --name <label> [--grace <duration>] [--new-name <label>] [--data-dir <dir>]
       npm run key -- revoke --name <label> [--data-dir <dir>]
       npm run key -- list [--data-dir <dir>]

  --kind standard|management  a standard key calls every operation but the member listing; a management
                              key calls that one too, for the members of its own organization
  --org <organization id>     the organization the key belongs to; one the directory does not have is refused
  --name <label>              the key's name, unique: what rotate and revoke take
  --expires-in <duration>     the key answers 401 after this long: 30s, 15m, 12h, 90d
  --expires-at <time>         ... or from this instant, RFC 3339 with a time zone (2026-12-31T23:59:59Z);
                              an instant already past is refused
  --grace <duration>          rotate: how long the old key keeps working (default 1h; 0 ends it at once;
                              a key expiring sooner keeps its expiry, and one expired already stays so)
  --new-name <label>          rotate: the successor's name (default: the old name and the time)
  --data-dir <dir>            keys.json of this folder, even when DATABASE_URL is set (default:
                              DATABASE_URL, else DATA_DIR; never the bundled fixtures/)
  -h, --help                  prints this help

A key minted or rotated is printed once, on stdout; only its SHA-256 is recorded. Capture it without npm's banner:
  KEY=$(npm run -s key -- --kind standard --org <organization id> --name <label> --data-dir <dir>)
Expiries are printed in UTC, to the second (2026-12-31T23:59:59Z), and compared with each server's
clock: run NTP.
`

/** A key as list shows it: never its hash. */
type Listed = Omit<ApiKey, 'sha256'>

/** Where keys are kept: the keys table, or keys.json of a folder. */
interface KeyStore {
  where: string
  /** Now, in ms since the epoch, on the clock the servers judge expiries by: PostgreSQL's, or this machine's for files. */
  now(): Promise<number>
  add(key: ApiKey): Promise<void>
  /** False when there is no key of that name. */
  remove(name: string): Promise<boolean>
  /** Where the organizations are, for a message. */
  organizations: string
  /** False when the store knows of no organization of that id. */
  hasOrganization(id: string): Promise<boolean>
  /**
   * Mints `successor` beside the key named `name` and ends that one after the grace, at once; undefined
   * when there is none. `expired`: the old key had expired already, and keeps its expiry.
   */
  rotate(name: string, successor: Pick<ApiKey, 'name' | 'sha256' | 'expires_at'>, graceMs: number): Promise<{ kind: ApiKey['kind'], organization_id: string, expires_at: string, expired: boolean } | undefined>
  list(): Promise<Listed[]>
  close(): Promise<void>
}

async function openStore (dataDir: string | undefined): Promise<KeyStore> {
  const config = loadConfig()
  // An explicit folder wins; then the source the server would use.
  if (dataDir === undefined && config.DATABASE_URL) {
    const client = await connectPostgres(config.DATABASE_URL, config.DATABASE_CONNECT_TIMEOUT_MS, {
      onRetry: (line) => { process.stderr.write(`${line}\n`) }
    })
    return {
      where: `table keys of ${locationOf(config.DATABASE_URL)}`,
      organizations: `table organizations of ${locationOf(config.DATABASE_URL)}`,
      now: async () => Number((await client.query<{ now: string }>('SELECT extract(epoch FROM now()) * 1000 AS now')).rows[0]!.now),
      add: (key) => insertKey(client, key),
      remove: (name) => deleteKey(client, name),
      hasOrganization: (id) => organizationExists(client, id),
      rotate: (name, successor, graceMs) => rotateKey(client, name, successor, graceMs),
      list: () => listKeys(client),
      close: () => client.end()
    }
  }
  // The bundled fixtures are tracked by git: keys minted there would end up in a commit.
  const dir = dataDir ?? (isGiven('DATA_DIR') ? config.DATA_DIR : undefined)
  if (dir === undefined) {
    throw new Error('no data to write into: pass --data-dir <dir>, or set DATA_DIR or DATABASE_URL (the bundled fixtures/ folder is left alone)')
  }
  const file = join(dir, FIXTURE_FILES.keys)
  const write = (keys: ApiKey[]) => writeJsonFile(file, keys)
  // Each change reads the file, changes it and writes it whole, holding the folder's lock: two commands
  // at once would each write their own, and one's key would be lost while it says it was recorded.
  return {
    where: file,
    organizations: join(dir, FIXTURE_FILES.organizations),
    now: async () => Date.now(),
    add: (key) => withLock(file, async () => {
      const keys = await readKeys(file, true)
      if (keys.some((existing) => existing.name === key.name)) throw new Error(`a key named ${JSON.stringify(key.name)} exists already in ${file}`)
      await write([...keys, key])
    }),
    remove: (name) => withLock(file, async () => {
      const keys = await readKeys(file, false)
      const kept = keys.filter((key) => key.name !== name)
      if (kept.length === keys.length) return false
      await write(kept)
      return true
    }),
    rotate: (name, successor, graceMs) => withLock(file, async () => {
      const keys = await readKeys(file, false)
      const old = keys.find((key) => key.name === name)
      if (old === undefined) return undefined
      if (keys.some((key) => key.name === successor.name)) throw new Error(`a key named ${JSON.stringify(successor.name)} exists already in ${file}`)
      const now = Date.now()
      const until = old.expires_at == null ? Infinity : timestampMs(old.expires_at)
      // To the second, as printed: the old key works until the instant the message names.
      const end = Math.min(until, wholeSecond(now + graceMs))
      const ended = { ...old, expires_at: end === until ? old.expires_at! : timestampText(end) }
      // One atomic write: both keys, or neither.
      await write([...keys.map((key) => key === old ? ended : key), { ...successor, kind: old.kind, organization_id: old.organization_id }])
      return { kind: old.kind, organization_id: old.organization_id, expires_at: ended.expires_at, expired: until <= now }
    }),
    async list () {
      return (await readKeys(file, false)).map(({ sha256: _hash, ...key }) => key).sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0)
    },
    async hasOrganization (id) {
      const organizations = await readJsonFile(join(dir, FIXTURE_FILES.organizations), FIXTURE_FILES.organizations).catch(() => [])
      return Array.isArray(organizations) && organizations.some((organization) => organization?.id === id)
    },
    close: async () => {}
  }
}

/** Whether a process of that id runs (one of another user's counts). */
function running (pid: number) {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/**
 * Runs `write` holding `<file>.lock`, made with O_EXCL and holding this process's id: key commands on
 * one folder run one at a time, and one that finds another under way is refused in one line. A lock
 * left by a command that died (its process gone) is taken over.
 */
async function withLock<T> (file: string, write: () => Promise<T>): Promise<T> {
  const lock = `${file}.lock`
  for (let attempt = 0; ; attempt++) {
    try {
      const handle = await open(lock, 'wx')
      await handle.writeFile(String(process.pid))
      await handle.close()
      break
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 0) throw error
      const pid = Number(await readFile(lock, 'utf8').catch(() => ''))
      if (pid > 0 && running(pid)) throw new Error(`another key command (process ${pid}) is writing ${file}; nothing was written: try again once it ends`)
      await rm(lock, { force: true })
    }
  }
  try {
    return await write()
  } finally {
    await rm(lock, { force: true })
  }
}

/** The keys of keys.json, checked; none when it does not exist yet and `mayBeMissing`. */
async function readKeys (file: string, mayBeMissing: boolean): Promise<ApiKey[]> {
  if (mayBeMissing && await access(file).then(() => false, (error: NodeJS.ErrnoException) => error.code === 'ENOENT')) return []
  return validateRecords('keys', await readJsonFile(file, FIXTURE_FILES.keys), FIXTURE_FILES.keys)
}

/** An instant cut to the second, as the commands print it, so that what is written is what is printed. */
const wholeSecond = (ms: number) => Math.floor(ms / 1000) * 1000

/** A new key: 32 random bytes (256 bits, far beyond guessing), prefixed so that people know what the string is. */
const newSecret = () => `sk-or-v1-${randomBytes(32).toString('hex')}`

/** Whether now plus `ms` is an instant a key's expiry can hold (RFC 3339 has four digits for the year). */
const withinYears = (ms: number) => Date.now() + ms < Date.UTC(10000, 0, 1)

/**
 * The expiry the options ask for, undefined for none: an RFC 3339 instant (UTC), or a duration from now
 * on the store's clock; refuses the command line when it is not one.
 */
function expiryOf (values: { 'expires-in'?: string | undefined, 'expires-at'?: string | undefined }): string | { inMs: number } | undefined {
  const { 'expires-in': expiresIn, 'expires-at': expiresAt } = values
  if (expiresIn !== undefined && expiresAt !== undefined) refuseCommandLine('key', 'give --expires-in or --expires-at, not both')
  if (expiresIn !== undefined) {
    const ms = parseDuration(expiresIn)
    if (ms === undefined || !withinYears(ms)) refuseCommandLine('key', `--expires-in ${JSON.stringify(expiresIn)} is not a duration such as 30s, 15m, 12h or 90d, ending before the year 10000`)
    return { inMs: ms }
  }
  if (expiresAt !== undefined && Number.isNaN(timestampMs(expiresAt))) {
    refuseCommandLine('key', `--expires-at ${JSON.stringify(expiresAt)} is not an RFC 3339 timestamp with a time zone (2026-12-31T23:59:59Z)`)
  }
  return expiresAt
}

/** `name  kind  organization  expiry` lines, aligned, the expired marked. */
function formatList (keys: Listed[], now: number): string {
  const rows = [['NAME', 'KIND', 'ORGANIZATION', 'EXPIRES'], ...keys.map((key) => [key.name, key.kind, key.organization_id,
    key.expires_at == null ? 'never' : `${instantText(timestampMs(key.expires_at))}${timestampMs(key.expires_at) <= now ? ' (expired)' : ''}`])]
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)))
  return rows.map((row) => row.map((cell, column) => column === row.length - 1 ? cell : cell.padEnd(widths[column]!)).join('  ')).join('\n') + '\n'
}

async function main () {
  const { positionals, values } = readCommandLine('key', {
    kind: { type: 'string' },
    org: { type: 'string' },
    name: { type: 'string' },
    'expires-in': { type: 'string' },
    'expires-at': { type: 'string' },
    grace: { type: 'string' },
    'new-name': { type: 'string' },
    ...DATA_DIR_OPTIONS
  }, true)
  if (values.help) {
    process.stdout.write(HELP)
    return
  }
  // Minting takes no command word, so `mint` is as unknown as any other.
  if (positionals[0] !== undefined && !['rotate', 'revoke', 'list'].includes(positionals[0])) {
    refuseUnknownCommand('key', positionals[0], 'rotate, revoke or list; a key is minted without one')
  }
  const command = positionals[0] ?? 'mint'
  const kind = KEY_KINDS.find((k) => k === values.kind)
  const given = (...names: Array<keyof typeof values>) => names.filter((option) => values[option] !== undefined && option !== 'data-dir' && option !== 'fixtures-dir')
  const only = (...names: Array<keyof typeof values>) => given('kind', 'org', 'name', 'expires-in', 'expires-at', 'grace', 'new-name').every((option) => names.includes(option))
  const valid = positionals.length <= 1 && (
    command === 'mint' ? positionals.length === 0 && kind !== undefined && values.org && values.name && only('kind', 'org', 'name', 'expires-in', 'expires-at')
      : command === 'revoke' ? values.name && only('name')
        : command === 'rotate' ? values.name && only('name', 'grace', 'new-name', 'expires-in', 'expires-at')
          : command === 'list' && only())
  if (!valid) refuseCommandLine('key', USAGE)
  const expiry = expiryOf(values)
  const graceMs = values.grace === undefined ? 60 * 60 * 1000 : parseDuration(values.grace)
  if (graceMs === undefined || !withinYears(graceMs)) refuseCommandLine('key', `--grace ${JSON.stringify(values.grace)} is not a duration such as 0, 30s, 15m, 12h or 90d, ending before the year 10000`)
  const name = values.name!

  const store = await openStore(dataDirOf('key', values))
  try {
    if (command === 'list') {
      process.stdout.write(formatList(await store.list(), await store.now()))
      return
    }
    if (command === 'revoke') {
      if (!await store.remove(name)) throw new Error(`no key named ${JSON.stringify(name)} in ${store.where}`)
      process.stderr.write(`revoked key ${JSON.stringify(name)} in ${store.where}; running servers refuse it from their next reload, without a restart\n`)
      return
    }
    // A duration counts from the database's now() when the keys are there: the replicas judge expiries on it.
    const now = await store.now()
    const expiresAt = typeof expiry === 'object' ? timestampText(wholeSecond(now + expiry.inMs)) : expiry
    // A key born expired answers 401 from the start: a typo in the year, most likely.
    if (expiresAt !== undefined && timestampMs(expiresAt) <= now) {
      const option = typeof expiry === 'object' ? `--expires-in ${JSON.stringify(values['expires-in'])}` : `--expires-at ${JSON.stringify(expiresAt)}`
      throw new Error(`${option} is not in the future: it is ${instantText(now)} now; nothing was written`)
    }
    const key = newSecret()
    const expiring = expiresAt === undefined ? {} : { expires_at: expiresAt }
    // The old name and the time, to the second: readable, and a rotation a second is plenty.
    const successor = command === 'rotate' ? values['new-name'] ?? `${name}-${new Date().toISOString().replace(/[-:]/g, '').slice(0, 15)}` : name
    // Checked as the servers check it before anything is written: a record they refuse would refuse the whole file.
    const problem = recordProblem('keys', { name: successor, sha256: hash('sha256', key), kind: kind ?? 'standard', organization_id: values.org ?? 'organization', ...expiring }, 0)
    if (problem !== undefined) throw new Error(`the key would not be valid, nothing was written: ${problem.replace(/^\[0\]\./, '')}`)
    if (command === 'rotate') {
      const old = await store.rotate(name, { name: successor, sha256: hash('sha256', key), ...expiring }, graceMs)
      if (old === undefined) throw new Error(`no key named ${JSON.stringify(name)} in ${store.where}`)
      const until = instantText(timestampMs(old.expires_at))
      // An expired key is rotated all the same (its successor is what its holder needs), but the grace cannot bring it back.
      const ending = old.expired ? `it expired already at ${until}, so the grace (${formatDuration(graceMs)}) cannot extend it` : `it works until ${until} (grace ${formatDuration(graceMs)})`
      process.stderr.write(`rotated key ${JSON.stringify(name)} in ${store.where}: ${ending}; ` +
        `its successor ${JSON.stringify(successor)} (${old.kind}, ${old.organization_id}) works now, without a restart.\nThe successor (shown once, not stored):\n`)
      process.stdout.write(`${key}\n`)
      return
    }
    // A mistyped --org would mint a key that works everywhere but on its own organization's members.
    // The server still accepts a key whose organization went away later (its member listing answers 404).
    if (!await store.hasOrganization(values.org!)) throw new Error(`no organization ${JSON.stringify(values.org)} in ${store.organizations}; nothing was written`)
    await store.add({ name, sha256: hash('sha256', key), kind: kind!, organization_id: values.org!, ...expiring })
    process.stderr.write(`recorded ${kind} key ${JSON.stringify(name)} for ${values.org}${expiresAt === undefined ? '' : `, expiring at ${instantText(timestampMs(expiresAt))}`} in ${store.where}; running servers accept it from their next reload, without a restart.\nThe key (shown once, not stored):\n`)
    process.stdout.write(`${key}\n`)
  } finally {
    await store.close()
  }
}

main().catch((error: Error) => {
  process.stderr.write(`${error.message.split('\n')[0]}\n`)
  process.exit(1)
})
