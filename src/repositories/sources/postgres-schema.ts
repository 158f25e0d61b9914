import { createHash } from 'node:crypto'
import { existsSync, readdirSync } from 'node:fs'
import { readFile, writeFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type pg from 'pg'
import { KINDS, RECORD_KINDS, type RecordKind } from '../../registry.js'

/**
 * The channel the triggers notify on; every replica listens to it. The migrations that made the
 * triggers hold it as text (0001, 0005): another channel needs a migration that replaces them.
 */
export const CHANNEL = 'model_gateway_directory'

/**
 * The checks migration 7 added, as it wrote them: a key's kind, and the shape and case of its hash. They
 * were made from the key's schema where the database checks it cheaply and as the schema does (checkOf in
 * test/postgres.ts, which explains their form); test/repositories/sources/postgres-edges.test.ts holds
 * them equal to what the schema makes today, so that a change of its literals or pattern fails until a
 * migration of its own replaces the check. validateChecks names and counts with them.
 */
export const KEY_CHECKS = [
  { table: 'keys', name: 'keys_kind_check', check: "kind IN ('standard', 'management')" },
  { table: 'keys', name: 'keys_sha256_check', check: "char_length(sha256) = 64 AND sha256 !~ '[^0-9a-f]'" }
] as const

const sqlString = (value: string) => `'${value.replaceAll("'", "''")}'`

/**
 * The migrations are the files of migrations/ at the package's root, `0007-<what it does>.sql` being
 * version 7: the SQL each ran, as text, never made from a constant or the registry, so that what a new
 * database runs is what every database ran. The nearest such folder above this module, which runs
 * from src/ and dist/ (three folders down) and from the server's bundle (dist/chunks/, two).
 */
const MIGRATIONS_DIR = (() => {
  for (let dir = dirname(fileURLToPath(import.meta.url)); dir !== dirname(dir); dir = dirname(dir)) {
    if (existsSync(join(dir, 'migrations'))) return join(dir, 'migrations')
  }
  throw new Error(`no migrations folder above ${fileURLToPath(import.meta.url)}`)
})()

const numbered = (version: number) => String(version).padStart(4, '0')

// Listed at load (the server's start reads the folder, not its files); two files of one number, as two
// branches that each add one leave, are refused here rather than applied in an order nobody chose.
const MIGRATION_FILES = readdirSync(MIGRATIONS_DIR).filter((file) => file.endsWith('.sql')).sort()
for (const [index, file] of MIGRATION_FILES.entries()) {
  if (!file.startsWith(`${numbered(index + 1)}-`)) throw new Error(`migrations/${file}: expected the next number, ${numbered(index + 1)}-<name>.sql; the migrations are numbered from 0001, one each`)
}

/** The schema version this build reads and writes. */
export const SCHEMA_VERSION = MIGRATION_FILES.length

/** Every migration's text and the sha256 of it, which schema_migrations records as it is applied. */
async function readMigrations () {
  return await Promise.all(MIGRATION_FILES.map(async (file, index) => {
    const text = await readFile(join(MIGRATIONS_DIR, file))
    return { version: index + 1, name: file.slice(0, -'.sql'.length), sql: text.toString('utf8'), checksum: createHash('sha256').update(text).digest('hex') }
  }))
}

/** Writes `sql` as the next migration, `migrations/<next number>-<name>.sql`, never over a file; answers its path. */
export async function writeMigration (name: string, sql: string) {
  const path = join(MIGRATIONS_DIR, `${numbered(SCHEMA_VERSION + 1)}-${name}.sql`)
  await writeFile(path, sql, { flag: 'wx' })
  return path
}

/** Runs `work` in a transaction begun with `begin`: committed when it returns, rolled back when it throws. */
export async function inTransaction<T> (client: pg.ClientBase, work: () => Promise<T>, begin = 'BEGIN'): Promise<T> {
  await client.query(begin)
  try {
    const result = await work()
    await client.query('COMMIT')
    return result
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {})
    throw error
  }
}

