import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, afterEach, describe, expect, it } from 'vitest'
import { createLifecycle, type Lifecycle } from '../../src/repositories/lifecycle.js'
import { createFileSource, DATA_FILES } from '../../src/repositories/sources/files.js'
import { createPostgresSource } from '../../src/repositories/sources/postgres.js'
import type { DirectoryData } from '../../src/repositories/records.js'
import { KEYS, bearer, build, makeData, watchLifecycle } from '../helper.js'
import { databaseWith, sharedPostgres } from '../postgres.js'

// Keys that expire, read from either source: expired at start, expiring while served with no change
// to any file or row, and values the schema refuses. The clock is moved, never waited for.

const server = sharedPostgres()
afterAll(() => server.close())

const lifecycles: Lifecycle[] = []
const folders: string[] = []
afterEach(async () => {
  await Promise.all(lifecycles.splice(0).map((lifecycle) => lifecycle.close()))
  await Promise.all(folders.splice(0).map((dir) => rm(dir, { recursive: true, force: true })))
})

/** The test data with alpha-standard expiring at `expiresAt`. */
const dataExpiring = (expiresAt: string): DirectoryData => {
  const data = makeData()
  return { ...data, keys: data.keys.map((key) => key.name === 'alpha-standard' ? { ...key, expires_at: expiresAt } : key) }
}

/** A replica over `data`: a folder of files, or a PostgreSQL database imported from them. */
const sources: Array<[string, (data: DirectoryData) => Promise<Lifecycle>]> = [
  ['files', async (data) => {
    const dir = await mkdtemp(join(tmpdir(), 'expiry-'))
    folders.push(dir)
    for (const [kind, file] of Object.entries(DATA_FILES)) await writeFile(join(dir, file), JSON.stringify(data[kind as keyof DirectoryData]))
    return createLifecycle(createFileSource(dir))
  }],
  ['PostgreSQL', async (data) => {
    const { url, client } = await databaseWith(server, data)
    await client.end()
    return createLifecycle(createPostgresSource({ url, connectTimeoutMs: 0 }))
  }]
]

describe.each(sources)('keys that expire, from %s', (_source, replicaOf) => {
  it('refuses at start a key whose expiry has passed, and serves the others', async () => {
    const lifecycle = await replicaOf(dataExpiring('2020-01-01T00:00:00Z'))
    lifecycles.push(lifecycle)
    await lifecycle.load()
    const app = build({ snapshots: lifecycle })
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).json()).toEqual({ error: { code: 401, message: 'This API key has expired' } })
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaManagement) })).statusCode).toBe(200)
  })

  it('stops a key at its expiry while served, with no change to any file or row', async () => {
    const at = Date.parse('2031-05-01T12:00:00Z')
    const lifecycle = await replicaOf(dataExpiring('2031-05-01T14:00:00+02:00'))
    lifecycles.push(lifecycle)
    await lifecycle.load()
    let now = at - 1
    const app = build({ snapshots: lifecycle, clock: () => now })
    const version = lifecycle.info().version
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(200)
    now = at
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(401)
    expect(lifecycle.info().version).toBe(version)
  })
})

describe('bad expiries in keys.json', () => {
  it.each([
    ['malformed', 'next tuesday'],
    ['without a time zone', '2026-12-31T23:59:59'],
    ['in the year 10000', '10000-01-01T00:00:00Z'],
    ['on a day the calendar lacks', '2026-02-30T00:00:00Z']
  ])('refuses one %s, naming the file, the record and the field', async (_case, value) => {
    const lifecycle = await sources[0]![1](dataExpiring(value))
    lifecycles.push(lifecycle)
    await expect(lifecycle.load()).rejects.toThrow(`keys.json: [1].expires_at: ${JSON.stringify(value)} is not an RFC 3339 timestamp with a time zone (2026-12-31T23:59:59Z)`)
  })
})

describe('an expiry set in PostgreSQL', () => {
  it('reaches two replicas before its instant, and stops the key on both at that instant', async () => {
    const { url, client: admin } = await databaseWith(server, makeData())
    try {
      const replicas = await Promise.all([0, 1].map(async () => {
        const lifecycle = createLifecycle(createPostgresSource({ url, connectTimeoutMs: 0 }))
        lifecycles.push(lifecycle)
        await lifecycle.load()
        return { lifecycle, ...watchLifecycle(lifecycle) }
      }))
      const { rows: [{ at }] } = await admin.query("UPDATE keys SET expires_at = now() + interval '3 seconds' WHERE name = 'alpha-standard' RETURNING (extract(epoch FROM expires_at) * 1000)::float8 AS at")
      const instant = Number(at)
      for (const replica of replicas) {
        await replica.until((data) => data.keys.some((key) => key.name === 'alpha-standard' && key.expires_at !== undefined))
        expect(Date.now()).toBeLessThan(instant)
        let now = instant - 1
        const app = build({ snapshots: replica.lifecycle, clock: () => now })
        expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(200)
        now = instant
        expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(401)
      }
      // A value the schema refuses (a year of five digits) is named by table, row and field.
      const { refusal } = replicas[0]!
      await admin.query("UPDATE keys SET expires_at = '10000-01-01T00:00:00Z' WHERE name = 'beta-management'")
      expect(await refusal()).toEqual({ kind: 'keys', problem: 'table keys, row name "beta-management": expires_at: "10000-01-01T00:00:00Z" is not an RFC 3339 timestamp with a time zone (2026-12-31T23:59:59Z)' })
    } finally {
      await admin.end()
    }
  })
})
