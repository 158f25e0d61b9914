import pg from 'pg'
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { BUNDLED_FIXTURES_DIR } from '../../../src/config.js'
import { createDirectory } from '../../../src/repositories/directory.js'
import type { DirectoryData } from '../../../src/repositories/records.js'
import type { DirectorySource } from '../../../src/repositories/source.js'
import { loadFixtures } from '../../../src/repositories/sources/files.js'
import { createPostgresSource } from '../../../src/repositories/sources/postgres.js'
import { migrate } from '../../../src/repositories/sources/postgres-schema.js'
import { replaceDirectory } from '../../../src/repositories/sources/postgres-write.js'
import { bearer, build, KEYS, makeData } from '../../helper.js'
import { startPostgres, type PostgresServer } from '../../postgres.js'

let server: PostgresServer
beforeAll(async () => { server = await startPostgres() })
afterAll(() => server?.close())

let url: string
let admin: pg.Client
const sources: DirectorySource[] = []
beforeEach(async () => {
  url = await server.createDatabase()
  admin = new pg.Client({ connectionString: url })
  await admin.connect()
  await migrate(admin)
})
afterEach(async () => {
  await Promise.all(sources.splice(0).map((source) => source.close()))
  await admin.end()
})

async function importData (data: DirectoryData) {
  await replaceDirectory(admin, data)
}

type SourceEvent = { installed: DirectoryData, change: string } | { refused: Error, change: string }

/** A source over the test database, loaded and watched; `next()` waits for what it hands over next. */
async function follow () {
  const source = createPostgresSource({ url, connectTimeoutMs: 0 })
  sources.push(source)
  const data = await source.load()
  const directory = createDirectory(source.name, data)
  const events: SourceEvent[] = []
  const waiting: Array<(event: SourceEvent) => void> = []
  const deliver = (event: SourceEvent) => {
    const waiter = waiting.shift()
    if (waiter) waiter(event)
    else events.push(event)
  }
  source.watch({
    install (installed, change) {
      directory.install(installed)
      deliver({ installed, change })
    },
    reject (refused, change) {
      directory.refused()
      deliver({ refused, change })
    }
  })
  const app = build({ snapshots: directory })
  return {
    data,
    app,
    next: () => new Promise<SourceEvent>((resolve) => {
      const event = events.shift()
      if (event) resolve(event)
      else waiting.push(resolve)
    })
  }
}

async function installed (event: Promise<SourceEvent>) {
  const result = await event
  if (!('installed' in result)) throw new Error(`expected a snapshot, got a refusal: ${result.refused.message}`)
  return result
}

async function refused (event: Promise<SourceEvent>) {
  const result = await event
  if (!('refused' in result)) throw new Error(`expected a refusal, got a snapshot (${result.change})`)
  return result
}