// Any constant both sides agree on: it names "the migration lock" among advisory locks.
const MIGRATION_LOCK = 7_208_114_231

/**
 * Brings the schema to SCHEMA_VERSION (or `target`, for a test of a migration), in one transaction,
 * then validates the checks made from the schemas (validateChecks); answers the versions applied.
 * Replicas and Jobs that run it at once queue on an advisory lock: the first applies, the others find
 * nothing left to do. A migration whose file changed since it was applied is refused, and nothing is:
 * what a new database would run is no longer what this one ran.
 */
export async function migrate (client: pg.ClientBase, target = SCHEMA_VERSION): Promise<number[]> {
  await refuseStandby(client, 'migrate')
  const migrations = await readMigrations()
  const pending = await inTransaction(client, async () => {
    await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK])
    await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version integer PRIMARY KEY,
      name text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now(),
      checksum text
    )`)
    // Added where migrate made the table before it recorded checksums, and only there: ALTER TABLE would
    // hold the replicas' reads of the table (checkSchema) until this transaction ends.
    const { rowCount } = await client.query("SELECT 1 FROM pg_attribute WHERE attrelid = 'schema_migrations'::regclass AND attname = 'checksum'")
    if (rowCount === 0) await client.query('ALTER TABLE schema_migrations ADD COLUMN checksum text')
    // A migration applied before checksums were recorded (or by the release before, which records none)
    // ran the very text of its file: it gets the file's.
    await client.query(`UPDATE schema_migrations SET checksum = file.checksum FROM unnest($1::integer[], $2::text[]) AS file (version, checksum)
      WHERE schema_migrations.version = file.version AND schema_migrations.checksum IS NULL`,
    [migrations.map(({ version }) => version), migrations.map(({ checksum }) => checksum)])
    const { rows } = await client.query<{ version: number, checksum: string }>('SELECT version, checksum FROM schema_migrations ORDER BY version')
    for (const { version, checksum } of rows) {
      const migration = migrations[version - 1]
      if (migration !== undefined && migration.checksum !== checksum) {
        throw new Error(`migration ${migration.name} was edited after it was applied: its file's sha256 is ${migration.checksum.slice(0, 12)}…, ` +
          `the database applied ${checksum.slice(0, 12)}…; restore it, add a new migration instead`)
      }
    }
    const applied = new Set(rows.map((row) => row.version))
    const missing = migrations.filter((migration) => !applied.has(migration.version) && migration.version <= target)
    for (const migration of missing) {
      await client.query(migration.sql)
      await client.query('INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)', [migration.version, migration.name, migration.checksum])
    }
    return missing
  })
  if (target >= 7) await validateChecks(client)
  // A kind registered without a migration that makes its table: said by migrate too, not only at start.
  if (target === SCHEMA_VERSION) await checkSchema(client)
  return pending.map((migration) => migration.version)
}

/**
 * Validates the checks made from the schemas that are not yet, each in a transaction of its own,
 * after the migration's: VALIDATE reads every row (docs/postgresql.md says how long), under a lock
 * that lets reads and writes go on, where the migration's ALTER TABLE holds every reader of the table
 * until it commits. Rows already there that break a check (a key
 * "disabled" by hand) leave it NOT VALID, and a warning says how many there are: the replicas do not
 * serve them, new writes are checked all the same, and the next migrate validates it once they are
 * fixed. Never the cause of a failed migration, whose transaction would undo everything.
 */
async function validateChecks (client: pg.ClientBase) {
  const { rows } = await client.query<{ name: string }>("SELECT conname AS name FROM pg_constraint WHERE contype = 'c' AND NOT convalidated AND conname = ANY($1)",
    [KEY_CHECKS.map(({ name }) => name)])
  for (const { table, name, check } of KEY_CHECKS.filter(({ name }) => rows.some((row) => row.name === name))) {
    await client.query(`DO $$
BEGIN
  ALTER TABLE ${table} VALIDATE CONSTRAINT ${name};
EXCEPTION WHEN check_violation THEN
  RAISE WARNING '%', format('rows of table ${table} that break ${name} (%2$s): %1$s. The replicas do not serve them, and new ones are refused; fix or delete them, then run npm run db -- migrate again to validate the check',
    (SELECT count(*) FROM ${table} WHERE NOT (${check})), ${sqlString(check)});
END
$$`)
  }
}

