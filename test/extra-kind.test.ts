// A public list operation is one entry of the registry: this file hands in a registry with one more
// (models: a schema, an operation and a file made for the test), and every source, command, count,
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
  const ModelSchema = Type.Object({
    id: Type.String({ maxLength: 256, pattern: '^[^/\\s]+/[^\\s]+$', description: 'Identifier of the model, vendor/model' }),
    name: Type.String({ minLength: 1, maxLength: 1024, description: 'Display name of the model' }),
    context_length: Type.Integer({ minimum: 0, description: 'Maximum context length, in tokens' })
  }, { $id: 'Model', additionalProperties: false, description: 'A model', examples: [{ id: 'vendor/model', name: 'Vendor: Model', context_length: 8192 }] })
  const models = {
    schema: ModelSchema,
    file: 'models.json',
    table: 'models',
    key: 'id',
    unique: ['id'],
    index: 'list',
    operation: {
      path: '/models',
      operationId: 'listModels',
      tag: { name: 'Models', description: 'The models the gateway routes to' },
      summary: 'List all models',
      description: 'Lists the models the gateway routes to.',
      listDescription: 'The models, in the order of the data file'
    }
  }
  return { KINDS: { ...KINDS, models } }
})

// test/setup.ts loaded the app and the registry before this file: every module is loaded again, with
// the registry above.
vi.resetModules()
const { KINDS, RECORD_KINDS } = await import('../src/registry.js')
const { countRecords, describeCounts } = await import('../src/repositories/records.js')
const { createLifecycle } = await import('../src/repositories/lifecycle.js')
const { createFileSource, loadFixtures } = await import('../src/repositories/sources/files.js')
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

type Model = { id: string, name: string, context_length: number }
type WithModels = DirectoryData & { models: Model[] }
const models = (...names: string[]): Model[] => names.map((name) => ({ id: `vendor/${name.toLowerCase()}`, name, context_length: 8192 }))
const dataWith = (list: Model[]) => ({ ...makeData(), models: list }) as WithModels
const served = (lifecycle: { current(): { indexes: object } }) => (lifecycle.current().indexes as Record<string, { records: Model[] }>).models!.records

const lifecycles: Array<{ close(): Promise<void> }> = []
afterEach(async () => { await Promise.all(lifecycles.splice(0).map((lifecycle) => lifecycle.close())) })

it('is in the registry every source and command walks', () => {
  expect(RECORD_KINDS).toContain('models')
  expect(describeCounts(countRecords(dataWith(models('Alpha', 'Beta')) as DirectoryData))).toBe('3 providers, 2 endpoints, 2 organizations with 253 members, 4 keys, 2 models')
  expect((KINDS as Record<string, { file: string }>).models!.file).toBe('models.json')
})

