import pg from 'pg'
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest'
import { KINDS, LIST_KINDS } from '../../../src/registry.js'
import { checkSchema, listTableSql } from '../../../src/repositories/sources/postgres-schema.js'
import { sharedPostgres } from '../../postgres.js'

// The migrations are frozen SQL: what a new list kind's migration holds is made by listTableSql, and
// the tables the shipped migrations made are what it makes, so the two cannot drift apart.

const server = sharedPostgres()
afterAll(() => server.close())

let admin: pg.Client
beforeEach(async () => {
  admin = new pg.Client({ connectionString: await server.createMigratedDatabase() })
  await admin.connect()
})
afterEach(() => admin.end())

/** A table as the catalog describes it: its columns in order, its constraints, its triggers. */
async function shapeOf (client: pg.Client, table: string) {
  const { rows: columns } = await client.query(`SELECT attname AS name, format_type(atttypid, atttypmod) AS type, attnotnull AS not_null,
      attidentity AS identity, attgenerated AS generated, pg_get_expr(adbin, adrelid) AS expression
    FROM pg_attribute LEFT JOIN pg_attrdef ON adrelid = attrelid AND adnum = attnum
    WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, [table])
  const { rows: constraints } = await client.query(`SELECT conname AS name, pg_get_constraintdef(oid) AS definition
    FROM pg_constraint WHERE conrelid = $1::regclass ORDER BY conname`, [table])
  const { rows: triggers } = await client.query(`SELECT tgname AS name, tgtype AS type, tgfoid::regproc::text AS function
    FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal ORDER BY tgname`, [table])
  return { columns, constraints, triggers }
}

/** The columns a replica of 1.0.0 reads, which schema 8 fills from the documents by a trigger (`<table>_columns`). */
const KEPT_FOR_RELEASE_100 = {
  providers: ['name', 'privacy_policy_url', 'terms_of_service_url', 'status_page_url', 'headquarters', 'datacenters', 'omitted_fields'],
  endpoints: ['model_id', 'model_name', 'name', 'provider_name', 'tag', 'context_length', 'max_prompt_tokens', 'max_completion_tokens',
    'pricing', 'quantization', 'status', 'supported_parameters', 'supports_implicit_caching', 'supports_tool_choice',
    'latency_last_30m', 'throughput_last_30m', 'uptime_last_5m', 'uptime_last_30m', 'uptime_last_1d']
}

describe('the table of a list kind', () => {
  it('is, for each shipped kind, the table listTableSql makes of its registry entry: columns, types, generation, keys, trigger', async () => {
    await admin.query('CREATE SCHEMA generated')
    await admin.query('SET search_path = generated, public')
    for (const kind of LIST_KINDS) await admin.query(listTableSql(KINDS[kind]))
    await admin.query('RESET search_path')
    for (const kind of LIST_KINDS) {
      const { table } = KINDS[kind]
      const shipped = await shapeOf(admin, `public.${table}`)
      expect(shipped.columns.map(({ name }) => name)).toEqual(expect.arrayContaining(['id', 'position', 'document', 'document_bytes']))
      // Less what schema 8 keeps for the replicas of 1.0.0 until the release after (postgres-upgrade.test.ts).
      const kept = KEPT_FOR_RELEASE_100[table as keyof typeof KEPT_FOR_RELEASE_100] ?? []
      expect(shipped.columns.filter(({ name }) => kept.includes(name)).map(({ name }) => name), table).toEqual(kept)
      expect(await shapeOf(admin, `generated.${table}`), table).toEqual({
        ...shipped,
        columns: shipped.columns.filter(({ name }) => !kept.includes(name)),
        triggers: shipped.triggers.filter(({ name }) => name !== `${table}_columns`)
      })
    }
  })

  it('has, for a kind whose unique field is id, that field as its identity: the primary key, a generated text column', async () => {
    await admin.query(listTableSql({ table: 'widgets', unique: ['id', 'name'] }))
    const { columns, constraints } = await shapeOf(admin, 'widgets')
    expect(columns.map(({ name, type, identity, expression }) => ({ name, type, identity, expression }))).toEqual([
      { name: 'id', type: 'text', identity: '', expression: "(document ->> 'id'::text)" },
      { name: 'position', type: 'bigint', identity: '', expression: null },
      { name: 'document', type: 'json', identity: '', expression: null },
      { name: 'name', type: 'text', identity: '', expression: "(document ->> 'name'::text)" },
      { name: 'document_bytes', type: 'bigint', identity: '', expression: 'octet_length((document)::text)' }
    ])
    expect(constraints).toEqual([
      { name: 'widgets_name_key', definition: 'UNIQUE (name)' },
      { name: 'widgets_pkey', definition: 'PRIMARY KEY (id)' }
    ])
  })
})

describe('checkSchema', () => {
  const schemaVersion = async () => (await admin.query<{ version: number }>('SELECT max(version) AS version FROM schema_migrations')).rows[0]!.version

  it('names a column a replica reads that a list table lacks, and says no migration of this build makes it', async () => {
    await admin.query('ALTER TABLE endpoints DROP COLUMN document_bytes')
    await expect(checkSchema(admin)).rejects.toThrow('the database has no column document_bytes in table endpoints, which this build reads, ' +
      `and its schema is at version ${await schemaVersion()} already: no migration of this build makes it; add one (CONTRIBUTING.md, "A new kind of record"), then run npm run db -- migrate`)
  })

  it('names every table it reads that is missing', async () => {
    const version = await schemaVersion()
    await admin.query('DROP TABLE directory_changes_trimmed, providers')
    await expect(checkSchema(admin)).rejects.toThrow('the database has no table providers, no table directory_changes_trimmed, which this build reads, ' +
      `and its schema is at version ${version} already: no migration of this build makes them; add one`)
  })
})