/**
 * The columns every list kind's table has, whatever its kind, as a replica reads them (readList in
 * postgres.ts) and `npm run db -- export` does. What each is for, and why `id` is the unique field's own
 * column for a kind keyed by `id`, is docs/postgresql.md's ("Every list kind's table has the same
 * shape"). `document_bytes` is stored, computed once by its writer: json keeps no length apart from its
 * text, and octet_length(document::text) would read and copy the whole document at every read. Each
 * other unique field of the registry's entry is a generated text column, unique, by which an operator
 * changes a record with one statement. A new kind's table is made by a migration of its own, holding
 * what listTableSql makes of its registry entry.
 */
export const LIST_COLUMNS: readonly string[] = ['id', 'position', 'document', 'document_bytes']

/**
 * The SQL of the migration that makes a new list kind's table from its registry entry, in the shape
 * above (`npm run db -- new-migration --kind <kind>` writes it as the next migration, where it stays
 * as it was). test/repositories/sources/postgres-schema.test.ts holds what it makes of providers and
 * endpoints equal to the tables their migrations made.
 */
export function listTableSql ({ table, unique }: { table: string, unique: readonly string[] }): string {
  for (const field of unique) {
    if (field !== 'id' && LIST_COLUMNS.includes(field)) throw new Error(`${table}: a unique field named ${field} would clash with the table's own column`)
    if (!/^[a-z_][a-z0-9_]*$/.test(field)) throw new Error(`${table}: a unique field named ${field} is no column name that needs no quotes`)
  }
  const generated = (field: string) => `${field} text GENERATED ALWAYS AS (document ->> '${field}') STORED`
  const columns = [
    unique.includes('id') ? `${generated('id')} PRIMARY KEY` : 'id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY',
    'position bigint',
    'document json NOT NULL',
    ...unique.filter((field) => field !== 'id').map((field) => `${generated(field)} UNIQUE`),
    'document_bytes bigint GENERATED ALWAYS AS (octet_length(document::text)) STORED'
  ]
  return `CREATE TABLE ${table} (
  ${columns.join(',\n  ')}
);
CREATE TRIGGER ${table}_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON ${table}
  FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_table();
`
}

/**
 * The column whose value names a list's row in messages (`row slug "openai"`): the kind's key where it
 * is a unique field, a column of its own; else `id` where that is the unique field; else none, and the
 * row is named by its identity (`row id 3`).
 */
export function namingColumn (kind: RecordKind): string | undefined {
  const { key, unique } = KINDS[kind] as { key: string | undefined, unique: readonly string[] }
  if (key !== undefined && unique.includes(key)) return key
  return unique.includes('id') ? 'id' : undefined
}

/** The tables this build reads, each with the columns checkSchema makes sure of (none: the migrations' own). */
function tablesRead (): Map<string, readonly string[]> {
  const tables = new Map<string, readonly string[]>()
  for (const kind of RECORD_KINDS) {
    const naming = namingColumn(kind)
    tables.set(KINDS[kind].table, KINDS[kind].index === 'list' ? [...new Set([...LIST_COLUMNS, ...naming === undefined ? [] : [naming]])] : [])
  }
  for (const table of ['members', 'directory_changes', 'directory_changes_trimmed', 'key_history']) tables.set(table, [])
  return tables
}

/**
 * Throws a clear message unless the schema is at SCHEMA_VERSION or later (a newer build may have
 * migrated), and has every table this build reads, each list's with the columns a replica reads: a
 * list kind registered without its migration would otherwise fail at its first read with PostgreSQL's
 * `relation "models" does not exist`, which names neither the cause nor the fix.
 */