describe('GET /v1/models, an operation of the registry alone', () => {
  const app = build({ data: dataWith(models('Alpha', 'Beta')) as DirectoryData })

  it('answers the list with any key, its ETag, and a 304 for that ETag', async () => {
    const response = await app.inject({ url: '/v1/models', headers: bearer(KEYS.alphaStandard) })
    expect(response.statusCode).toBe(200)
    expect(response.json()).toEqual({ data: models('Alpha', 'Beta') })
    const again = await app.inject({ url: '/v1/models', headers: { ...bearer(KEYS.alphaStandard), 'if-none-match': response.headers.etag as string } })
    expect(again.statusCode).toBe(304)
    expect((await app.inject({ url: '/v1/models' })).statusCode).toBe(401)
  })

  it('is in GET / and in the OpenAPI document, under its tag, with its list schema', async () => {
    const index = (await app.inject({ url: '/' })).json()
    expect(index.operations).toContainEqual({ id: 'listModels', method: 'GET', path: '/v1/models' })
    const document = (await app.inject({ url: '/v1/openapi.json' })).json()
    expect(document.tags).toContainEqual({ name: 'Models', description: 'The models the gateway routes to' })
    const operation = document.paths['/models'].get
    expect(operation).toMatchObject({ operationId: 'listModels', tags: ['Models'], summary: 'List all models' })
    expect(operation.responses['200'].content['application/json'].schema).toMatchObject({
      description: 'The models, in the order of the data file',
      properties: { data: { type: 'array', items: { $ref: '#/components/schemas/Model' } } }
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
    await writeFile(join(root, 'fixtures/models.json'), JSON.stringify(models('Alpha', 'Beta', 'Gamma')))
    const written = new Map((await generateDocs(root)).map(({ path, text }) => [path, text]))
    expect(written.get('README.md')).toContain('| List all models | `GET /v1/models` | any key |')
    expect(written.get('README.md')).toContain('- `models.json`: a model\n')
    expect(written.get('docs/api.md')).toContain('{"id":"listModels","method":"GET","path":"/v1/models"}')
    expect(written.get('docs/data.md')).toContain('### `models.json`\n\nA JSON array of records, each a model. Served whole by `GET /v1/models`.')
    expect(written.get('docs/data.md')).toContain('| `context_length` | integer | yes | Maximum context length, in tokens |')
    expect(written.get('docs/data.md')).toContain('/path/to/my-data: valid: 38 providers, 32 endpoints, 2 organizations with 138 members, 5 keys, 3 models')
    expect(written.get('docs/postgresql.md')).toContain("| `models` | `id` (generated from `document ->> 'id'`, primary key), `position`, `document json`, `document_bytes` (generated: the document's size) |  |")
    expect(written.get('docs/postgresql.md')).toContain('Writes every kind\'s file, <!-- generated by npm run docs: file names -->`providers.json`, `zdr-endpoints.json`, `organizations.json`, `keys.json`, `models.json`<!-- end -->')
    expect(written.get('docs/deployment.md')).toContain('files: [providers.json, zdr-endpoints.json, organizations.json, models.json]')
    expect(written.get('deploy/kubernetes/kustomization.yaml')).toContain('      - data/organizations.json\n      - data/models.json\n')
    expect(written.get('deploy/kubernetes/data/models.json')).toBe('[]\n')
    expect(JSON.parse(written.get('docs/openapi.json')!).paths['/models'].get.operationId).toBe('listModels')
  })
})

describe('an extra kind from files', () => {
  let dir: string
  beforeAll(async () => { dir = await mkdtemp(join(tmpdir(), 'extra-kind-')) })
  afterAll(() => rm(dir, { recursive: true, force: true }))
  const write = (data: Record<string, unknown>) => Promise.all(RECORD_KINDS.map((kind) =>
    writeFile(join(dir, (KINDS as Record<string, { file: string }>)[kind]!.file), JSON.stringify(data[kind]))))

  it('is loaded, counted, fingerprinted, changed live and refused when bad, its last good records serving on', async () => {
    await write(dataWith(models('Alpha')))
    expect((await loadFixtures(dir) as WithModels).models).toEqual(models('Alpha'))
    // What `npm run db -- import` reads.
    const imported: unknown[] = []
    for await (const records of readRecordBatches(dir, 'models' as never)) imported.push(...records)
    expect(imported).toEqual(models('Alpha'))
    const lifecycle = createLifecycle(createFileSource(dir))
    lifecycles.push(lifecycle)
    await lifecycle.load()
    const { refusal } = watchLifecycle(lifecycle)
    expect(lifecycle.current().counts()).toMatchObject({ models: 1 })
    const before = lifecycle.current().fingerprint

    await writeFile(join(dir, 'models.json'), JSON.stringify(models('Alpha', 'Beta')))
    await expect.poll(() => served(lifecycle).length).toBe(2)
    expect(lifecycle.current().counts()).toMatchObject({ models: 2 })
    expect(lifecycle.current().fingerprint).not.toBe(before)

    await writeFile(join(dir, 'models.json'), JSON.stringify([{ id: 'Nowhere', name: 'X', context_length: 1 }]))
    expect(await refusal()).toEqual({ kind: 'models', problem: String.raw`models.json: [0].id: "Nowhere": expected string to match '^[^/\s]+/[^\s]+$'` })
    expect(served(lifecycle)).toEqual(models('Alpha', 'Beta'))

    await writeFile(join(dir, 'models.json'), JSON.stringify([...models('Alpha'), ...models('Alpha')]))
    expect(await refusal()).toEqual({ kind: 'models', problem: 'models.json: [1].id: "vendor/alpha" duplicates [0].id' })
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
      const missing = `the database has no table models, which this build reads, and its schema is at version ${SCHEMA_VERSION} already: ` +
        'no migration of this build makes it; add one (CONTRIBUTING.md, "A new kind of record"), then run npm run db -- migrate'
      await expect(migrate(admin)).rejects.toThrow(missing)
      const refused = createLifecycle(createPostgresSource({ url, connectTimeoutMs: 0 }))
      lifecycles.push(refused)
      // Before: PostgreSQL's `relation "models" does not exist`, naming neither the cause nor the fix.
      await expect(refused.load()).rejects.toThrow(missing)
      expect((await readFile('docs/postgresql.md', 'utf8')).replace(/\s+/g, ' ')).toContain(`cannot start: ${missing}`)

      // The kind's migration, as listTableSql makes it of its entry.
      await admin.query(listTableSql((KINDS as unknown as Record<string, { table: string, unique: readonly string[] }>).models!))
      const data = dataWith(models('Alpha', 'Beta'))
      await replaceDirectory(admin, data)
      // What `npm run db -- export` writes.
      const exported: Record<string, unknown[]> = {}
      await exportDirectory(admin, { async write (kind, record) { (exported[kind] ??= []).push(record) }, refuse () {} })
      expect(exported.models).toStrictEqual(data.models)

      const lifecycle = createLifecycle(createPostgresSource({ url, connectTimeoutMs: 0 }))
      lifecycles.push(lifecycle)
      await lifecycle.load()
      const { refusal } = watchLifecycle(lifecycle)
      expect(lifecycle.current().counts()).toMatchObject({ models: 2 })
      const before = lifecycle.current().fingerprint

      // The operator's one statement.
      await admin.query(`UPDATE models SET document = '{"id": "vendor/beta", "name": "Beta 2", "context_length": 8192}' WHERE id = 'vendor/beta'`)
      await expect.poll(() => served(lifecycle)[1]?.name).toBe('Beta 2')
      expect(lifecycle.current().fingerprint).not.toBe(before)

      await admin.query(`UPDATE models SET document = '{"id": "vendor/beta", "name": "", "context_length": 8192}' WHERE id = 'vendor/beta'`)
      expect(await refusal()).toEqual({ kind: 'models', problem: 'table models, row id "vendor/beta": name: "": expected string length greater or equal to 1' })
      // A row refused alone is left out of its list.
      await expect.poll(() => served(lifecycle)).toEqual(models('Alpha'))
    } finally {
      await admin.end()
    }
  })
})
