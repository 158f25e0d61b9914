// Mints an API key (prints it once, records only its SHA-256), rotates, expires, disables, enables,
// limits, revokes, prunes or lists them, and shows their history, in the data the servers read: the
// database when DATABASE_URL is set, else keys.json of the data folder. Running servers follow the
// change; no restart.
import { hash, randomBytes } from 'node:crypto'
import { access, appendFile, link, readFile, rename, rm, writeFile } from 'node:fs/promises'
import { userInfo } from 'node:os'
import { join } from 'node:path'
import { isGiven, loadConfig } from '../config.js'
import { recordProblem, validateRecords } from '../repositories/records.js'
import { DATA_FILES } from '../repositories/sources/files.js'
import { readJsonFile, writeJsonFile } from '../repositories/json-file.js'
import { connectPostgres, locationOf } from '../repositories/sources/postgres.js'
import { databaseNow, deleteKey, insertKey, keyHistory, listKeys, organizationExists, pruneKeys, updateKey, type HistoryEntry } from '../repositories/sources/postgres-write.js'
import { instantText, timestampMs, timestampText } from '../schemas/formats.js'
import { formatDuration, parseDuration } from './duration.js'
import { KEY_KINDS, RATE_LIMIT_MAX, type ApiKey } from '../schemas/keys-and-organizations.js'
import { DATA_DIR_OPTIONS, dataDirOf, readCommandLine, refuseCommandLine, refuseUnknownCommand } from './command-line.js'

const SYNOPSIS = `npm run key -- --kind standard|management --org <organization id> --name <name> [--expires-in <duration> | --expires-at <time>] [--rate-limit <n>]
       npm run key -- rotate --name <name> [--grace <duration>] [--expires-in <duration> | --expires-at <time>]
       npm run key -- expire --name <name> (--in <duration> | --at <time> | --never)
       npm run key -- disable --name <name>
       npm run key -- enable --name <name>
       npm run key -- limit --name <name> --per-minute <n>|default
       npm run key -- revoke --name <name>
       npm run key -- prune [--expired-before <time>]
       npm run key -- history [--name <name>]
       npm run key -- list`

const USAGE = 'usage: npm run key -- --kind standard|management --org <organization id> --name <name> [...] | rotate | expire | disable | enable | limit | revoke | prune | history | list (each takes [--data-dir <dir>])'

const HELP = `Mints an API key, and rotates, expires, disables, enables, limits, revokes, prunes, lists keys or shows
their history, where the servers read keys: the keys table when DATABASE_URL is set, else keys.json of a
data folder. Running servers follow each change within a second, without a restart.

usage: ${SYNOPSIS}
       (each takes [--data-dir <dir>])

  (no command)                mints a key of that kind, organization and name; prints it once
  rotate                      gives the key a new secret, printed once; the key keeps its name, kind,
                              organization, limit, state and expiry (a key expired already needs a new
                              one); the secret before keeps working until the grace ends
  expire                      sets, changes or (--never) removes the key's expiry
  disable, enable             the key answers 401 (This API key is disabled) until enabled again
  limit                       the key's own rate limit, in place of RATE_LIMIT_PER_MINUTE; default: that setting again
  revoke                      deletes the key: it answers 401 at once
  prune                       deletes the keys, and the previous secrets, whose end has passed
  history                     every change of the keys (of one), oldest first: when, what, and who
  list                        every key: kind, organization, expiry, status, limit, previous secret's end

  --kind standard|management  a standard key calls every operation but the member listing; a management
                              key calls that one too, for the members of its own organization
  --org <organization id>     the organization the key belongs to; one the directory does not have is refused
  --name <name>               the key's name, unique, the same through rotations: what the commands take
  --expires-in <duration>     the key answers 401 after this long: 30s, 15m, 12h, 90d
  --expires-at <time>         ... or from this instant, RFC 3339 with a time zone (2026-12-31T23:59:59Z);
                              an instant already past is refused
  --rate-limit <n>            requests a minute the key may make (1 to ${RATE_LIMIT_MAX}), in place of RATE_LIMIT_PER_MINUTE
  --grace <duration>          rotate: how long the secret before keeps working (default 1h; 0 ends it at
                              once; never past the key's own expiry)
  --in <duration>, --at <time>  expire: when the key expires, from now or at an instant
  --never                     expire: the key no longer expires
  --per-minute <n>|default    limit: the key's own limit, or default to follow RATE_LIMIT_PER_MINUTE again
  --expired-before <time>     prune: what ended before this instant, not a future one (default: now)
  --data-dir <dir>            keys.json of this folder, even when DATABASE_URL is set (default:
                              DATABASE_URL, else DATA_DIR; never the bundled fixtures/)
  -h, --help                  prints this help

A key minted or rotated is printed once, on stdout, and nothing else is; only its SHA-256 is recorded.
Capture it without npm's banner:
  KEY=$(npm run -s key -- --kind standard --org <organization id> --name <name> --data-dir <dir>)
  KEY=$(npm run -s key -- rotate --name <name> --grace 1h)
Instants are printed in UTC, to the second (2026-12-31T23:59:59Z), and compared with each server's
clock: run NTP. The history of a folder's keys is key-history.jsonl beside keys.json; in PostgreSQL,
table key_history, written by the database itself. Entries older than KEY_HISTORY_RETENTION_DAYS are
removed: by npm run db -- trim in PostgreSQL, by the next key command in a folder.
`

