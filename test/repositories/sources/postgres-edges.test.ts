import { execFile } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { promisify } from 'node:util'
import pg from 'pg'
import { Value } from '@sinclair/typebox/value'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { createLifecycle } from '../../../src/repositories/lifecycle.js'
import { createPostgresSource } from '../../../src/repositories/sources/postgres.js'
import { KEY_CHECKS, SCHEMA_VERSION, migrate } from '../../../src/repositories/sources/postgres-schema.js'
import { ApiKeySchema, KEY_KINDS } from '../../../src/schemas/keys-and-organizations.js'
import { bearer, build, KEYS, makeData, sha256, watchLifecycle } from '../../helper.js'
import { checkOf, databasePerTest } from '../../postgres.js'
import { startServer, type RunningServer } from '../../process.js'
import { PATIENCE_MS } from '../../patience.js'

const run = promisify(execFile)

// The edges of what PostgreSQL lets a writer put in the tables (issue 38): values of any size, and
// rows the schemas refuse, which are not served, whenever a replica started.

let url: string
let admin: pg.Client
const { server, lifecycles } = databasePerTest((database) => ({ url, client: admin } = database), makeData)

/** A replica of the test database, loaded and followed, and an app serving it. */
async function follow () {
  const lifecycle = createLifecycle(createPostgresSource({ url, connectTimeoutMs: 0 }))
  lifecycles.push(lifecycle)
  await lifecycle.load()
  return { lifecycle, app: build({ snapshots: lifecycle }), ...watchLifecycle(lifecycle) }
}

const status = async (app: ReturnType<typeof build>, path: string, key: string) => (await app.inject({ url: path, headers: bearer(key) })).statusCode

/** What a user of each kind's record sees once the record is refused: the request, and what it answers. */
const LEFT_OUT = {
  keys: { path: '/v1/providers', key: KEYS.alphaStandard, status: 401 },
  // Refused, not absent: its keys' holders are told the server refused its data.
  organizations: { path: '/v1/organization/members', key: KEYS.betaManagement, status: 500 },
  providers: { path: '/v1/providers', key: KEYS.alphaManagement, status: 200, slugs: ['provider-1', 'provider-3'] }
}

async function expectLeftOut (app: ReturnType<typeof build>, kind: keyof typeof LEFT_OUT) {
  const { path, key, status: expected, slugs } = LEFT_OUT[kind] as (typeof LEFT_OUT)['providers']
  const res = await app.inject({ url: path, headers: bearer(key) })
  expect(res.statusCode, `${kind}: ${res.body}`).toBe(expected)
  if (slugs !== undefined) expect(res.json().data.map((provider: { slug: string }) => provider.slug)).toEqual(slugs)
  // The other records serve on.
  expect(await status(app, '/v1/organization/members', KEYS.alphaManagement)).toBe(200)
}