describe('loading from PostgreSQL', () => {
  it('reads back exactly the records imported, in order', async () => {
    const data = makeData()
    await importData(data)
    const { data: loaded } = await follow()
    expect(loaded).toStrictEqual({ ...data, keys: [...data.keys].sort((a, b) => a.name.localeCompare(b.name)) })
  })

  it('reads organizations of more members than one fetch of rows whole, in order', async () => {
    const data = makeData()
    await importData(data)
    // Rows are fetched 10,000 at a time: these two organizations span three fetches, and one fetch
    // holds the end of one and the start of the other.
    await admin.query("INSERT INTO organizations (id, name) VALUES ('org_big', 'Big'), ('org_big2', 'Big 2')")
    await admin.query(`INSERT INTO members (organization_id, id, position, email, first_name, role)
      SELECT o, 'user_' || i, i, 'user' || i || '@big.example', 'First ' || i, 'org:member' FROM generate_series(1, 12500) AS i, unnest(ARRAY['org_big', 'org_big2']) AS o`)
    const { data: loaded } = await follow()
    expect(loaded.organizations.slice(0, 2)).toStrictEqual(data.organizations)
    const expected = Array.from({ length: 12500 }, (_, i) => ({ id: `user_${i + 1}`, email: `user${i + 1}@big.example`, first_name: `First ${i + 1}`, last_name: null, role: 'org:member' }))
    for (const organization of loaded.organizations.slice(2)) expect(organization.members.slice()).toStrictEqual(expected)
  })

  it('serves the same bytes and ETags as the files for the same data', async () => {
    const data = await loadFixtures(BUNDLED_FIXTURES_DIR)
    await importData(data)
    const { app } = await follow()
    const files = build({ data })
    afterEach(() => files.close())
    for (const path of ['/v1/providers', '/v1/endpoints/zdr', '/v1/organization/members?offset=120&limit=100']) {
      const headers = bearer('sk-or-v1-dev-acme-mgmt-6f1d0c7a9b2e4f8c8d3a1b5e7c9f0a2d')
      const [fromDatabase, fromFiles] = await Promise.all([app.inject({ url: path, headers }), files.inject({ url: path, headers })])
      expect(fromDatabase.statusCode, path).toBe(200)
      expect(fromDatabase.body, path).toBe(fromFiles.body)
      expect(fromDatabase.headers.etag, path).toBe(fromFiles.headers.etag)
    }
  })

  it('answers 404 for a management key whose organization does not exist, as the files do', async () => {
    await importData(makeData())
    const { app } = await follow()
    const res = await app.inject({ url: '/v1/organization/members', headers: bearer(KEYS.orphanManagement) })
    expect(res.statusCode).toBe(404)
    expect(res.json()).toEqual({ error: { code: 404, message: expect.any(String) } })
  })

  it('refuses to start on a row the schemas refuse, naming table, row and field', async () => {
    await importData(makeData())
    await admin.query("UPDATE providers SET headquarters = 'ZZ' WHERE slug = 'provider-3'")
    const source = createPostgresSource({ url, connectTimeoutMs: 0 })
    sources.push(source)
    await expect(source.load()).rejects.toThrow('table providers, row slug "provider-3": headquarters: "ZZ" is not an ISO 3166-1 alpha-2 code')
  })

  it('refuses to start on a database without the schema', async () => {
    const empty = createPostgresSource({ url: await server.createDatabase(), connectTimeoutMs: 0 })
    sources.push(empty)
    await expect(empty.load()).rejects.toThrow('the database schema is at version none, this build needs 1: run npm run db -- migrate')
  })
})

describe('constraints refuse bad rows at write time', () => {
  beforeEach(() => importData(makeData()))
  const sha = 'a'.repeat(64)
  const endpoint = (overrides: Record<string, string>) => {
    const values: Record<string, string> = {
      model_id: "'v/m'", model_name: "'M'", name: "'N'", provider_name: "'P'", tag: "'t'", context_length: '1',
      pricing: `'{"prompt":"0","completion":"0","image":"0","request":"0"}'`, status: '0', supported_parameters: "'{tools}'",
      supports_implicit_caching: 'true', supports_tool_choice: `'{"auto":true,"function":true,"none":true,"required":false}'`,
      ...overrides
    }
    return `INSERT INTO endpoints (${Object.keys(values).join(', ')}) VALUES (${Object.values(values).join(', ')})`
  }
  it.each([
    ['a key hash that is not lowercase hex', `INSERT INTO keys VALUES ('k', '${'A'.repeat(64)}', 'standard', 'o')`, 'keys_sha256_check'],
    ['a key kind that does not exist', `INSERT INTO keys VALUES ('k', '${sha}', 'admin', 'o')`, 'keys_kind_check'],
    ['a key name taken', `INSERT INTO keys VALUES ('alpha-standard', '${sha}', 'standard', 'o')`, 'keys_pkey'],
    ['a member role that does not exist', "INSERT INTO members (organization_id, id, email, role) VALUES ('org_alpha', 'u', 'u@x.example', 'admin')", 'members_role_check'],
    ['a member id taken in its organization', "INSERT INTO members (organization_id, id, email, role) VALUES ('org_alpha', 'user_alpha_1', 'u@x.example', 'org:member')", 'members_pkey'],
    ['a member of no organization', "INSERT INTO members (organization_id, id, email, role) VALUES ('org_none', 'u', 'u@x.example', 'org:member')", 'members_organization_id_fkey'],
    ['an e-mail address without a domain', "UPDATE members SET email = 'nobody' WHERE id = 'user_beta_1'", 'members_email_check'],
    ['a lowercase country code', "UPDATE providers SET headquarters = 'us' WHERE slug = 'provider-1'", 'providers_headquarters_check'],
    ['a datacenter that is no code', "UPDATE providers SET datacenters = '{US,Germany}' WHERE slug = 'provider-1'", 'providers_datacenters_check'],
    ['a URL that is not http(s)', "UPDATE providers SET privacy_policy_url = 'ftp://x.example/p' WHERE slug = 'provider-1'", 'providers_privacy_policy_url_check'],
    ['a slug with capitals', "UPDATE providers SET slug = 'Provider' WHERE slug = 'provider-1'", 'providers_slug_check'],
    ['a field omitted that holds a value', "UPDATE providers SET omitted_fields = '{headquarters}' WHERE slug = 'provider-1'", 'providers_omitted_fields_are_null'],
    ['a negative context length', endpoint({ context_length: '-1' }), 'endpoints_context_length_check'],
    ['a price that is a number', endpoint({ pricing: `'{"prompt":0.1,"completion":"0","image":"0","request":"0"}'` }), 'endpoints_pricing_check'],
    ['a price missing', endpoint({ pricing: `'{"prompt":"0","completion":"0","image":"0"}'` }), 'endpoints_pricing_check'],
    ['a tool choice that is not a boolean', endpoint({ supports_tool_choice: `'{"auto":1,"function":true,"none":true,"required":false}'` }), 'endpoints_supports_tool_choice_check'],
    ['an uptime above 100', endpoint({ uptime_last_5m: '101' }), 'endpoints_uptime_last_5m_check'],
    ['a latency that is not four numbers', endpoint({ latency_last_30m: `'{"p50":1,"p75":2,"p90":3}'` }), 'endpoints_latency_last_30m_check'],
    ['an empty parameter name', endpoint({ supported_parameters: "'{tools,\"\"}'" }), 'endpoints_supported_parameters_check'],
    ['a model id without a vendor', endpoint({ model_id: "'gpt'" }), 'endpoints_model_id_check']
  ])('refuses %s', async (_case, sql, constraint) => {
    await expect(admin.query(sql)).rejects.toMatchObject({ constraint })
  })
})