/** A key as list shows it: never a hash, of its secret or of the one before. */
type Listed = Omit<ApiKey, 'sha256' | 'previous'> & { previous?: { expires_at: string } | null }

/** Where keys are kept: the keys table, or keys.json of a folder. */
interface KeyStore {
  where: string
  /** Now, in ms since the epoch, on the clock the servers judge expiries by: PostgreSQL's, or this machine's for files. */
  now(): Promise<number>
  add(key: ApiKey): Promise<void>
  /**
   * Changes the key of that name as `change` says, given it and now (the store's clock), at once;
   * undefined when there is none.
   */
  update(name: string, change: (key: ApiKey, now: number) => ApiKey): Promise<{ before: ApiKey, after: ApiKey } | undefined>
  /** False when there is no key of that name. */
  remove(name: string): Promise<boolean>
  /** Removes the keys whose expiry is before `before`, and the previous secrets whose end is. */
  prune(before: number): Promise<{ keys: number, secrets: number }>
  /** The last `limit` entries of the history (of one key), oldest first, and how many there are. */
  history(name: string | undefined, limit: number): Promise<{ entries: HistoryEntry[], total: number }>
  /** Where the organizations are, for a message. */
  organizations: string
  /** False when the store knows of no organization of that id. */
  hasOrganization(id: string): Promise<boolean>
  list(): Promise<Listed[]>
  close(): Promise<void>
}

/** Who runs the command, as a folder's history names them. */
const osUser = () => {
  try {
    return userInfo().username
  } catch {
    return process.env.USER ?? 'unknown'
  }
}

