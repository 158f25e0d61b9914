import { readFile } from 'node:fs/promises'
import pg from 'pg'
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { createLifecycle, type Lifecycle } from '../../../src/repositories/lifecycle.js'
import { createPostgresSource } from '../../../src/repositories/sources/postgres.js'
import { migrate } from '../../../src/repositories/sources/postgres-schema.js'
import { replaceDirectory } from '../../../src/repositories/sources/postgres-write.js'
import { bearer, build, KEYS, makeData, watchLifecycle } from '../../helper.js'
import { startPostgres, type PostgresServer } from '../../postgres.js'
import { startServer, type RunningServer } from '../../process.js'

// The edges of what PostgreSQL lets a writer put in the tables (issue 38): values of any size.

let server: PostgresServer
beforeAll(async () => { server = await startPostgres() })
afterAll(() => server?.close())

let url: string
let admin: pg.Client
const lifecycles: Lifecycle[] = []
beforeEach(async () => {
  url = await server.createDatabase()
  admin = new pg.Client({ connectionString: url })
  await admin.connect()
  await migrate(admin)
  await replaceDirectory(admin, makeData())
})
afterEach(async () => {
  await Promise.all(lifecycles.splice(0).map((lifecycle) => lifecycle.close()))
  await admin.end()
})

/** A replica of the test database, loaded and followed, and an app serving it. */
async function follow () {
  const lifecycle = createLifecycle(createPostgresSource({ url, connectTimeoutMs: 0 }))
  lifecycles.push(lifecycle)
  await lifecycle.load()
  return { lifecycle, app: build({ snapshots: lifecycle }), ...watchLifecycle(lifecycle) }
}

const status = async (app: ReturnType<typeof build>, path: string, key: string) => (await app.inject({ url: path, headers: bearer(key) })).statusCode

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
  ])('leave %s unread, in a change and in a whole read, and refuse its record alone', async (_case, sql, refused) => {
    const { app, lifecycle, refusal } = await follow()
    await admin.query(sql)
    expect(await refusal()).toEqual(refused)
    // Read whole, as at a start: COPY took minutes to join a row of 50 MB, past the statement timeout.
    const started = performance.now()
    lifecycle.reload()
    expect(await refusal()).toEqual(refused)
    expect(performance.now() - started).toBeLessThan(5000)
    // The other records serve on.
    expect(await status(app, '/v1/organization/members', KEYS.alphaManagement)).toBe(200)
    expect(await status(app, '/v1/providers', KEYS.betaManagement)).toBe(200)
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

  it('leaves a running server up, its memory as it was, and refuses that document alone', async () => {
    const running = await startServer({ DATABASE_URL: url })
    servers.push(running)
    const before = await memory(running)
    // What an operator's one statement can write: PostgreSQL takes up to 1 GB in a value.
    await admin.query("UPDATE providers SET document = json_build_object('name', repeat('x', 600000000), 'slug', 'provider-2') WHERE slug = 'provider-2'")
    await expect.poll(() => running.output(), { timeout: 30_000 }).toContain('"change refused')
    expect(running.output()).toContain('"problem":"table providers, row slug \\"provider-2\\": document: 600000036 bytes, over the limit of 8388608 (not read)"')
    const res = await fetch(`${running.url}/v1/providers`, { headers: bearer(KEYS.alphaStandard) })
    expect(res.status).toBe(200)
    expect(((await res.json()) as { data: Array<{ slug: string }> }).data.map((provider) => provider.slug)).toEqual(['provider-1', 'provider-2', 'provider-3'])
    const after = await memory(running)
    // Before: the row buffered to 1.84 GB, then a string too long for V8, and the process ended.
    expect(after.peak).toBeLessThan(before.peak + 100)
    console.log(`a server beside a document of 600 MB: ${JSON.stringify({ before, after })}`)
  }, 180_000)
})