describe('values past the bounds their schemas set', () => {
  it.each([
    ['a key whose organization id holds 50 MB', "UPDATE keys SET organization_id = repeat('x', 50000000) WHERE name = 'alpha-standard'",
      { kind: 'keys', problem: 'table keys, row name "alpha-standard": organization_id: 50000000 bytes, over the limit of 768 (not read)' }],
    ['a member whose e-mail address holds 50 MB', "UPDATE members SET email = repeat('x', 50000000) WHERE organization_id = 'org_beta' AND id = 'user_beta_1'",
      { kind: 'organizations', problem: 'table members, row organization_id "org_beta", id "user_beta_1": email: 50000000 bytes, over the limit of 762 (not read)' }],
    ['an organization whose name holds 50 MB', "UPDATE organizations SET name = repeat('x', 50000000) WHERE id = 'org_beta'",
      { kind: 'organizations', problem: 'table organizations, row id "org_beta": name: 50000000 bytes, over the limit of 3072 (not read)' }],
    ['a provider whose document holds 9 MB', "UPDATE providers SET document = json_build_object('name', repeat('x', 9000000), 'slug', 'provider-2', 'privacy_policy_url', null) WHERE slug = 'provider-2'",
      { kind: 'providers', problem: 'table providers, row slug "provider-2": document: 9000065 bytes, over the limit of 8388608 (not read)' }]
  ] as const)('leave %s unread, in a change, a whole read and a start, and refuse its record alone', async (_case, sql, refused) => {
    const { app, lifecycle, refusal } = await follow()
    await admin.query(sql)
    expect(await refusal()).toEqual(refused)
    await expectLeftOut(app, refused.kind)
    // Read whole, as at a start: COPY took minutes to join a row of 50 MB, past the statement timeout.
    let started = performance.now()
    lifecycle.reload()
    expect(await refusal()).toEqual(refused)
    expect(performance.now() - started).toBeLessThan(10_000)
    // A replica starts beside it.
    started = performance.now()
    const fresh = await follow()
    expect(performance.now() - started).toBeLessThan(10_000)
    expect(await fresh.refusal()).toEqual(refused)
    await expectLeftOut(fresh.app, refused.kind)
  })

  it('leave a key whose name is past its bound unread, named by its start', async () => {
    const { lifecycle, refusal, installs } = await follow()
    await admin.query(`INSERT INTO keys VALUES (repeat('k', 2000), '${'a'.repeat(64)}', 'standard', 'org_alpha')`)
    // The change log's entry names no key that can be served: nothing to read.
    await admin.query("DELETE FROM keys WHERE name = 'alpha-standard'")
    await installs(1)
    lifecycle.reload()
    const { problem } = await refusal()
    expect(problem).toBe(`table keys, row name "${'k'.repeat(79)}…: name: 2000 bytes, over the limit of 768 (not read)`)
  })
})

// Keys fail closed: a value the schema refuses is a common way to disable a credential by hand.
describe('key rows the schema refuses', () => {
  // Written where the database does not refuse them (before schema 7, or with its checks dropped).
  beforeEach(() => admin.query('ALTER TABLE keys DROP CONSTRAINT IF EXISTS keys_kind_check, DROP CONSTRAINT IF EXISTS keys_sha256_check'))

  it.each([
    ["kind 'revoked'", "UPDATE keys SET kind = 'revoked' WHERE name = 'alpha-standard'", 'kind: "revoked" is not one of "standard", "management"'],
    ["sha256 ''", "UPDATE keys SET sha256 = '' WHERE name = 'alpha-standard'", 'sha256: is not a lowercase hex SHA-256'],
    ['sha256 in capitals', "UPDATE keys SET sha256 = upper(sha256) WHERE name = 'alpha-standard'", 'sha256: is not a lowercase hex SHA-256']
  ])('a key set to %s answers 401 at once on a running replica, is logged and counted, and a replica starts beside it', async (_case, sql, problem) => {
    const { app, refusal } = await follow()
    expect(await status(app, '/v1/providers', KEYS.alphaStandard)).toBe(200)
    await admin.query(sql)
    const committed = performance.now()
    // Before: the key kept its last good version, and answered 200 for as long as the row stayed bad.
    await expect.poll(() => status(app, '/v1/providers', KEYS.alphaStandard), { timeout: PATIENCE_MS, interval: 5 }).toBe(401)
    expect(performance.now() - committed).toBeLessThan(1000)
    expect(await refusal()).toEqual({ kind: 'keys', problem: `table keys, row name "alpha-standard": ${problem}` })
    const res = await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })
    expect(res.json()).toEqual({ error: { code: 401, message: expect.any(String) } })
    expect((await app.inject({ url: '/metrics' })).body).toContain('directory_changes_total{kind="keys",outcome="failed"} 1')
    expect(await status(app, '/v1/providers', KEYS.alphaManagement)).toBe(200)

    // Before: `cannot start: table keys, row name "alpha-standard": ...`.
    const fresh = await follow()
    expect(await fresh.refusal()).toEqual({ kind: 'keys', problem: `table keys, row name "alpha-standard": ${problem}` })
    expect(await status(fresh.app, '/v1/providers', KEYS.alphaStandard)).toBe(401)
    expect(await status(fresh.app, '/v1/organization/members', KEYS.alphaManagement)).toBe(200)
    expect((await fresh.app.inject({ url: '/metrics' })).body).toContain('directory_changes_total{kind="keys",outcome="failed"} 1')

    // Fixed, the key is served again.
    await admin.query(`UPDATE keys SET kind = 'standard', sha256 = '${sha256(KEYS.alphaStandard)}' WHERE name = 'alpha-standard'`)
    await expect.poll(() => status(app, '/v1/providers', KEYS.alphaStandard), { timeout: PATIENCE_MS }).toBe(200)
  })
})