async function openStore (dataDir: string | undefined): Promise<KeyStore> {
  const config = loadConfig()
  const retentionMs = config.KEY_HISTORY_RETENTION_DAYS * 86_400_000
  // An explicit folder wins; then the source the server would use.
  if (dataDir === undefined && config.DATABASE_URL) {
    const client = await connectPostgres(config.DATABASE_URL, config.DATABASE_CONNECT_TIMEOUT_MS, {
      onRetry: (line) => { process.stderr.write(`${line}\n`) }
    })
    // The history names the role; the client says which command, run by whom on which machine's account.
    await client.query("SELECT set_config('application_name', $1, false)", [`npm run key, by ${osUser()}`.slice(0, 63)])
    return {
      where: `table keys of ${locationOf(config.DATABASE_URL)}`,
      organizations: `table organizations of ${locationOf(config.DATABASE_URL)}`,
      now: () => databaseNow(client),
      add: (key) => insertKey(client, key),
      update: (name, change) => updateKey(client, name, change),
      remove: (name) => deleteKey(client, name),
      prune: (before) => pruneKeys(client, before),
      history: (name, limit) => keyHistory(client, name, limit),
      hasOrganization: (id) => organizationExists(client, id),
      list: async () => (await listKeys(client)).map(listed),
      close: () => client.end()
    }
  }
  // The bundled fixtures are tracked by git: keys minted there would end up in a commit.
  const dir = dataDir ?? (isGiven('DATA_DIR') ? config.DATA_DIR : undefined)
  if (dir === undefined) {
    throw new Error('no data to write into: pass --data-dir <dir>, or set DATA_DIR or DATABASE_URL (the bundled fixtures/ folder is left alone)')
  }
  const file = join(dir, DATA_FILES.keys)
  const history = join(dir, HISTORY_FILE)
  // Each change reads the file, changes it and writes it whole, holding the folder's lock: two commands
  // at once would each write their own, and one's key would be lost while it says it was recorded.
  // Then its history, under the same lock.
  const write = async (keys: ApiKey[], entries: HistoryEntry[]) => {
    await writeJsonFile(file, keys)
    // The change is made: a history that cannot be written (its disk full, a file of another user) must
    // not make the command fail now, when a key it minted or rotated would be printed nowhere.
    await appendHistory(history, entries, retentionMs).catch((error: Error) => {
      process.stderr.write(`warning: the change is made, but its history could not be written to ${history}: ${error.message.split('\n')[0]}\n`)
    })
  }
  const entry = (name: string, action: string, changes: HistoryEntry['changes'] = null): HistoryEntry => ({ at: instantText(Date.now()), name, action, changes, by: osUser() })
  /** `change` given the keys of the file, under the folder's lock. */
  const locked = <T>(change: (keys: ApiKey[]) => Promise<T>, mayBeMissing = false) => withLock(file, async () => await change(await readKeys(file, mayBeMissing)))
  return {
    where: file,
    organizations: join(dir, DATA_FILES.organizations),
    now: async () => Date.now(),
    add: (key) => locked(async (keys) => {
      if (keys.some((existing) => existing.name === key.name)) throw new Error(`a key named ${JSON.stringify(key.name)} exists already in ${file}`)
      await write([...keys, key], [entry(key.name, 'minted', fieldsOf(key))])
    }, true),
    update: (name, change) => locked(async (keys) => {
      const before = keys.find((key) => key.name === name)
      if (before === undefined) return undefined
      const after = change(before, Date.now())
      // A change to what the key holds already (a second disable) writes nothing, as in PostgreSQL.
      if (Object.keys(changesOf(before, after)).length > 0) {
        await write(keys.map((key) => key === before ? after : key), [entry(name, actionOf(before, after), changesOf(before, after))])
      }
      return { before, after }
    }),
    remove: (name) => locked(async (keys) => {
      const kept = keys.filter((key) => key.name !== name)
      if (kept.length === keys.length) return false
      await write(kept, [entry(name, 'revoked')])
      return true
    }),
    prune: (before) => locked(async (keys) => {
      const entries: HistoryEntry[] = []
      const kept: ApiKey[] = []
      let secrets = 0
      for (const key of keys) {
        if (key.expires_at != null && timestampMs(key.expires_at) < before) {
          entries.push(entry(key.name, 'pruned'))
        } else if (key.previous != null && timestampMs(key.previous.expires_at) < before) {
          const { previous: _ended, ...rest } = key
          entries.push(entry(key.name, 'pruned', changesOf(key, rest)))
          kept.push(rest)
          secrets++
        } else {
          kept.push(key)
        }
      }
      if (entries.length > 0) await write(kept, entries)
      return { keys: keys.length - kept.length, secrets }
    }),
    async history (name, limit) {
      const all = await readHistory(history)
      const entries = name === undefined ? all : all.filter((each) => each.name === name)
      return { entries: entries.slice(-limit), total: entries.length }
    },
    async list () {
      return (await readKeys(file, false)).map(listed).sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0)
    },
    async hasOrganization (id) {
      const organizations = await readJsonFile(join(dir, DATA_FILES.organizations), DATA_FILES.organizations).catch(() => [])
      return Array.isArray(organizations) && organizations.some((organization) => organization?.id === id)
    },
    close: async () => {}
  }
}

function listed ({ sha256: _hash, previous, ...key }: ApiKey): Listed {
  return previous == null ? key : { ...key, previous: { expires_at: previous.expires_at } }
}

/** The history of a folder's keys, a JSON object a line, beside keys.json. */
const HISTORY_FILE = 'key-history.jsonl'

/** The entries of a history file, oldest first; none when there is no file. A line that is not an entry is skipped. */
async function readHistory (file: string): Promise<HistoryEntry[]> {
  const text = await readFile(file, 'utf8').catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return ''
    throw error
  })
  return text.split('\n').flatMap((line) => {
    try {
      const value = JSON.parse(line) as HistoryEntry
      return typeof value === 'object' && value !== null && typeof value.at === 'string' ? [value] : []
    } catch {
      return []
    }
  })
}

/**
 * Appends the entries; when the oldest entry is past the retention, the file is written again
 * without the entries past it (once in a while: the file is otherwise only appended to).
 */
