// npm run db: the PostgreSQL store's schema, and its data in and out as a folder's files.
import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { loadConfig } from '../config.js'
import { describeCounts } from '../repositories/records.js'
import type { RecordCounts } from '../repositories/snapshot.js'
import { KINDS, LIST_KINDS, RECORD_KINDS, type ListKind, type RecordKind } from '../registry.js'
import { DATA_FILES } from '../repositories/sources/files.js'
import { readRecordBatches, refuseRepeat } from '../repositories/sources/file-stream.js'
import { JsonArrayWriter, MAX_ELEMENT_BYTES } from '../repositories/json-array-file.js'
import { MAX_FILE_BYTES } from '../repositories/json-file.js'
import { connectPostgres, locationOf } from '../repositories/sources/postgres.js'
import { exportDirectory } from '../repositories/sources/postgres-export.js'
import { RETENTION_MS, listTableSql, migrate, trimChanges, trimKeyHistory, writeMigration } from '../repositories/sources/postgres-schema.js'
import { formatDuration, parseDuration } from './duration.js'
import { replaceDirectory, type DirectoryBatches } from '../repositories/sources/postgres-write.js'
import { DATA_DIR_OPTIONS, dataDirOf, readCommandLine, refuseCommandLine, refuseUnknownCommand } from './command-line.js'

/** The exit code of an export that wrote its files without the rows a replica refuses (named on stderr). */
const EXIT_REFUSED = 3

const USAGE = 'usage: npm run db -- migrate | trim [--older-than <duration>] | import --data-dir <dir> | export --data-dir <dir> | new-migration --kind <kind>'

const DATABASE = `DATABASE_URL names the database (postgresql://user:password@host:port/database);
DATABASE_CONNECT_TIMEOUT_MS bounds how long one that does not answer is tried again.
`

const FILES = Object.values(DATA_FILES).join(', ')

const COMMAND_HELP = new Map([
  ['migrate', `Creates the schema, or applies the migrations it lacks, in one transaction. Safe when several
replicas or Jobs run it at once: the first applies, the others find nothing to do. Refuses, applying
nothing, when a migration applied before has been edited since (its sha256 is recorded).

usage: npm run db -- migrate
`],
  ['trim', `Removes the change log's entries older than the retention (default ${formatDuration(RETENTION_MS)}), then
VACUUMs the log so that its space is reused; and the entries of the keys' history (table key_history)
older than KEY_HISTORY_RETENTION_DAYS (default 90). A replica that was away longer than the retention reads
every table again when it comes back. Run it on the primary, every few minutes (deploy/kubernetes-postgres
has a CronJob); a hot standby refuses it.

usage: npm run db -- trim [--older-than <duration>]

  --older-than <duration>  the retention: 30s, 15m, 12h, 7d
`],
  ['import', `Reads and validates a folder's files exactly as the server does, and replaces every row with
them in one transaction: all or nothing. The files are read once, a record at a time, each record
checked before it is sent; a bad file, or a value repeated in one (which the tables' unique constraints
refuse), rolls everything back and is told as the server tells it. So they may be of any size (the
server reads at most ${MAX_FILE_BYTES / 1024 / 1024} MiB a file); a record, at most ${MAX_ELEMENT_BYTES / 1024 / 1024} MiB.

usage: npm run db -- import --data-dir <dir>

  --data-dir <dir>      the folder of ${FILES}
`],
  ['export', `Writes the data out as a folder's files, read as a replica reads them, a record at a time: import
then export gives the same files. A row a replica would refuse is left out of the files and named on
stderr, one line each (refused: table keys, row name "...": kind: ...); the command then exits ${EXIT_REFUSED}
once the files are written (1 when they could not be: the folder is then left as it was).

usage: npm run db -- export --data-dir <dir>

  --data-dir <dir>      the folder (created when missing) where ${FILES} are written
`],
  ['new-migration', `Writes the migration that makes a new list kind's table, from its entry in the registry
(src/kinds.ts), as the next file of migrations/. Needs no database.

usage: npm run db -- new-migration --kind <kind>

  --kind <kind>  the kind's name in the registry, a kind served as a list
`]
])

