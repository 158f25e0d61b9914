import { execFile } from 'node:child_process'
import { createHash } from 'node:crypto'
import { readdir, readFile } from 'node:fs/promises'
import { promisify } from 'node:util'
import pg from 'pg'
import { afterAll, describe, expect, it } from 'vitest'
import { CHANNEL, SCHEMA_VERSION, migrate } from '../../../src/repositories/sources/postgres-schema.js'
import { serverProgram, sharedPostgres } from '../../postgres.js'

// The migrations are the files of migrations/, and schema.sql is what they make of an empty database:
// a fresh database and one upgraded from any earlier version have that schema, compared as one diff.
// After a new migration: npx vitest run test/repositories/sources/postgres-migrations.test.ts --update

const run = promisify(execFile)

const server = sharedPostgres()
afterAll(() => server.close())

/**
 * The database's schema as pg_dump writes it, less what varies from one run or server to another:
 * its comments (the server's version among them), the session settings it starts with, and the
 * \restrict lines, whose key is new at every dump.
 */
async function schemaOf (url: string) {
  const { stdout } = await run(serverProgram('pg_dump'), ['--schema-only', '--no-owner', url])
  return `${stdout.split('\n')
    .filter((line) => !/^(--|SET |SELECT pg_catalog\.set_config|\\(un)?restrict )/.test(line))
    .join('\n').replace(/\n{3,}/g, '\n\n').trim()}\n`
}

/** Runs `use` on a new, empty database; answers the database's URL. */
async function withDatabase (use: (client: pg.Client) => Promise<unknown>) {
  const url = await server.createDatabase()
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    await use(client)
  } finally {
    await client.end()
  }
  return url
}

const sha256 = (text: Buffer) => createHash('sha256').update(text).digest('hex')

/** Each migration's file, its name and the sha256 of its text, in order. */
async function migrationFiles () {
  const files = (await readdir('migrations')).filter((file) => file.endsWith('.sql')).sort()
  return await Promise.all(files.map(async (file) => ({ name: file.slice(0, -4), checksum: sha256(await readFile(`migrations/${file}`)) })))
}

describe('schema.sql', () => {
  let fresh: Promise<string> | undefined
  /** The schema of a database migrated from empty, made once. */
  const freshSchema = () => fresh ??= withDatabase((client) => migrate(client)).then(schemaOf)

  it('is the schema the migrations make of an empty database', async () => {
    const schema = await freshSchema()
    await expect(schema).toMatchFileSnapshot('../../../schema.sql')
    // The replicas listen where the triggers notify.
    expect(schema).toContain(`pg_notify('${CHANNEL}'`)
  })

  it.each(Array.from({ length: SCHEMA_VERSION - 1 }, (_, i) => i + 1))('is the schema of a database migrated to version %i, then to the last', async (version) => {
    const url = await withDatabase(async (client) => {
      await migrate(client, version)
      await migrate(client)
    })
    // Held equal to the fresh schema rather than to the file, which --update writes only once the file's tests end.
    expect(await schemaOf(url)).toBe(await freshSchema())
  })
})

describe('schema_migrations', () => {
  it('records each migration with its file\'s name and the sha256 of its text', async () => {
    await withDatabase(async (client) => {
      await migrate(client)
      const { rows } = await client.query('SELECT name, checksum FROM schema_migrations ORDER BY version')
      expect(rows).toEqual(await migrationFiles())
    })
  })

  it('gives the migrations a database applied before it recorded checksums those of their files, and applies the rest', async () => {
    await withDatabase(async (client) => {
      await migrate(client, 6)
      // As migrate made the table before; and a row the release before wrote, during an upgrade, without one.
      await client.query('ALTER TABLE schema_migrations DROP COLUMN checksum')
      await migrate(client, 8)
      await client.query('UPDATE schema_migrations SET checksum = NULL WHERE version = 8')
      expect(await migrate(client)).toEqual(Array.from({ length: SCHEMA_VERSION - 8 }, (_, i) => i + 9))
      const { rows } = await client.query('SELECT checksum FROM schema_migrations ORDER BY version')
      expect(rows.map(({ checksum }) => checksum)).toEqual((await migrationFiles()).map(({ checksum }) => checksum))
    })
  })

  it('refuses a migration edited after it was applied, naming it, and applies nothing', async () => {
    await withDatabase(async (client) => {
      await migrate(client, 6)
      const [, , third] = await migrationFiles()
      await client.query("UPDATE schema_migrations SET checksum = repeat('0', 64) WHERE version = 3")
      await expect(migrate(client)).rejects.toThrow(`migration ${third!.name} was edited after it was applied: ` +
        `its file's sha256 is ${third!.checksum.slice(0, 12)}…, the database applied 000000000000…; restore it, add a new migration instead`)
      expect((await client.query('SELECT max(version) AS version FROM schema_migrations')).rows).toEqual([{ version: 6 }])
    })
  })
})
