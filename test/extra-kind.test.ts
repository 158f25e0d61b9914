// A public list operation is one entry of the registry: this file hands in a registry with one more
// (specimens, a name no real kind takes (test/kinds.test.ts): a schema, an operation and a file made for the test), and every source, command, count,
// fingerprint, route, GET /, the OpenAPI document and what npm run docs writes take it, with no other
// change to src/. The
// registry is src/kinds.ts, the one module that holds it, replaced here for every module that loads it.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest'
import type { DirectoryData } from '../src/repositories/records.js'

vi.mock('../src/kinds.js', async (importOriginal) => {
  const { Type } = await import('@sinclair/typebox')
  const { KINDS } = await importOriginal<typeof import('../src/kinds.js')>()
  const SpecimenSchema = Type.Object({
    id: Type.String({ maxLength: 256, pattern: '^[^/\\s]+/[^\\s]+$', description: 'Identifier of the specimen, vendor/specimen' }),
    name: Type.String({ minLength: 1, maxLength: 1024, description: 'Display name of the specimen' }),
    context_length: Type.Integer({ minimum: 0, description: 'Maximum context length, in tokens' })
  }, { $id: 'Specimen', additionalProperties: false, description: 'A specimen', examples: [{ id: 'vendor/specimen', name: 'Vendor: Specimen', context_length: 8192 }] })
  const specimens = {
    schema: SpecimenSchema,
    file: 'specimens.json',
    table: 'specimens',
    key: 'id',
    unique: ['id'],
    index: 'list',
    operation: {
      path: '/specimens',
      operationId: 'listSpecimens',
      tag: { name: 'Specimens', description: 'The specimens the gateway routes to' },
      summary: 'List all specimens',
      // No method of the official SDK calls it: the kind is this test's own.
      sdk: null,
      description: 'Lists the specimens the gateway routes to.',
      listDescription: 'The specimens, in the order of the data file'
    }
  }
  return { KINDS: { ...KINDS, specimens } }
})

// test/setup.ts loaded the app and the registry before this file: every module is loaded again, with
// the registry above.
vi.resetModules()
const { KINDS, RECORD_KINDS } = await import('../src/registry.js')
const { countRecords, describeCounts } = await import('../src/repositories/records.js')
const { createLifecycle } = await import('../src/repositories/lifecycle.js')
const { createFileSource, loadDataFolder } = await import('../src/repositories/sources/files.js')
const { createPostgresSource } = await import('../src/repositories/sources/postgres.js')
const { SCHEMA_VERSION, listTableSql, migrate } = await import('../src/repositories/sources/postgres-schema.js')
const { replaceDirectory } = await import('../src/repositories/sources/postgres-write.js')
const { exportDirectory } = await import('../src/repositories/sources/postgres-export.js')
const { readRecordBatches } = await import('../src/repositories/sources/file-stream.js')
const { bearer, build, copyWhatDocsRead, KEYS, makeData, watchLifecycle } = await import('./helper.js')
const { takeConformanceFailures } = await import('./conformance.js')
const { generateDocs } = await import('../src/docs/generate.js')
const { sharedPostgres } = await import('./postgres.js')

// What test/setup.ts does for the modules it loaded: the answers of the app built here match its OpenAPI document.
afterEach(() => { expect(takeConformanceFailures()).toEqual([]) })

type Specimen = { id: string, name: string, context_length: number }
type WithSpecimens = DirectoryData & { specimens: Specimen[] }
const specimens = (...names: string[]): Specimen[] => names.map((name) => ({ id: `vendor/${name.toLowerCase()}`, name, context_length: 8192 }))
const dataWith = (list: Specimen[]) => ({ ...makeData(), specimens: list }) as WithSpecimens
const served = (lifecycle: { current(): { indexes: object } }) => (lifecycle.current().indexes as Record<string, { records: Specimen[] }>).specimens!.records

const lifecycles: Array<{ close(): Promise<void> }> = []
afterEach(async () => { await Promise.all(lifecycles.splice(0).map((lifecycle) => lifecycle.close())) })

it('is in the registry every source and command walks', () => {
  expect(RECORD_KINDS).toContain('specimens')
  expect(describeCounts(countRecords(dataWith(specimens('Alpha', 'Beta')) as DirectoryData))).toBe('3 providers, 2 endpoints, 2 organizations with 253 members, 4 keys, 2 specimens')
  expect((KINDS as Record<string, { file: string }>).specimens!.file).toBe('specimens.json')
})