describe('schema 7: what the database checks of a key at write time', () => {
  it.each([
    ["kind 'revoked'", "UPDATE keys SET kind = 'revoked' WHERE name = 'alpha-standard'", 'keys_kind_check'],
    ['a kind of 50 MB', "UPDATE keys SET kind = repeat('x', 50000000) WHERE name = 'alpha-standard'", 'keys_kind_check'],
    ["sha256 ''", "UPDATE keys SET sha256 = '' WHERE name = 'alpha-standard'", 'keys_sha256_check'],
    ['sha256 in capitals', "UPDATE keys SET sha256 = upper(sha256) WHERE name = 'alpha-standard'", 'keys_sha256_check']
  ])('refuses a key set to %s, naming the check', async (_case, sql, constraint) => {
    await expect(admin.query(sql)).rejects.toMatchObject({ constraint, message: `new row for relation "keys" violates check constraint "${constraint}"` })
  })

  it('holds the checks migration 7 wrote equal to what the key\'s schema makes today: a change of the schema needs a migration', async () => {
    const generated = [checkOf('keys', ApiKeySchema, 'kind'), checkOf('keys', ApiKeySchema, 'sha256')]
    expect(KEY_CHECKS).toEqual(generated)
    // The database's, as migration 7's text made them, against the same made from the schema today.
    await admin.query(`CREATE TEMP TABLE keys_generated (kind text, sha256 text,
      ${generated.map(({ name, check }) => `CONSTRAINT ${name} CHECK (${check})`).join(', ')})`)
    // Migration 7's: the checks of later columns (schema 11) are theirs.
    const definitions = async (table: string) => (await admin.query(`SELECT conname, pg_get_constraintdef(oid) AS definition FROM pg_constraint
      WHERE conrelid = $1::regclass AND contype = 'c' AND conname = ANY($2) ORDER BY conname`, [table, KEY_CHECKS.map(({ name }) => name)])).rows
    expect(await definitions('keys')).toEqual(await definitions('keys_generated'))
  })

  it('takes the kinds and hashes the schema takes, and no other, its checks validated', async () => {
    const valid = sha256('a key')
    const samples = {
      kind: [...KEY_KINDS, 'revoked', 'Standard', 'standard ', ''],
      sha256: [valid, valid.toUpperCase(), `${valid.slice(0, 63)}G`, valid.slice(1), `${valid}0`, ` ${valid.slice(1)}`, 'é'.repeat(64), `${valid.slice(0, 63)}\n`, '']
    }
    for (const [field, values] of Object.entries(samples) as Array<[keyof typeof samples, string[]]>) {
      for (const value of values) {
        const key = { name: 'sample', sha256: sha256('sample'), kind: 'standard', organization_id: 'org_alpha', [field]: value }
        const taken = await admin.query('INSERT INTO keys (name, sha256, kind, organization_id) VALUES ($1, $2, $3, $4)', [key.name, key.sha256, key.kind, key.organization_id])
          .then(() => true, () => false)
        await admin.query("DELETE FROM keys WHERE name = 'sample'")
        expect(taken, `${field} ${JSON.stringify(value)}`).toBe(Value.Check(ApiKeySchema.properties[field], value))
      }
    }
    const { rows } = await admin.query("SELECT conname, convalidated FROM pg_constraint WHERE conrelid = 'keys'::regclass AND contype = 'c' AND conname IN ('keys_kind_check', 'keys_sha256_check') ORDER BY conname")
    expect(rows).toEqual([{ conname: 'keys_kind_check', convalidated: true }, { conname: 'keys_sha256_check', convalidated: true }])
  })

  it('migrates a database whose keys already break the checks, says so, and validates them at a migrate once the rows are fixed', async () => {
    const legacyUrl = await server.createDatabase()
    const legacy = new pg.Client({ connectionString: legacyUrl })
    await legacy.connect()
    const migrateCommand = () => run(process.execPath, ['dist/cli/db.js', 'migrate'], { env: { PATH: process.env.PATH ?? '', DATABASE_URL: legacyUrl } })
    try {
      expect(await migrate(legacy, 6)).toEqual([1, 2, 3, 4, 5, 6])
      await legacy.query(`INSERT INTO keys VALUES ('revoked-by-hand', '${sha256('revoked')}', 'revoked', 'org_alpha'), ('good', '${sha256('good')}', 'standard', 'org_alpha')`)
      const { stderr } = await migrateCommand()
      const warning = "warning: rows of table keys that break keys_kind_check (kind IN ('standard', 'management')): 1. The replicas do not serve them, and new ones are refused; fix or delete them, then run npm run db -- migrate again to validate the check"
      expect(stderr).toBe(`${warning}\nmigrated ${legacyUrl}: applied version ${Array.from({ length: SCHEMA_VERSION - 6 }, (_, i) => i + 7).join(', ')}\n`)
      const collapse = (text: string) => text.replace(/\s+/g, ' ')
      expect(collapse(await readFile('docs/postgresql.md', 'utf8'))).toContain(warning)
      const validated = async () => (await legacy.query("SELECT conname, convalidated FROM pg_constraint WHERE conrelid = 'keys'::regclass AND contype = 'c' AND conname IN ('keys_kind_check', 'keys_sha256_check') ORDER BY conname")).rows
      expect(await validated()).toEqual([{ conname: 'keys_kind_check', convalidated: false }, { conname: 'keys_sha256_check', convalidated: true }])
      // New writes are checked all the same.
      await expect(legacy.query("UPDATE keys SET kind = 'revoked' WHERE name = 'good'")).rejects.toMatchObject({ constraint: 'keys_kind_check' })
      await legacy.query("DELETE FROM keys WHERE name = 'revoked-by-hand'")
      expect((await migrateCommand()).stderr).toBe(`${legacyUrl} is up to date\n`)
      expect(await validated()).toEqual([{ conname: 'keys_kind_check', convalidated: true }, { conname: 'keys_sha256_check', convalidated: true }])
    } finally {
      await legacy.end()
    }
  })

  it('keeps the reads and the key writes of the release before it working', async () => {
    // As the release at schema 6 (9baefe1) sends them.
    expect((await admin.query('SELECT id, document FROM providers ORDER BY position, id')).rows.map(({ document }) => document.slug)).toEqual(['provider-1', 'provider-2', 'provider-3'])
    expect((await admin.query("SELECT name, sha256, kind, organization_id, to_json(expires_at) #>> '{}' FROM keys")).rowCount).toBe(4)
    expect((await admin.query('SELECT id, name FROM organizations ORDER BY position, id')).rowCount).toBe(2)
    expect((await admin.query('SELECT organization_id, id, email, first_name, last_name, role FROM members ORDER BY organization_id, position, id')).rowCount).toBe(253)
    await admin.query('INSERT INTO keys (name, sha256, kind, organization_id, expires_at) VALUES ($1, $2, $3, $4, $5)', ['minted', sha256('minted'), 'standard', 'org_alpha', null])
    await admin.query('INSERT INTO providers (position, document) SELECT position - 1, document FROM json_array_elements($1::json) WITH ORDINALITY AS records (document, position)', [JSON.stringify([{ name: 'P', slug: 'p', privacy_policy_url: null }])])
    expect((await admin.query("SELECT document_bytes::int AS bytes FROM providers WHERE slug = 'p'")).rows).toEqual([{ bytes: 49 }])
  })
})

