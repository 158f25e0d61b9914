// A kind of record is one registry entry: this file registers one (regions: a schema and a file
// made for the test), and every source, command, count and fingerprint takes it, with no other
// change to src/. Only records.js is imported before the registration; every module that reads the
// registry is loaded after it.
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { Type } from '@sinclair/typebox'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { KINDS, RECORD_KINDS, countRecords, describeCounts, registerKind, type DirectoryData } from '../../src/repositories/records.js'

const RegionSchema = Type.Object({
  code: Type.String({ pattern: '^[a-z]{2}-[a-z]+$' }),
  name: Type.String({ minLength: 1 })
}, { additionalProperties: false })
registerKind('regions', { schema: RegionSchema, file: 'regions.json', table: 'regions', key: 'code', unique: ['code'], held: 'list' })

const { createLifecycle } = await import('../../src/repositories/lifecycle.js')
const { createFileSource, loadFixtures } = await import('../../src/repositories/sources/files.js')
const { createPostgresSource } = await import('../../src/repositories/sources/postgres.js')
const { migrate } = await import('../../src/repositories/sources/postgres-schema.js')
const { replaceDirectory } = await import('../../src/repositories/sources/postgres-write.js')
const { exportDirectory } = await import('../../src/repositories/sources/postgres-export.js')
const { readRecordBatches } = await import('../../src/repositories/sources/file-stream.js')
const { makeData, watchLifecycle } = await import('../helper.js')
const { startPostgres } = await import('../postgres.js')

type Region = { code: string, name: string }
type WithRegions = DirectoryData & { regions: Region[] }
const regions = (...names: string[]): Region[] => names.map((name) => ({ code: `eu-${name.toLowerCase()}`, name }))
const dataWith = (list: Region[]) => ({ ...makeData(), regions: list }) as WithRegions
const served = (lifecycle: { current(): { indexes: object } }) => (lifecycle.current().indexes as Record<string, { records: Region[] }>).regions!.records

const lifecycles: Array<{ close(): Promise<void> }> = []
afterEach(async () => { await Promise.all(lifecycles.splice(0).map((lifecycle) => lifecycle.close())) })

it('is in the registry every source and command walks', () => {
  expect(RECORD_KINDS).toContain('regions')
  expect(describeCounts(countRecords(dataWith(regions('West', 'North')) as DirectoryData))).toBe('3 providers, 2 endpoints, 2 organizations with 253 members, 4 keys, 2 regions')
  expect((KINDS as Record<string, { file: string }>).regions!.file).toBe('regions.json')
})

describe('an extra kind from files', () => {
  let dir: string
  beforeAll(async () => { dir = await mkdtemp(join(tmpdir(), 'extra-kind-')) })
  afterAll(() => rm(dir, { recursive: true, force: true }))
  const write = (data: Record<string, unknown>) => Promise.all(RECORD_KINDS.map((kind) =>
    writeFile(join(dir, (KINDS as Record<string, { file: string }>)[kind]!.file), JSON.stringify(data[kind]))))

  it('is loaded, counted, fingerprinted, changed live and refused when bad, its last good records serving on', async () => {
    await write(dataWith(regions('West')))
    expect((await loadFixtures(dir) as WithRegions).regions).toEqual(regions('West'))
    // What `npm run db -- import` reads.
    const imported: unknown[] = []
    for await (const records of readRecordBatches(dir, 'regions' as never)) imported.push(...records)
    expect(imported).toEqual(regions('West'))
    const lifecycle = createLifecycle(createFileSource(dir))
    lifecycles.push(lifecycle)
    await lifecycle.load()
    const { refusal } = watchLifecycle(lifecycle)
    expect(lifecycle.current().counts()).toMatchObject({ regions: 1 })
    const before = lifecycle.current().fingerprint

    await writeFile(join(dir, 'regions.json'), JSON.stringify(regions('West', 'North')))
    await expect.poll(() => served(lifecycle).length).toBe(2)
    expect(lifecycle.current().counts()).toMatchObject({ regions: 2 })
    expect(lifecycle.current().fingerprint).not.toBe(before)

    await writeFile(join(dir, 'regions.json'), JSON.stringify([{ code: 'Nowhere', name: 'X' }]))
    expect(await refusal()).toEqual({ kind: 'regions', problem: `regions.json: [0].code: "Nowhere": expected string to match '^[a-z]{2}-[a-z]+$'` })
    expect(served(lifecycle)).toEqual(regions('West', 'North'))

    await writeFile(join(dir, 'regions.json'), JSON.stringify([...regions('West'), ...regions('West')]))
    expect(await refusal()).toEqual({ kind: 'regions', problem: 'regions.json: [1].code: "eu-west" duplicates [0].code' })
  })
})

describe('an extra kind in PostgreSQL', () => {
  let server: Awaited<ReturnType<typeof startPostgres>>
  beforeAll(async () => { server = await startPostgres() })
  afterAll(() => server?.close())

  it('gets its table from migrate, is imported and exported, counted, fingerprinted, changed live and refused when bad', async () => {
    const url = await server.createDatabase()
    const admin = new pg.Client({ connectionString: url })
    await admin.connect()
    try {
      await migrate(admin)
      const data = dataWith(regions('West', 'North'))
      await replaceDirectory(admin, data)
      // What `npm run db -- export` writes.
      const exported: Record<string, unknown[]> = {}
      await exportDirectory(admin, { async write (kind, record) { (exported[kind] ??= []).push(record) }, refuse () {} })
      expect(exported.regions).toStrictEqual(data.regions)

      const lifecycle = createLifecycle(createPostgresSource({ url, connectTimeoutMs: 0 }))
      lifecycles.push(lifecycle)
      await lifecycle.load()
      const { refusal } = watchLifecycle(lifecycle)
      expect(lifecycle.current().counts()).toMatchObject({ regions: 2 })
      const before = lifecycle.current().fingerprint

      // The operator's one statement.
      await admin.query("UPDATE regions SET document = '{\"code\": \"eu-north\", \"name\": \"Nordics\"}' WHERE code = 'eu-north'")
      await expect.poll(() => served(lifecycle)[1]?.name).toBe('Nordics')
      expect(lifecycle.current().fingerprint).not.toBe(before)

      await admin.query("UPDATE regions SET document = '{\"code\": \"eu-north\", \"name\": \"\"}' WHERE code = 'eu-north'")
      expect(await refusal()).toEqual({ kind: 'regions', problem: 'table regions, row code "eu-north": name: "": expected string length greater or equal to 1' })
      // A row refused alone is left out of its list.
      await expect.poll(() => served(lifecycle)).toEqual(regions('West'))
    } finally {
      await admin.end()
    }
  })
})