describe('GET /v1/specimens, an operation of the registry alone', () => {
  const app = build({ data: dataWith(specimens('Alpha', 'Beta')) as DirectoryData })

  it('answers the list with any key, its ETag, and a 304 for that ETag', async () => {
    const response = await app.inject({ url: '/v1/specimens', headers: bearer(KEYS.alphaStandard) })
    expect(response.statusCode).toBe(200)
    expect(response.json()).toEqual({ data: specimens('Alpha', 'Beta') })
    const again = await app.inject({ url: '/v1/specimens', headers: { ...bearer(KEYS.alphaStandard), 'if-none-match': response.headers.etag as string } })
    expect(again.statusCode).toBe(304)
    expect((await app.inject({ url: '/v1/specimens' })).statusCode).toBe(401)
  })

  it('is in GET / and in the OpenAPI document, under its tag, with its list schema', async () => {
    const index = (await app.inject({ url: '/' })).json()
    expect(index.operations).toContainEqual({ id: 'listSpecimens', method: 'GET', path: '/v1/specimens' })
    const document = (await app.inject({ url: '/v1/openapi.json' })).json()
    expect(document.tags).toContainEqual({ name: 'Specimens', description: 'The specimens the gateway routes to' })
    const operation = document.paths['/specimens'].get
    expect(operation).toMatchObject({ operationId: 'listSpecimens', tags: ['Specimens'], summary: 'List all specimens' })
    expect(operation.responses['200'].content['application/json'].schema).toMatchObject({
      description: 'The specimens, in the order of the data file',
      properties: { data: { type: 'array', items: { $ref: '#/components/schemas/Specimen' } } }
    })
    expect(Object.keys(operation.responses)).toEqual(expect.arrayContaining(['200', '304', '401', '429', '500']))
  })
})

describe('the documents npm run docs writes', () => {
  let root: string
  beforeAll(async () => { root = await mkdtemp(join(tmpdir(), 'extra-kind-docs-')) })
  afterAll(() => rm(root, { recursive: true, force: true }))

  it('name the extra kind\'s operation, file, format, Kubernetes data and table, with no other change than its bundled file', async () => {
    await copyWhatDocsRead(root)
    await writeFile(join(root, 'fixtures/specimens.json'), JSON.stringify(specimens('Alpha', 'Beta', 'Gamma')))
    const written = new Map((await generateDocs(root)).map(({ path, text }) => [path, text]))
    expect(written.get('README.md')).toContain('| List all specimens | `GET /v1/specimens` | any key |')
    expect(written.get('README.md')).toContain('- `specimens.json`: a specimen\n')
    expect(written.get('docs/api.md')).toContain('{"id":"listSpecimens","method":"GET","path":"/v1/specimens"}')
    expect(written.get('docs/data.md')).toContain('### `specimens.json`\n\nA JSON array of records, each a specimen. Served whole by `GET /v1/specimens`.')
    expect(written.get('docs/data.md')).toContain('| `context_length` | integer | yes | Maximum context length, in tokens |')
    expect(written.get('docs/data.md')).toContain('/path/to/my-data: valid: 38 providers, 32 endpoints, 2 organizations with 138 members, 5 keys, 3 specimens')
    expect(written.get('docs/postgresql.md')).toContain("| `specimens` | `id` (generated from `document ->> 'id'`, primary key), `position`, `document json`, `document_bytes` (generated: the document's size) |  |")
    expect(written.get('docs/postgresql.md')).toContain('Writes every kind\'s file, <!-- generated by npm run docs: file names -->`providers.json`, `zdr-endpoints.json`, `organizations.json`, `keys.json`, `specimens.json`<!-- end -->')
    expect(written.get('docs/deployment.md')).toContain('files: [providers.json, zdr-endpoints.json, organizations.json, specimens.json]')
    expect(written.get('deploy/kubernetes/kustomization.yaml')).toContain('      - data/organizations.json\n      - data/specimens.json\n')
    expect(written.get('deploy/kubernetes/data/specimens.json')).toBe('[]\n')
    expect(JSON.parse(written.get('docs/openapi.json')!).paths['/specimens'].get.operationId).toBe('listSpecimens')
  })
})