describe('a replica started beside rows the schemas refuse', () => {
  it('serves every other record, leaves out those refused alone, and logs each', async () => {
    await admin.query(`UPDATE providers SET document = (document::jsonb || '{"headquarters": "ZZ"}')::json WHERE slug = 'provider-2'`)
    await admin.query("UPDATE members SET email = 'not an address' WHERE organization_id = 'org_beta' AND id = 'user_beta_1'")
    await admin.query('ALTER TABLE keys DROP CONSTRAINT IF EXISTS keys_kind_check')
    await admin.query("UPDATE keys SET kind = 'revoked' WHERE name = 'alpha-standard'")
    const { app, refusal } = await follow()
    const refusals = [await refusal(), await refusal(), await refusal()]
    expect(refusals).toEqual([
      { kind: 'providers', problem: 'table providers, row slug "provider-2": headquarters: "ZZ" is not an ISO 3166-1 alpha-2 code' },
      { kind: 'organizations', problem: 'table members, row organization_id "org_beta", id "user_beta_1": email: "not an address" is not an e-mail address' },
      { kind: 'keys', problem: 'table keys, row name "alpha-standard": kind: "revoked" is not one of "standard", "management"' }
    ])
    for (const kind of ['keys', 'organizations', 'providers'] as const) await expectLeftOut(app, kind)
    const res = await app.inject({ url: '/v1/organization/members', headers: bearer(KEYS.betaManagement) })
    expect(res.json()).toEqual({ error: { code: 500, message: "Organization org_beta cannot be served: the server refused its data (more members than it may have, or a member record that is not valid); the server's log says why" } })
  })
})