const HELP = `The directory in PostgreSQL: its schema, and its data in and out as a folder's files.

usage: npm run db -- migrate
       npm run db -- trim [--older-than <duration>]
       npm run db -- import --data-dir <dir>
       npm run db -- export --data-dir <dir>
       npm run db -- new-migration --kind <kind>

  migrate        creates or upgrades the schema
  trim           removes the change log's old entries
  import         validates a folder's files, then replaces all the data with them
  export         writes the data out as a folder's files
  new-migration  writes the migration of a new list kind's table
  -h, --help     prints this help; npm run db -- <command> --help, that of a command

${DATABASE}`

async function main () {
  const { positionals, values } = readCommandLine('db', { ...DATA_DIR_OPTIONS, 'older-than': { type: 'string' }, kind: { type: 'string' } }, true)
  const [command, ...rest] = positionals
  const commandHelp = COMMAND_HELP.get(command ?? '')
  if (values.help) {
    process.stdout.write(commandHelp ? `${commandHelp}\n${DATABASE}` : HELP)
    return
  }
  if (command !== undefined && !commandHelp) refuseUnknownCommand('db', command, 'migrate, trim, import, export or new-migration')
  const dir = dataDirOf('db', values)
  const needsDir = command === 'import' || command === 'export'
  if (rest.length > 0 || (needsDir ? !dir : dir !== undefined) || (command !== 'trim' && values['older-than'] !== undefined) ||
    (command === 'new-migration') !== (values.kind !== undefined) || !commandHelp) refuseCommandLine('db', USAGE)
  const olderThan = values['older-than'] === undefined ? RETENTION_MS : parseDuration(values['older-than'])
  if (olderThan === undefined) refuseCommandLine('db', `--older-than ${JSON.stringify(values['older-than'])} is not a duration such as 30s, 15m, 12h or 7d`)

  if (command === 'new-migration') {
    const kind = values.kind as ListKind
    if (!LIST_KINDS.includes(kind)) refuseCommandLine('db', `--kind ${JSON.stringify(kind)} is not a list kind of the registry (${LIST_KINDS.join(', ')})`)
    const path = await writeMigration(`${KINDS[kind].table}-table`, listTableSql(KINDS[kind]))
    process.stderr.write(`wrote ${path}, which makes the table of kind ${kind}; write schema.sql again with ` +
      'npx vitest run test/repositories/sources/postgres-migrations.test.ts --update\n')
    return
  }

  const config = loadConfig()
  const url = config.DATABASE_URL
  if (!url) throw new Error('DATABASE_URL is not set: it names the database, postgresql://user:password@host:port/database')

  // A database that does not answer yet (starting, restarting) is tried again; each try is told.
  const onRetry = (line: string) => { process.stderr.write(`${line}\n`) }

  if (command === 'export') {
    await exportFolder(url, dir!, config.DATABASE_CONNECT_TIMEOUT_MS, onRetry)
    return
  }

  const client = await connectPostgres(url, config.DATABASE_CONNECT_TIMEOUT_MS, { onRetry })
  try {
    if (command === 'import') {
      const counts = noRecords()
      const batches = RECORD_KINDS.map((kind) => [kind, counted(readRecordBatches(dir!, kind), kind, counts)])
      await replaceDirectory(client, Object.fromEntries(batches) as unknown as DirectoryBatches).catch(async (error: { code?: string, table?: string }) => {
        // 23505, unique_violation: PostgreSQL names the value, not the records; the file's message does.
        const kind = RECORD_KINDS.find((kind) => KINDS[kind].table === error.table)
        if (error.code === '23505' && kind !== undefined) await refuseRepeat(dir!, kind)
        throw error
      })
      process.stderr.write(`imported ${describeCounts(counts)} from ${dir} into ${locationOf(url)}\n`)
    } else if (command === 'trim') {
      const removed = await trimChanges(client, olderThan)
      process.stderr.write(`trimmed the change log of ${locationOf(url)}: ${removed} entries older than ${formatDuration(olderThan)} removed\n`)
      const days = config.KEY_HISTORY_RETENTION_DAYS
      const history = await trimKeyHistory(client, days * 86_400_000)
      process.stderr.write(`trimmed the keys' history of ${locationOf(url)}: ${history} entries older than ${days} days (KEY_HISTORY_RETENTION_DAYS) removed\n`)
    } else {
      // A check a migration leaves unvalidated, on rows already there that break it, is told (postgres-schema.ts).
      client.on('notice', (notice) => { if (notice.severity === 'WARNING') process.stderr.write(`warning: ${notice.message}\n`) })
      const applied = await migrate(client)
      process.stderr.write(applied.length > 0
        ? `migrated ${locationOf(url)}: applied version ${applied.join(', ')}\n`
        : `${locationOf(url)} is up to date\n`)
    }
  } finally {
    await client.end()
  }
}