async function appendHistory (file: string, entries: readonly HistoryEntry[], retentionMs: number) {
  const lines = entries.map((each) => `${JSON.stringify(each)}\n`).join('')
  const existing = await readHistory(file)
  const cutoff = Date.now() - retentionMs
  if (existing.length > 0 && timestampMs(existing[0]!.at) < cutoff) {
    // Whole or not at all: a command that dies while writing leaves the history as it was.
    const next = `${file}.tmp`
    await writeFile(next, existing.filter((each) => timestampMs(each.at) >= cutoff).map((each) => `${JSON.stringify(each)}\n`).join('') + lines)
    await rename(next, file)
  } else {
    await appendFile(file, lines)
  }
}

/** A key's fields as its history shows them when it is minted: never a hash. */
function fieldsOf ({ name: _name, sha256: _hash, previous: _previous, ...fields }: ApiKey): Record<string, unknown> {
  return fields
}

/**
 * The fields that differ, each [before, after] (null where absent), a replaced secret as "replaced":
 * what table key_history records of an UPDATE (its trigger, key_history_changes).
 */
function changesOf (before: ApiKey, after: ApiKey): Record<string, unknown> {
  const flat = (key: ApiKey) => ({ ...fieldsOf(key), disabled: key.disabled === true, previous_expires_at: key.previous?.expires_at ?? null })
  const [old, now] = [flat(before), flat(after)] as Array<Record<string, unknown>>
  const changes: Record<string, unknown> = {}
  for (const field of new Set([...Object.keys(old!), ...Object.keys(now!)])) {
    if ((old![field] ?? null) !== (now![field] ?? null)) changes[field] = [old![field] ?? null, now![field] ?? null]
  }
  if (before.sha256 !== after.sha256) changes.sha256 = 'replaced'
  return changes
}

/** What a change of a key was, named as table key_history names it (key_history_record). */
function actionOf (before: ApiKey, after: ApiKey): string {
  if (before.sha256 !== after.sha256) return 'rotated'
  if ((before.disabled === true) !== (after.disabled === true)) return after.disabled === true ? 'disabled' : 'enabled'
  if ((before.expires_at ?? null) !== (after.expires_at ?? null)) return 'expiry set'
  if ((before.rate_limit_per_minute ?? null) !== (after.rate_limit_per_minute ?? null)) return 'limit set'
  return 'changed'
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
 * Runs `write` holding `<file>.lock`, which holds the process id of the command that holds it: key
 * commands on one folder run one at a time, and one that finds another under way is refused in one
 * line. The lock comes into being whole, a link to a file already holding the id: made empty, then
 * written, another command could read it empty in between, take it for a dead command's, and both
 * would write keys.json, one's key lost while it said it was recorded. A lock left by a command that
 * died (its process gone) is taken over by renaming it away, which one command alone can do; one that
 * finds it had taken a live command's lock gives it back and is refused.
 */
async function withLock<T> (file: string, write: () => Promise<T>): Promise<T> {
  const lock = `${file}.lock`
  const mine = `${lock}.${process.pid}`
  await writeFile(mine, String(process.pid))
  const refused = (pid: number) => new Error(pid > 0
    ? `another key command (process ${pid}) is writing ${file}; nothing was written: try again once it ends`
    : `another key command is writing ${file} (${lock} is there, its process unknown); nothing was written: try again once it ends, or remove the lock if no command runs`)
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        await link(mine, lock)
        break
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
      }
      const holder = Number(await readFile(lock, 'utf8').catch(() => '0'))
      if (attempt > 0 || holder === 0 || running(holder)) throw refused(holder)
      // Dead: renamed away by this command alone, then looked at again, since another may have taken it over meanwhile.
      const stale = `${lock}.stale.${process.pid}`
      if (await rename(lock, stale).then(() => false, () => true)) throw refused(holder)
      const taken = Number(await readFile(stale, 'utf8').catch(() => '0'))
      if (taken !== holder && running(taken)) {
        await link(stale, lock).catch(() => {})
        await rm(stale, { force: true })
        throw refused(taken)
      }
      await rm(stale, { force: true })
    }
  } finally {
    await rm(mine, { force: true })
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
  return validateRecords('keys', await readJsonFile(file, DATA_FILES.keys), DATA_FILES.keys)
}

/** An instant cut to the second, as the commands print it, so that what is written is what is printed. */
const wholeSecond = (ms: number) => Math.floor(ms / 1000) * 1000

/** A new key: 32 random bytes (256 bits, far beyond guessing), prefixed so that people know what the string is. */
const newSecret = () => `sk-or-v1-${randomBytes(32).toString('hex')}`

