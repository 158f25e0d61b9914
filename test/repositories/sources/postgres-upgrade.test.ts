import pg from 'pg'
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest'
import { CHANNEL, SCHEMA_VERSION, migrate } from '../../../src/repositories/sources/postgres-schema.js'
import { replaceDirectory } from '../../../src/repositories/sources/postgres-write.js'
import { makeData, makeProvider } from '../../helper.js'
import { sharedPostgres } from '../../postgres.js'
import { PATIENCE_MS } from '../../patience.js'

// A migration never breaks the release before it (issue 38): the replicas of 1.0.0, the last release,
// read on against this build's schema while this build's replicas roll in, and can restart meanwhile.
// Their reads are below as 1.0.0 (3664021, src/repositories/sources/postgres.ts) sends them, with
// what it made of the rows; it then checked the records with its schemas, which are this build's.

// 1.0.0 read bigint columns as numbers.
const types = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === pg.types.builtins.INT8 ? Number : pg.types.getTypeParser(oid, format)) as typeof pg.types.getTypeParser
}

function inOrder (object: Record<string, unknown> | null, keys: readonly string[]) {
  if (object === null || typeof object !== 'object' || Array.isArray(object)) return object
  const ordered: Record<string, unknown> = {}
  for (const key of keys) if (key in object) ordered[key] = object[key]
  return Object.assign(ordered, object)
}

const PERCENTILES = ['p50', 'p75', 'p90', 'p99']

/** Everything a replica of 1.0.0 reads at start, in its one transaction, as it made records of it. */
async function readAsRelease100 (client: pg.Client) {
  await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY')
  try {
    const providers = (await client.query(`SELECT name, slug, privacy_policy_url, terms_of_service_url, status_page_url, headquarters, datacenters, omitted_fields
    FROM providers ORDER BY position, slug`)).rows.map(({ omitted_fields: omitted, ...record }) => {
      for (const field of omitted as string[]) delete record[field]
      return record
    })
    const endpoints = (await client.query(`SELECT id, model_id, model_name, name, provider_name, tag, context_length, max_prompt_tokens, max_completion_tokens,
      pricing, quantization, status, supported_parameters, supports_implicit_caching, supports_tool_choice,
      latency_last_30m, throughput_last_30m, uptime_last_5m, uptime_last_30m, uptime_last_1d
    FROM endpoints ORDER BY position, id`)).rows.map(({ id: _, ...record }) => ({
      ...record,
      pricing: inOrder(record.pricing, ['prompt', 'completion', 'image', 'request']),
      supports_tool_choice: inOrder(record.supports_tool_choice, ['auto', 'function', 'none', 'required']),
      latency_last_30m: inOrder(record.latency_last_30m, PERCENTILES),
      throughput_last_30m: inOrder(record.throughput_last_30m, PERCENTILES)
    }))
    const keys = (await client.query('SELECT name, sha256, kind, organization_id FROM keys ORDER BY name')).rows
    const organizations = (await client.query('SELECT id, name FROM organizations ORDER BY position, id')).rows
    await client.query('DECLARE member_rows NO SCROLL CURSOR FOR SELECT organization_id, id, email, first_name, last_name, role FROM members ORDER BY organization_id, position, id')
    const members = (await client.query({ text: 'FETCH 10000 FROM member_rows', rowMode: 'array' })).rows as string[][]
    return {
      providers,
      endpoints,
      keys,
      organizations: organizations.map(({ id, name }) => ({
        id,
        name,
        members: members.filter((row) => row[0] === id).map(([, id, email, first_name, last_name, role]) => ({ id, email, first_name, last_name, role }))
      }))
    }
  } finally {
    await client.query('COMMIT')
  }
}

const byName = <T extends { name: string }>(keys: readonly T[]) => [...keys].sort((a, b) => a.name < b.name ? -1 : 1)

/** The data these tests write: providers with fields left out and fields null, endpoints, keys, organizations. */
const data = makeData({
  providers: [makeProvider(1), makeProvider(2, { headquarters: null, datacenters: null, status_page_url: 'https://status.example' }), makeProvider(3)]
})
/** What 1.0.0 made of it: the same records, the keys in the order it read them. */
const asRead = {
  providers: data.providers,
  endpoints: data.endpoints,
  keys: byName(data.keys.map(({ name, sha256, kind, organization_id }) => ({ name, sha256, kind, organization_id }))),
  organizations: data.organizations.map(({ id, name, members }) => ({ id, name, members: members.slice() }))
}