describe('following changes', () => {
  beforeEach(() => importData(makeData()))

  it('applies a change made with plain SQL, reading only the part that changed', async () => {
    const { app, data, next } = await follow()
    await admin.query("UPDATE providers SET name = 'Renamed' WHERE slug = 'provider-2'")
    const { installed: after, change } = await installed(next())
    expect(change).toBe('providers changed')
    expect(after.endpoints).toBe(data.endpoints)
    expect(after.organizations).toBe(data.organizations)
    expect(after.keys).toBe(data.keys)
    const res = await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })
    expect(res.json().data.map((provider: { name: string }) => provider.name)).toEqual(['Provider 1', 'Renamed', 'Provider 3'])
  })

  it('revokes a key deleted with plain SQL', async () => {
    const { app, data, next } = await follow()
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(200)
    await admin.query("DELETE FROM keys WHERE name = 'alpha-standard'")
    const { installed: after } = await installed(next())
    expect(after.organizations).toBe(data.organizations)
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(401)
  })

  it('reads again the members of the organization that changed, and only those', async () => {
    const { app, data, next } = await follow()
    // Imported members hold positions 0, 1, 2: this one ties with the second, and comes after it by id.
    await admin.query("INSERT INTO members (organization_id, id, position, email, first_name, last_name, role) VALUES ('org_beta', 'user_new', 1, 'new@beta.example', 'New', null, 'org:member')")
    const { installed: after, change } = await installed(next())
    expect(change).toBe('members of org_beta changed')
    const [alpha, beta] = after.organizations
    expect(alpha).toBe(data.organizations[0])
    expect(beta!.members.slice().map((member) => member.id)).toEqual(['user_beta_0', 'user_beta_1', 'user_new', 'user_beta_2'])
    const res = await app.inject({ url: '/v1/organization/members', headers: bearer(KEYS.betaManagement) })
    expect(res.json().total_count).toBe(4)
    expect(res.json().data[2]).toEqual({ id: 'user_new', email: 'new@beta.example', first_name: 'New', last_name: null, role: 'org:member' })
  })

  it('keeps the order the operator sets, ties broken by id', async () => {
    const { app, next } = await follow()
    await admin.query("UPDATE members SET position = 0 WHERE organization_id = 'org_beta'")
    await installed(next())
    const res = await app.inject({ url: '/v1/organization/members', headers: bearer(KEYS.betaManagement) })
    expect(res.json().data.map((member: { id: string }) => member.id)).toEqual(['user_beta_0', 'user_beta_1', 'user_beta_2'])
    await admin.query("UPDATE members SET position = -1 WHERE organization_id = 'org_beta' AND id = 'user_beta_2'")
    await installed(next())
    const again = await app.inject({ url: '/v1/organization/members', headers: bearer(KEYS.betaManagement) })
    expect(again.json().data.map((member: { id: string }) => member.id)).toEqual(['user_beta_2', 'user_beta_0', 'user_beta_1'])
  })

  it('applies a transaction as one change', async () => {
    const { app, next } = await follow()
    await admin.query('BEGIN')
    await admin.query("INSERT INTO organizations (id, name) VALUES ('org_gamma', 'Gamma')")
    await admin.query("INSERT INTO members (organization_id, id, email, role) VALUES ('org_gamma', 'g1', 'g1@gamma.example', 'org:admin')")
    await admin.query(`INSERT INTO keys VALUES ('gamma', '${'c'.repeat(64)}', 'management', 'org_gamma')`)
    await admin.query('COMMIT')
    const { installed: after } = await installed(next())
    expect(after.organizations.map((organization) => organization.id)).toEqual(['org_alpha', 'org_beta', 'org_gamma'])
    expect(after.keys.map((key) => key.name)).toContain('gamma')
    const res = await app.inject({ url: '/v1/organization/members', headers: bearer(KEYS.betaManagement) })
    expect(res.statusCode).toBe(200)
  })

  it('reads every organization again when the list of those changed is too long to notify', async () => {
    const { next } = await follow()
    // 300 organizations with 40-character ids: their list does not fit the 8000-byte payload.
    await admin.query(`INSERT INTO organizations (id, name) SELECT 'org_' || lpad(i::text, 36, '0'), 'Org ' || i FROM generate_series(1, 300) AS i`)
    await installed(next())
    await admin.query(`INSERT INTO members (organization_id, id, email, role)
      SELECT 'org_' || lpad(i::text, 36, '0'), 'm', 'm@x.example', 'org:admin' FROM generate_series(1, 300) AS i`)
    const { installed: after, change } = await installed(next())
    expect(change).toBe('members changed')
    expect(after.organizations).toHaveLength(302)
    expect(after.organizations.slice(2).every((organization) => organization.members.length === 1)).toBe(true)
  })

  it('keeps serving the last good data when a row breaks a rule SQL cannot say, names the row, and takes the fix', async () => {
    const { app, next } = await follow()
    const before = await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })
    await admin.query("UPDATE providers SET headquarters = 'ZZ' WHERE slug = 'provider-2'")
    const { refused: error, change } = await refused(next())
    expect(change).toBe('providers changed')
    expect(error.message).toBe('table providers, row slug "provider-2": headquarters: "ZZ" is not an ISO 3166-1 alpha-2 code')
    const during = await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })
    expect(during.body).toBe(before.body)
    expect(during.headers.etag).toBe(before.headers.etag)

    await admin.query("UPDATE providers SET headquarters = 'DE' WHERE slug = 'provider-2'")
    await installed(next())
    const after = await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })
    expect(after.json().data[1].headquarters).toBe('DE')
    expect(after.headers.etag).not.toBe(before.headers.etag)
  })

  it('names the member row a bad change is in', async () => {
    const { next } = await follow()
    // A database whose operator dropped a constraint: the replicas still check.
    await admin.query('ALTER TABLE members DROP CONSTRAINT members_email_check')
    await admin.query("UPDATE members SET email = 'a@b.c d' WHERE organization_id = 'org_beta' AND id = 'user_beta_1'")
    const { refused: error } = await refused(next())
    expect(error.message).toBe('table members, row organization_id "org_beta", id "user_beta_1": email: "a@b.c d" is not an e-mail address')
  })

  it('reads everything again on reload()', async () => {
    const source = createPostgresSource({ url, connectTimeoutMs: 0 })
    sources.push(source)
    await source.load()
    const reloaded = new Promise<string>((resolve, reject) => source.watch({ install: (_data, change) => resolve(change), reject }))
    source.reload()
    expect(await reloaded).toBe('full read')
  })
})