/** A duration option, in ms; refuses the command line when it is not one. */
function durationOption (option: string, text: string): number {
  const ms = parseDuration(text)
  // An expiry past the year 9999 is none RFC 3339 can write (four digits for the year).
  if (ms === undefined || Date.now() + ms >= Date.UTC(10000, 0, 1)) refuseCommandLine('key', `--${option} ${JSON.stringify(text)} is not a duration such as 30s, 15m, 12h or 90d, ending before the year 10000`)
  return ms
}

/** An expiry the options ask for: an RFC 3339 instant, or a duration from now on the store's clock. */
type Expiry = { at: string, option: string } | { inMs: number, option: string }

/**
 * The expiry the options `inOption` (a duration) and `atOption` (an instant) ask for, undefined for
 * none; refuses the command line when they are both given, or not what they should be.
 */
function expiryOption (inOption: string, inText: string | undefined, atOption: string, atText: string | undefined): Expiry | undefined {
  if (inText !== undefined && atText !== undefined) refuseCommandLine('key', `give --${inOption} or --${atOption}, not both`)
  if (inText !== undefined) return { inMs: durationOption(inOption, inText), option: `--${inOption} ${JSON.stringify(inText)}` }
  if (atText === undefined) return undefined
  if (Number.isNaN(timestampMs(atText))) refuseCommandLine('key', `--${atOption} ${JSON.stringify(atText)} is not an RFC 3339 timestamp with a time zone (2026-12-31T23:59:59Z)`)
  return { at: atText, option: `--${atOption} ${JSON.stringify(atText)}` }
}

/**
 * The instant an expiry option names, on the store's clock; refused when it is not in the future: a
 * key born expired answers 401 from the start, a typo in the year most likely.
 */
function expiryAt (expiry: Expiry, now: number): string {
  const at = 'at' in expiry ? expiry.at : timestampText(wholeSecond(now + expiry.inMs))
  if (timestampMs(at) <= now) throw new Error(`${expiry.option} is not in the future: it is ${instantText(now)} now; nothing was written`)
  return at
}

/** The rate limit an option gives: a whole number from 1 to RATE_LIMIT_MAX (`default`, none, where allowed). */
function limitOption (option: string, text: string, allowDefault: boolean): number | null {
  if (allowDefault && text === 'default') return null
  if (!/^[0-9]{1,10}$/.test(text) || Number(text) < 1 || Number(text) > RATE_LIMIT_MAX) {
    refuseCommandLine('key', `--${option} ${JSON.stringify(text)} is not a whole number of requests a minute from 1 to ${RATE_LIMIT_MAX}${allowDefault ? ', or default' : ''}`)
  }
  return Number(text)
}

/** An instant as printed, `never` for none. */
const shown = (at: string | null | undefined) => at == null ? 'never' : instantText(timestampMs(at))

/** Rows of cells as aligned columns, the last one not padded. */
function table (rows: string[][]): string {
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)))
  return rows.map((row) => row.map((cell, column) => column === row.length - 1 ? cell : cell.padEnd(widths[column]!)).join('  ').trimEnd()).join('\n') + '\n'
}

/** The keys, aligned, the expired and disabled marked; a key's previous secret on a line of its own, below it. */
function formatList (keys: Listed[], now: number): string {
  const rows = [['NAME', 'KIND', 'ORGANIZATION', 'EXPIRES', 'STATUS', 'LIMIT']]
  for (const key of keys) {
    const expired = key.expires_at != null && timestampMs(key.expires_at) <= now
    rows.push([key.name, key.kind, key.organization_id, shown(key.expires_at), expired ? 'expired' : key.disabled === true ? 'disabled' : 'active',
      key.rate_limit_per_minute == null ? 'default' : `${key.rate_limit_per_minute}/min`])
    if (key.previous != null) {
      const end = timestampMs(key.previous.expires_at)
      rows.push([`  previous secret of ${key.name}`, '', '', shown(key.previous.expires_at), end <= now ? 'ended' : 'grace', ''])
    }
  }
  return table(rows)
}

/** A value of a field in a history entry's changes as printed: instants to the second, in UTC. */
function historyValue (field: string, value: unknown): string {
  if (value === null || value === undefined) return field.endsWith('expires_at') ? 'never' : 'none'
  if (typeof value === 'string' && !Number.isNaN(timestampMs(value))) return instantText(timestampMs(value))
  return typeof value === 'string' ? value : JSON.stringify(value)
}