const server = sharedPostgres()
afterAll(() => server.close())

let url: string
let client: pg.Client
beforeEach(async () => {
  url = await server.createDatabase()
  client = new pg.Client({ connectionString: url, types })
  await client.connect()
})
afterEach(() => client.end())

describe('the replicas of 1.0.0, against the schema of this build', () => {
  it('read the records 1.0.0 wrote as they read them before the migration', async () => {
    expect(await migrate(client, 1)).toEqual([1])
    // Written as 1.0.0's import wrote them: a column per field, omitted_fields for a field left out.
    const optional = ['terms_of_service_url', 'status_page_url', 'headquarters', 'datacenters']
    await client.query('INSERT INTO providers SELECT * FROM json_populate_recordset(NULL::providers, $1)',
      [JSON.stringify(data.providers.map((provider, position) => ({ ...provider, position, omitted_fields: optional.filter((field) => !(field in provider)) })))])
    await client.query(`INSERT INTO endpoints SELECT * FROM json_populate_recordset(NULL::endpoints, $1)`,
      [JSON.stringify(data.endpoints.map((endpoint, position) => ({ ...endpoint, id: position + 1, position })))])
    await client.query('INSERT INTO organizations SELECT * FROM json_populate_recordset(NULL::organizations, $1)',
      [JSON.stringify(data.organizations.map(({ id, name }, position) => ({ id, name, position })))])
    for (const { id, members } of data.organizations) {
      await client.query('INSERT INTO members SELECT * FROM json_populate_recordset(NULL::members, $1)',
        [JSON.stringify(members.slice().map((member, position) => ({ ...member, organization_id: id, position })))])
    }
    await client.query('INSERT INTO keys SELECT * FROM json_populate_recordset(NULL::keys, $1)', [JSON.stringify(data.keys)])
    expect(await readAsRelease100(client)).toStrictEqual(asRead)

    expect(await migrate(client)).toEqual(Array.from({ length: SCHEMA_VERSION - 1 }, (_, i) => i + 2))
    // Before: column "name" does not exist, from schema 4 on, at every read and every start.
    expect(await readAsRelease100(client)).toStrictEqual(asRead)
  })

  it('read what this build writes, and are told of each change as 1.0.0 was', async () => {
    await migrate(client)
    await replaceDirectory(client, data)
    expect(await readAsRelease100(client)).toStrictEqual(asRead)

    const listener = new pg.Client({ connectionString: url })
    await listener.connect()
    try {
      await listener.query(`LISTEN ${CHANNEL}`)
      const told = new Promise<string>((resolve) => listener.once('notification', ({ payload }) => resolve(payload ?? '')))
      await client.query('UPDATE providers SET document = $1 WHERE slug = $2', [JSON.stringify(makeProvider(2, { name: 'Renamed', datacenters: ['US'] })), 'provider-2'])
      // 1.0.0 read the table named again, whole.
      expect(JSON.parse(await Promise.race([told, new Promise<string>((_resolve, reject) => setTimeout(() => reject(new Error('no notification')), PATIENCE_MS))]))).toMatchObject({ table: 'providers' })
    } finally {
      await listener.end()
    }
    expect((await readAsRelease100(client)).providers[1]).toStrictEqual(makeProvider(2, { name: 'Renamed', datacenters: ['US'] }))
  })

  it.each([
    ['an endpoint whose count is no integer', 'endpoints', { context_length: 1.5 }],
    ['an endpoint whose pricing holds \\u0000, which jsonb refuses', 'endpoints', { pricing: { prompt: '\u0000' } }],
    ['a provider whose datacenters are no list', 'providers', { datacenters: 'US' }]
  ] as const)('take %s, as any other write, its columns null: 1.0.0 refused such a row', async (_case, table, fields) => {
    await migrate(client)
    await replaceDirectory(client, data)
    const position = 1
    const { rows: [row] } = await client.query(`SELECT document FROM ${table} WHERE position = $1`, [position])
    await client.query(`UPDATE ${table} SET document = $1 WHERE position = $2`, [JSON.stringify({ ...row.document, ...fields }), position])
    const read = await readAsRelease100(client)
    expect(read[table][position]).toMatchObject({ name: null })
    expect(read[table].filter((_, i) => i !== position)).toStrictEqual(asRead[table].filter((_, i) => i !== position))
  })
})