describe('an extra kind from files', () => {
  let dir: string
  beforeAll(async () => { dir = await mkdtemp(join(tmpdir(), 'extra-kind-')) })
  afterAll(() => rm(dir, { recursive: true, force: true }))
  const write = (data: Record<string, unknown>) => Promise.all(RECORD_KINDS.map((kind) =>
    writeFile(join(dir, (KINDS as Record<string, { file: string }>)[kind]!.file), JSON.stringify(data[kind]))))

  it('is loaded, counted, fingerprinted, changed live and refused when bad, its last good records serving on', async () => {
    await write(dataWith(specimens('Alpha')))
    expect((await loadDataFolder(dir) as WithSpecimens).specimens).toEqual(specimens('Alpha'))
    // What `npm run db -- import` reads.
    const imported: unknown[] = []
    for await (const records of readRecordBatches(dir, 'specimens' as never)) imported.push(...records)
    expect(imported).toEqual(specimens('Alpha'))
    const lifecycle = createLifecycle(createFileSource(dir))
    lifecycles.push(lifecycle)
    await lifecycle.load()
    const { refusal } = watchLifecycle(lifecycle)
    expect(lifecycle.current().counts()).toMatchObject({ specimens: 1 })
    const before = lifecycle.current().fingerprint

    await writeFile(join(dir, 'specimens.json'), JSON.stringify(specimens('Alpha', 'Beta')))
    await expect.poll(() => served(lifecycle).length).toBe(2)
    expect(lifecycle.current().counts()).toMatchObject({ specimens: 2 })
    expect(lifecycle.current().fingerprint).not.toBe(before)

    await writeFile(join(dir, 'specimens.json'), JSON.stringify([{ id: 'Nowhere', name: 'X', context_length: 1 }]))
    expect(await refusal()).toEqual({ kind: 'specimens', problem: String.raw`specimens.json: [0].id: "Nowhere": expected string to match '^[^/\s]+/[^\s]+$'` })
    expect(served(lifecycle)).toEqual(specimens('Alpha', 'Beta'))

    await writeFile(join(dir, 'specimens.json'), JSON.stringify([...specimens('Alpha'), ...specimens('Alpha')]))
    expect(await refusal()).toEqual({ kind: 'specimens', problem: 'specimens.json: [1].id: "vendor/alpha" duplicates [0].id' })
  })
})

describe('an extra kind in PostgreSQL', () => {
  const server = sharedPostgres()
  afterAll(() => server.close())

  it('is refused in one line until its migration made its table, then imported and exported, counted, fingerprinted, changed live and refused when bad', async () => {
    const url = await server.createDatabase()
    const admin = new pg.Client({ connectionString: url })
    await admin.connect()
    try {
      // The migrations are frozen: none of them makes the table of a kind registered since, and migrate says so.
      const missing = `the database has no table specimens, which this build reads, and its schema is at version ${SCHEMA_VERSION} already: ` +
        'no migration of this build makes it; add one (CONTRIBUTING.md, "A new kind of record"), then run npm run db -- migrate'
      await expect(migrate(admin)).rejects.toThrow(missing)
      const refused = createLifecycle(createPostgresSource({ url, connectTimeoutMs: 0 }))
      lifecycles.push(refused)
      // Before: PostgreSQL's `relation "specimens" does not exist`, naming neither the cause nor the fix.
      await expect(refused.load()).rejects.toThrow(missing)
      expect((await readFile('docs/postgresql.md', 'utf8')).replace(/\s+/g, ' ')).toContain(`cannot start: ${missing}`)

      // The kind's migration, as listTableSql makes it of its entry.
      await admin.query(listTableSql((KINDS as unknown as Record<string, { table: string, unique: readonly string[] }>).specimens!))
      const data = dataWith(specimens('Alpha', 'Beta'))
      await replaceDirectory(admin, data)
      // What `npm run db -- export` writes.
      const exported: Record<string, unknown[]> = {}
      await exportDirectory(admin, { async write (kind, record) { (exported[kind] ??= []).push(record) }, refuse () {} })
      expect(exported.specimens).toStrictEqual(data.specimens)

      const lifecycle = createLifecycle(createPostgresSource({ url, connectTimeoutMs: 0 }))
      lifecycles.push(lifecycle)
      await lifecycle.load()
      const { refusal } = watchLifecycle(lifecycle)
      expect(lifecycle.current().counts()).toMatchObject({ specimens: 2 })
      const before = lifecycle.current().fingerprint

      // The operator's one statement.
      await admin.query(`UPDATE specimens SET document = '{"id": "vendor/beta", "name": "Beta 2", "context_length": 8192}' WHERE id = 'vendor/beta'`)
      await expect.poll(() => served(lifecycle)[1]?.name).toBe('Beta 2')
      expect(lifecycle.current().fingerprint).not.toBe(before)

      await admin.query(`UPDATE specimens SET document = '{"id": "vendor/beta", "name": "", "context_length": 8192}' WHERE id = 'vendor/beta'`)
      expect(await refusal()).toEqual({ kind: 'specimens', problem: 'table specimens, row id "vendor/beta": name: "": expected string length greater or equal to 1' })
      // A row refused alone is left out of its list.
      await expect.poll(() => served(lifecycle)).toEqual(specimens('Alpha'))
    } finally {
      await admin.end()
    }
  })
})