/** The history, a line an entry, oldest first: when, which key, what, who, and what changed. */
function formatHistory (entries: readonly HistoryEntry[]): string {
  const rows = [['TIME', 'KEY', 'ACTION', 'BY', 'CHANGES']]
  for (const { at, name, action, changes, by } of entries) {
    const described = Object.entries(changes ?? {}).map(([field, value]) => {
      if (field === 'sha256') return 'secret replaced'
      return Array.isArray(value) ? `${field} ${historyValue(field, value[0])} -> ${historyValue(field, value[1])}` : `${field} ${historyValue(field, value)}`
    })
    rows.push([instantText(timestampMs(at)), name ?? '(every key)', action, by, described.join(', ')])
  }
  return table(rows)
}

/** The most entries history shows at once: the last ones. */
const HISTORY_SHOWN = 1000

const OPTIONS = {
  kind: { type: 'string' },
  org: { type: 'string' },
  name: { type: 'string' },
  'expires-in': { type: 'string' },
  'expires-at': { type: 'string' },
  'rate-limit': { type: 'string' },
  grace: { type: 'string' },
  in: { type: 'string' },
  at: { type: 'string' },
  'per-minute': { type: 'string' },
  'expired-before': { type: 'string' },
  never: { type: 'boolean' },
  ...DATA_DIR_OPTIONS
} as const

/** The options each command takes, besides --data-dir; those it requires. */
const COMMAND_OPTIONS = {
  mint: { takes: ['kind', 'org', 'name', 'expires-in', 'expires-at', 'rate-limit'], requires: ['kind', 'org', 'name'] },
  rotate: { takes: ['name', 'grace', 'expires-in', 'expires-at'], requires: ['name'] },
  expire: { takes: ['name', 'in', 'at', 'never'], requires: ['name'] },
  disable: { takes: ['name'], requires: ['name'] },
  enable: { takes: ['name'], requires: ['name'] },
  limit: { takes: ['name', 'per-minute'], requires: ['name', 'per-minute'] },
  revoke: { takes: ['name'], requires: ['name'] },
  prune: { takes: ['expired-before'], requires: [] },
  history: { takes: ['name'], requires: [] },
  list: { takes: [], requires: [] }
} as const satisfies Record<string, { takes: ReadonlyArray<keyof typeof OPTIONS>, requires: ReadonlyArray<keyof typeof OPTIONS> }>
type Command = keyof typeof COMMAND_OPTIONS
// Minting takes no command word, so `mint` is as unknown as any other.
const COMMANDS = Object.keys(COMMAND_OPTIONS).filter((command) => command !== 'mint')