export async function checkSchema (client: pg.ClientBase) {
  const tables = tablesRead()
  const { rows } = await client.query<{ name: string, columns: string[] | null }>(`SELECT name, CASE WHEN to_regclass(name) IS NOT NULL THEN
      ARRAY(SELECT attname::text FROM pg_attribute WHERE attrelid = to_regclass(name) AND attnum > 0 AND NOT attisdropped) END AS columns
    FROM unnest($1::text[]) AS name`, [['schema_migrations', ...tables.keys()]])
  const found = new Map(rows.map(({ name, columns }) => [name, columns]))
  const version = found.get('schema_migrations')
    ? (await client.query<{ version: number | null }>('SELECT max(version) AS version FROM schema_migrations')).rows[0]?.version ?? null
    : null
  if (version === null || version < SCHEMA_VERSION) {
    throw new Error(schemaTooOld(version))
  }
  const missing = [...tables].flatMap(([table, columns]) => {
    const present = found.get(table)
    if (present === null || present === undefined) return [`table ${table}`]
    return columns.filter((column) => !present.includes(column)).map((column) => `column ${column} in table ${table}`)
  })
  if (missing.length > 0) {
    throw new Error(schemaLacks(missing, version))
  }
}

/** What checkSchema says of a database whose schema is older than this build's (null: none at all); docs/ quote it. */
export function schemaTooOld (version: number | null) {
  return `the database schema is at version ${version ?? 'none'}, this build needs ${SCHEMA_VERSION}: run npm run db -- migrate`
}

/** What checkSchema says of a database at this build's schema that lacks tables or columns it reads (`table specimens`); docs/ quote it. */
export function schemaLacks (missing: readonly string[], version: number) {
  return `the database has no ${missing.join(', no ')}, which this build reads, and its schema is at version ${version} already: ` +
    `no migration of this build makes ${missing.length === 1 ? 'it' : 'them'}; add one (CONTRIBUTING.md, "A new kind of record"), then run npm run db -- migrate`
}

/** A hot standby takes no write: say so in one line, rather than PostgreSQL's error at the first statement. */
async function refuseStandby (client: pg.ClientBase, command: string) {
  const { rows: [row] } = await client.query<{ recovery: boolean }>('SELECT pg_is_in_recovery() AS recovery')
  if (row?.recovery === true) throw new Error(`the database is a hot standby (read-only): run npm run db -- ${command} against the primary`)
}

/** How long the change log keeps an entry unless told otherwise: a replica cut off for less catches up from it. */
export const RETENTION_MS = 24 * 60 * 60 * 1000

/**
 * Removes the change log's entries written more than `olderThanMs` ago, and records the newest
 * transaction removed: a replica whose position had not seen it reads every table again. Then
 * VACUUM, so that the space is reused and the log stays the size of its retention.
 */
export async function trimChanges (client: pg.ClientBase, olderThanMs: number): Promise<number> {
  await refuseStandby(client, 'trim')
  await checkSchema(client)
  const { rows: [row] } = await client.query<{ removed: string }>(`WITH gone AS (
      DELETE FROM directory_changes WHERE written_at < now() - $1 * interval '1 millisecond' RETURNING txid
    ), moved AS (
      UPDATE directory_changes_trimmed SET through = greatest(through, (SELECT max(txid) FROM gone)), trimmed_by = pg_current_xact_id()
        WHERE EXISTS (SELECT 1 FROM gone) RETURNING through
    )
    SELECT (SELECT count(*) FROM gone) AS removed, (SELECT count(*) FROM moved) AS moved`, [olderThanMs])
  await client.query('VACUUM directory_changes')
  return Number(row?.removed ?? 0)
}

/** Removes the entries of the keys' history written more than `olderThanMs` ago; answers how many. */
export async function trimKeyHistory (client: pg.ClientBase, olderThanMs: number): Promise<number> {
  await refuseStandby(client, 'trim')
  await checkSchema(client)
  // As the schema's owner (key_history_trim): the history refuses any other remover.
  const { rows: [row] } = await client.query<{ removed: string }>("SELECT key_history_trim($1 * interval '1 millisecond') AS removed", [olderThanMs])
  return Number(row?.removed ?? 0)
}