const noRecords = () => Object.fromEntries([...RECORD_KINDS, 'members'].map((kind) => [kind, 0])) as RecordCounts

/** Adds to `counts` the records (and an organization's members) of `kind` as they go by. */
function count (counts: RecordCounts, kind: RecordKind, record: unknown) {
  counts[kind]++
  if (kind === 'organizations') counts.members += (record as { members: unknown[] }).members.length
}

async function * counted<T> (batches: AsyncIterable<readonly T[]>, kind: RecordKind, counts: RecordCounts) {
  for await (const records of batches) {
    for (const record of records) count(counts, kind, record)
    yield records
  }
}

/**
 * Writes every record a replica would serve into the folder's files, each written beside its file then
 * renamed over it once all are read: a failure leaves the folder as it was. A row a replica refuses
 * is named, one line each, and the export exits EXIT_REFUSED: a backup that lacks a record is not one
 * to trust blindly, but the records it has are the ones the replicas serve.
 */
async function exportFolder (url: string, dir: string, connectTimeoutMs: number, onRetry: (line: string) => void) {
  const client = await connectPostgres(url, connectTimeoutMs, { onRetry })
  const counts = noRecords()
  let refused = 0
  const writers = new Map<RecordKind, JsonArrayWriter>()
  // Made at the first record: a database that cannot be read (its schema, its rights) leaves no trace.
  const writerOf = async (kind: RecordKind) => {
    if (writers.size === 0) await mkdir(dir, { recursive: true })
    if (!writers.has(kind)) writers.set(kind, await JsonArrayWriter.create(join(dir, DATA_FILES[kind])))
    return writers.get(kind)!
  }
  try {
    await exportDirectory(client, {
      async write (kind, record) {
        count(counts, kind, record)
        await (await writerOf(kind)).write(record)
      },
      refuse (_kind, problem) {
        refused++
        process.stderr.write(`refused: ${problem}\n`)
      }
    })
    for (const kind of RECORD_KINDS) await writerOf(kind)
    for (const writer of writers.values()) await writer.commit()
  } catch (error) {
    for (const writer of writers.values()) await writer.discard()
    throw error
  } finally {
    await client.end()
  }
  const leftOut = refused === 0 ? '' : `, leaving out the ${refused === 1 ? 'record' : `${refused} records`} refused above`
  process.stderr.write(`exported ${describeCounts(counts)} from ${locationOf(url)} to ${dir}${leftOut}\n`)
  if (refused > 0) process.exitCode = EXIT_REFUSED
}

/**
 * PostgreSQL's refusal alone (`permission denied for schema public`) names neither the role nor the
 * fix. Since PostgreSQL 15 only the database's owner may create in schema public, so the usual
 * `GRANT ALL ON DATABASE` recipe is not enough for migrate: say so, and what to run as a superuser.
 */
function describeFailure (error: Error & { code?: string }, url: string | undefined): string {
  const message = error.message.split('\n')[0]!
  // 42501: insufficient_privilege.
  if (error.code !== '42501' || !url) return message
  const { username, pathname } = new URL(url)
  const role = username ? `"${decodeURIComponent(username)}"` : 'the role of DATABASE_URL'
  const database = `"${decodeURIComponent(pathname.slice(1)) || decodeURIComponent(username)}"`
  if (/ schema /.test(message)) {
    return `${message}: ${role} may not create tables in database ${database} (PostgreSQL 15 and later let only the database's owner create in schema public). ` +
      `As a superuser, make the role own the database: ALTER DATABASE ${database} OWNER TO ${role}; or, connected to it, GRANT CREATE ON SCHEMA public TO ${role}`
  }
  return `${message}: ${role} lacks rights on the directory's tables in database ${database}. ` +
    'Run npm run db as the role that ran migrate (the tables\' owner), or, as that role, ' +
    `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ${role}`
}

main().catch((error: Error) => {
  process.stderr.write(`${describeFailure(error, process.env.DATABASE_URL)}\n`)
  process.exit(1)
})