async function main () {
  const { positionals, values } = readCommandLine('key', OPTIONS, true)
  if (values.help) {
    process.stdout.write(HELP)
    return
  }
  if (positionals[0] !== undefined && !COMMANDS.includes(positionals[0])) {
    refuseUnknownCommand('key', positionals[0], `${COMMANDS.join(', ')}; a key is minted without one`)
  }
  const command = (positionals[0] ?? 'mint') as Command
  const { takes, requires } = COMMAND_OPTIONS[command]
  const given = (Object.keys(values) as Array<keyof typeof values>).filter((option) => values[option] !== undefined && !['help', 'data-dir', 'fixtures-dir'].includes(option))
  const stray = given.find((option) => !(takes as readonly string[]).includes(option))
  if (positionals.length > 1) refuseCommandLine('key', `one command at a time: ${positionals.slice(1).map((word) => JSON.stringify(word)).join(' ')} is more; ${USAGE}`)
  if (stray !== undefined) refuseCommandLine('key', `${command === 'mint' ? 'minting' : command} takes no --${stray}; ${USAGE}`)
  const missing = requires.find((option) => values[option] === undefined)
  if (missing !== undefined) refuseCommandLine('key', `${command === 'mint' ? 'minting' : command} needs --${missing}; ${USAGE}`)
  const kind = KEY_KINDS.find((k) => k === values.kind)
  if (command === 'mint' && kind === undefined) refuseCommandLine('key', `--kind ${JSON.stringify(values.kind)} is not standard or management`)
  if (command === 'expire' && [values.in, values.at, values.never].filter((given) => given !== undefined).length !== 1) refuseCommandLine('key', `expire needs one of --in, --at or --never; ${USAGE}`)
  const expiry = command === 'expire' ? expiryOption('in', values.in, 'at', values.at) : expiryOption('expires-in', values['expires-in'], 'expires-at', values['expires-at'])
  const graceMs = values.grace === undefined ? 60 * 60 * 1000 : durationOption('grace', values.grace)
  const rateLimit = values['rate-limit'] === undefined ? undefined : limitOption('rate-limit', values['rate-limit'], false) ?? undefined
  const perMinute = values['per-minute'] === undefined ? undefined : limitOption('per-minute', values['per-minute'], true)
  const pruneBefore = values['expired-before']
  if (pruneBefore !== undefined && Number.isNaN(timestampMs(pruneBefore))) {
    refuseCommandLine('key', `--expired-before ${JSON.stringify(pruneBefore)} is not an RFC 3339 timestamp with a time zone (2026-12-31T23:59:59Z)`)
  }
  const name = values.name!

  const store = await openStore(dataDirOf('key', values))
  try {
    switch (command) {
      case 'list':
        process.stdout.write(formatList(await store.list(), await store.now()))
        return
      case 'history': {
        const { entries, total } = await store.history(values.name, HISTORY_SHOWN)
        if (values.name !== undefined && total === 0) throw new Error(`no entry of a key named ${JSON.stringify(values.name)} in the history of ${store.where}`)
        process.stdout.write(formatHistory(entries))
        if (total > entries.length) process.stderr.write(`the last ${entries.length} of ${total} entries; --name <name> shows one key's\n`)
        return
      }
      case 'revoke':
        if (!await store.remove(name)) throw new Error(`no key named ${JSON.stringify(name)} in ${store.where}`)
        process.stderr.write(`revoked key ${JSON.stringify(name)} in ${store.where}; running servers refuse it within a second, without a restart\n`)
        return
      case 'prune': {
        const now = await store.now()
        const before = pruneBefore === undefined ? now : timestampMs(pruneBefore)
        // A key that has not ended is no key to prune: an instant to come would revoke live keys.
        if (before > now) throw new Error(`--expired-before ${JSON.stringify(pruneBefore)} is in the future: it is ${instantText(now)} now, and prune removes only what has ended; nothing was written`)
        const { keys, secrets } = await store.prune(before)
        process.stderr.write(`pruned ${keys} key${keys === 1 ? '' : 's'} and ${secrets} previous secret${secrets === 1 ? '' : 's'} that ended before ${instantText(before)} in ${store.where}\n`)
        return
      }
      case 'mint':
        await mint(store, { name, kind: kind!, organization: values.org!, expiry, rateLimit })
        return
      default:
        await change(store, command, name, { expiry, never: values.never === true, graceMs, perMinute })
    }
  } finally {
    await store.close()
  }
}

async function mint (store: KeyStore, { name, kind, organization, expiry, rateLimit }: { name: string, kind: ApiKey['kind'], organization: string, expiry: Expiry | undefined, rateLimit: number | undefined }) {
  // A duration counts from the database's now() when the keys are there: the replicas judge expiries on it.
  const expiresAt = expiry === undefined ? undefined : expiryAt(expiry, await store.now())
  const secret = newSecret()
  const key: ApiKey = { name, sha256: hash('sha256', secret), kind, organization_id: organization, ...expiresAt === undefined ? {} : { expires_at: expiresAt }, ...rateLimit === undefined ? {} : { rate_limit_per_minute: rateLimit } }
  // Checked as the servers check it before anything is written: a record they refuse would refuse the whole file.
  const problem = recordProblem('keys', key, 0)
  if (problem !== undefined) throw new Error(`the key would not be valid, nothing was written: ${problem.replace(/^\[0\]\./, '')}`)
  // A mistyped --org would mint a key that works everywhere but on its own organization's members.
  // The server still accepts a key whose organization went away later (its member listing answers 404).
  if (!await store.hasOrganization(organization)) throw new Error(`no organization ${JSON.stringify(organization)} in ${store.organizations}; nothing was written`)
  await store.add(key)
  process.stderr.write(`recorded ${kind} key ${JSON.stringify(name)} for ${organization}${expiresAt === undefined ? '' : `, expiring at ${shown(expiresAt)}`}` +
    `${rateLimit === undefined ? '' : `, limited to ${rateLimit} requests a minute`} in ${store.where}; running servers accept it within a second, without a restart.\nThe key (shown once, not stored):\n`)
  process.stdout.write(`${secret}\n`)
}