describe('a document of 600 MB', () => {
  const servers: RunningServer[] = []
  afterEach(async () => {
    for (const running of servers.splice(0)) {
      running.process.kill('SIGTERM')
      await running.exited
    }
  })

  /** The server's resident memory now and at its peak, in MB (Linux). */
  async function memory ({ process: child }: RunningServer) {
    const status = await readFile(`/proc/${child.pid}/status`, 'utf8')
    const mb = (field: string) => Math.round(Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)![1]) / 1024)
    return { rss: mb('VmRSS'), peak: mb('VmHWM') }
  }

  /** The slugs of the providers a server lists. */
  async function slugs (running: RunningServer) {
    const res = await fetch(`${running.url}/v1/providers`, { headers: bearer(KEYS.alphaStandard) })
    expect(res.status).toBe(200)
    return ((await res.json()) as { data: Array<{ slug: string }> }).data.map((provider) => provider.slug)
  }

  it('leaves a running server up, its memory as it was, refuses that document alone, and a server starts beside it', async () => {
    const running = await startServer({ DATABASE_URL: url })
    servers.push(running)
    const before = await memory(running)
    // What an operator's one statement can write: PostgreSQL takes up to 1 GB in a value.
    await admin.query("UPDATE providers SET document = json_build_object('name', repeat('x', 600000000), 'slug', 'provider-2') WHERE slug = 'provider-2'")
    const problem = '"problem":"table providers, row slug \\"provider-2\\": document: 600000036 bytes, over the limit of 8388608 (not read)"'
    await expect.poll(() => running.output(), { timeout: PATIENCE_MS }).toContain(problem)
    expect(await slugs(running)).toEqual(['provider-1', 'provider-3'])
    // Before: the row buffered to 1.84 GB, then a string too long for V8, and the process ended.
    const after = await memory(running)
    expect(after.peak).toBeLessThan(before.peak + 100)

    // Before: every start read the row, and ended the same way.
    const beside = await startServer({ DATABASE_URL: url })
    servers.push(beside)
    await expect.poll(() => beside.output(), { timeout: PATIENCE_MS }).toContain(problem)
    expect(await slugs(beside)).toEqual(['provider-1', 'provider-3'])
    expect((await memory(beside)).peak).toBeLessThan(before.peak + 100)
  })
})