/** The key with these fields changed; an optional field null or false is left out, as a record leaves it out. */
function changedKey (key: ApiKey, changes: Partial<ApiKey>): ApiKey {
  const merged: Record<string, unknown> = { ...key, ...changes }
  for (const field of ['expires_at', 'disabled', 'rate_limit_per_minute', 'previous']) if (merged[field] == null || merged[field] === false) delete merged[field]
  return merged as ApiKey
}

/** rotate, expire, disable, enable, limit: a change of one key, said on stderr (and the new secret of a rotation printed on stdout). */
async function change (store: KeyStore, command: Exclude<Command, 'mint' | 'list' | 'history' | 'revoke' | 'prune'>, name: string,
  { expiry, never, graceMs, perMinute }: { expiry: Expiry | undefined, never: boolean, graceMs: number, perMinute: number | null | undefined }) {
  const secret = command === 'rotate' ? newSecret() : undefined
  let changedAt = 0
  const changed = await store.update(name, (key, now) => {
    changedAt = now
    const expiresAt = expiry === undefined ? undefined : expiryAt(expiry, now)
    const next = (changes: Partial<ApiKey>) => changedKey(key, changes)
    switch (command) {
      case 'expire': return next({ expires_at: never ? null : expiresAt })
      case 'disable': return next({ disabled: true })
      case 'enable': return next({ disabled: false })
      case 'limit': return next({ rate_limit_per_minute: perMinute })
      case 'rotate': {
        const until = key.expires_at == null ? Infinity : timestampMs(key.expires_at)
        // To the second, as printed: the secret before works until the instant the message names, never past the key's own expiry.
        const end = Math.min(until, wholeSecond(now + graceMs))
        // A key expired already gets a new secret only with a new expiry: keeping the old one would mint a
        // secret born expired, and dropping it would quietly make a temporary key live for ever.
        if (until <= now && expiresAt === undefined) {
          throw new Error(`key ${JSON.stringify(name)} expired at ${shown(key.expires_at)}: give its new secret an expiry with --expires-in or --expires-at; nothing was written`)
        }
        const keeps = expiresAt ?? key.expires_at
        return next({ sha256: hash('sha256', secret!), expires_at: keeps, previous: { sha256: key.sha256, expires_at: timestampText(end) } })
      }
    }
  })
  if (changed === undefined) throw new Error(`no key named ${JSON.stringify(name)} in ${store.where}`)
  const { before, after } = changed
  const where = `in ${store.where}; running servers follow within a second, without a restart`
  switch (command) {
    case 'expire':
      process.stderr.write(`key ${JSON.stringify(name)} expires at ${shown(after.expires_at)} (was ${shown(before.expires_at)}) ${where}\n`)
      return
    case 'disable':
    case 'enable':
      process.stderr.write(`key ${JSON.stringify(name)} ${command}d${(before.disabled === true) === (after.disabled === true) ? ' (it was already)' : ''} ${where}\n`)
      return
    case 'limit':
      process.stderr.write(`key ${JSON.stringify(name)} may make ${after.rate_limit_per_minute == null ? 'RATE_LIMIT_PER_MINUTE requests a minute (the default)' : `${after.rate_limit_per_minute} requests a minute`} ${where}\n`)
      return
    case 'rotate': {
      const end = after.previous!.expires_at
      // An expired key is rotated all the same (its new secret is what its holder needs), but the grace cannot bring the old secret back.
      const ending = before.expires_at != null && timestampMs(before.expires_at) <= changedAt
        ? `it expired already at ${shown(before.expires_at)}, so the grace (${formatDuration(graceMs)}) cannot extend its secret before`
        : `its secret before works until ${shown(end)} (grace ${formatDuration(graceMs)})`
      const replaced = before.previous != null && timestampMs(before.previous.expires_at) > changedAt ? `; the secret before that, in its grace until ${shown(before.previous.expires_at)}, stops now` : ''
      const state = after.disabled === true ? '; the key is disabled: enable it for its new secret to work' : ''
      process.stderr.write(`rotated key ${JSON.stringify(name)} (${after.kind}, ${after.organization_id}${after.expires_at == null ? '' : `, expiring at ${shown(after.expires_at)}`}) ${where}: ` +
        `${ending}${replaced}${state}.\nIts new secret (shown once, not stored):\n`)
      process.stdout.write(`${secret}\n`)
    }
  }
}

main().catch((error: Error) => {
  process.stderr.write(`${error.message.split('\n')[0]}\n`)
  process.exit(1)
})
