import { spawnSync } from 'node:child_process'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { beforeAll, describe, expect, it } from 'vitest'
import { parse as parseYaml } from 'yaml'
import { createSnapshot } from '../src/repositories/snapshot.js'
import { KINDS, LIST_KINDS, OPERATIONS } from '../src/registry.js'
import { KEYS, bearer, build, failingSnapshots, snapshotsOf, makeData, makeProvider, sha256 } from './helper.js'
import { createConformanceChecker, createDocumentValidator, fetchServedDocument, takeConformanceFailures, type OpenApiDocument } from './conformance.js'

const { text: servedText, document } = await fetchServedDocument()

const operations = Object.entries(document.paths).flatMap(([path, methods]) =>
  Object.entries(methods).map(([method, operation]) => ({ path, method, operation })))

describe('the OpenAPI document', () => {
  it('is served at /v1/openapi.json without a key, as OpenAPI 3.1, version 1.0.0, server /v1', async () => {
    const app = build()
    for (const headers of [{}, bearer('not-a-key')]) {
      const res = await app.inject({ url: '/v1/openapi.json', headers })
      expect(res.statusCode).toBe(200)
      expect(res.headers['content-type']).toBe('application/json; charset=utf-8')
      expect(res.body).toBe(servedText)
    }
    expect(document.openapi).toBe('3.1.0')
    expect(document.info.version).toBe('1.0.0')
    expect(document.servers).toEqual([{ url: '/v1', description: expect.any(String) }])
    // The operations around it still need a key.
    expect((await app.inject({ url: '/v1/providers' })).statusCode).toBe(401)
  })

  it('is served as YAML at /v1/openapi.yaml, the same document', async () => {
    const app = build()
    const res = await app.inject({ url: '/v1/openapi.yaml' })
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toBe('application/yaml; charset=utf-8')
    expect(parseYaml(res.body)).toEqual(document)
  })

  it('is the committed docs/openapi.json, byte for byte (run `npm run docs` after changing a schema)', async () => {
    const committed = await readFile('docs/openapi.json', 'utf8')
    expect(committed, 'docs/openapi.json differs from the served document: run `npm run docs` and commit the result').toBe(servedText)
  })

  it('lints clean with Redocly CLI (recommended rules, warnings counted as errors), offline', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'openapi-lint-'))
    try {
      const file = join(dir, 'openapi.json')
      await writeFile(file, servedText)
      const run = spawnSync(process.execPath, ['node_modules/@redocly/cli/bin/cli.js', 'lint', '--config', 'redocly.yaml', '--format', 'json', file], {
        encoding: 'utf8',
        // No usage data, no update check: the lint must not reach the internet (redocly.yaml says so too).
        env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' }
      })
      const report = JSON.parse(run.stdout) as { totals: { errors: number, warnings: number }, problems: Array<{ ruleId: string, message: string }> }
      expect(report.problems.map((problem) => `${problem.ruleId}: ${problem.message}`)).toEqual([])
      expect(report.totals).toMatchObject({ errors: 0, warnings: 0 })
      expect(run.status).toBe(0)
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('lists every operation of the registry and no other, with its id, under its tag', () => {
    expect(operations.map(({ path, method, operation }) => [method, path, operation.operationId, operation.tags]))
      .toEqual(OPERATIONS.map(({ path, operationId, tag }) => ['get', path, operationId, [tag.name]]))
    expect((document as OpenApiDocument & { tags: Array<{ name: string }> }).tags).toEqual(OPERATIONS.map(({ tag }) => tag))
    // The operations of OpenRouter's reference keep its ids and groups, which its SDK knows them by.
    expect(operations.map(({ path, operation }) => [path, operation.operationId, operation.tags])).toEqual(expect.arrayContaining([
      ['/providers', 'listProviders', ['Providers']],
      ['/endpoints/zdr', 'listEndpointsZdr', ['Endpoints']],
      ['/organization/members', 'listOrganizationMembers', ['Organization']]
    ]))
  })

  it('puts every operation behind the HTTP bearer scheme', () => {
    expect(document.components.securitySchemes).toEqual({ bearerAuth: { type: 'http', scheme: 'bearer', description: expect.any(String) } })
    expect(document.security).toEqual([{ bearerAuth: [] }])
    // No operation opts out of the default.
    for (const { operation } of operations) expect(operation.security).toBeUndefined()
  })

  it('documents 200 and each error status, errors with the shared Error schema, every response with a description and an example', () => {
    const statuses = Object.fromEntries(operations.map(({ operation }) => [operation.operationId, Object.keys(operation.responses)]))
    // Every list the registry serves whole answers alike; the member pages, paged, of a management key's organization, also 403 and 404.
    expect(statuses).toEqual({
      ...Object.fromEntries(LIST_KINDS.map((kind) => [KINDS[kind].operation.operationId, ['200', '304', '400', '401', '413', '417', '429', '500', '503']])),
      [KINDS.organizations.operation.operationId]: ['200', '304', '400', '401', '403', '404', '413', '417', '429', '500', '503']
    })
    for (const { operation } of operations) {
      for (const [status, response] of Object.entries(operation.responses)) {
        expect(response.description, `${operation.operationId} ${status}`).not.toBe('Default Response')
        // 304 has no body, hence nothing to give an example of.
        if (status === '304') {
          expect(response.content).toBeUndefined()
          continue
        }
        const media = response.content?.['application/json']
        expect(media?.example, `${operation.operationId} ${status} example`).toBeDefined()
        if (status !== '200') expect(media?.schema).toEqual({ allOf: [{ $ref: '#/components/schemas/Error' }], description: response.description })
      }
    }
  })

  it('documents the pagination parameters, optional, with their bounds and defaults', () => {
    const members = operations.find(({ operation }) => operation.operationId === 'listOrganizationMembers')!.operation
    expect(members.parameters).toEqual([
      { in: 'query', name: 'offset', required: false, description: expect.any(String), schema: { type: 'integer', minimum: 0, default: 0 } },
      { in: 'query', name: 'limit', required: false, description: expect.any(String), schema: { type: 'integer', minimum: 1, maximum: 100, default: 50 } }
    ])
    for (const { operation } of operations.filter(({ operation }) => operation !== members)) expect(operation.parameters).toBeUndefined()
  })

  it('publishes the record of each list (Provider, Endpoint with its WorkloadPerformance...), Member and Error as components, with the field descriptions of the spec', () => {
    const schemas = document.components.schemas
    const listed = LIST_KINDS.map((kind) => {
      const entry = KINDS[kind] as { schema: { $id?: string }, served?: { schema: { $id?: string } } }
      return (entry.served?.schema ?? entry.schema).$id!
    })
    expect(Object.keys(schemas).sort()).toEqual([...listed, 'Error', 'Member', 'WorkloadPerformance'].sort())
    const provider = schemas.Provider!.properties as Record<string, { description?: string }>
    expect(provider.headquarters!.description).toBe("ISO 3166-1 alpha-2 country code of the provider's headquarters")
    // Every field of every component says what it is.
    for (const [name, schema] of Object.entries(schemas)) {
      for (const [field, property] of Object.entries(schema.properties as Record<string, { description?: string }>)) {
        expect(property.description, `${name}.${field}`).toBeTruthy()
      }
    }
  })

  it('holds only examples that its own schemas accept', () => {
    const validate = createDocumentValidator(document)
    let checked = 0
    for (const { path, method, operation } of operations) {
      for (const [status, response] of Object.entries(operation.responses)) {
        if (response.content === undefined) continue
        const pointer = `/paths/${path.replace(/\//g, '~1')}/${method}/responses/${status}/content/application~1json/schema`
        expect(validate(pointer, response.content?.['application/json']?.example), `${operation.operationId} ${status}`).toEqual([])
        checked++
      }
    }
    for (const [name, schema] of Object.entries(document.components.schemas)) {
      for (const example of schema.examples as unknown[]) {
        expect(validate(`/components/schemas/${name}`, example), name).toEqual([])
        checked++
      }
    }
    // Not vacuous: an example at least for every operation's answers and every component.
    expect(checked).toBeGreaterThanOrEqual(operations.length + Object.keys(document.components.schemas).length)
  })
})

// The 404 example names the organization of the README's key for a deleted organization.
const DELETED_ORGANIZATION_KEY = 'test-deleted-organization-key'
const data = makeData({ keys: [...makeData().keys, { name: 'deleted-organization', sha256: sha256(DELETED_ORGANIZATION_KEY), kind: 'management', organization_id: 'org_2vQmDeleted03' }] })
const current = await createSnapshot(data)

describe('every documented response, provoked', () => {
  const failing = failingSnapshots(data)

  // One request a minute per key and per address: the second of a provocation is refused.
  const limited = snapshotsOf(data)
  // Data last confirmed current an hour ago, past MAX_STALENESS_MS.
  const stale = snapshotsOf(data)
  stale.confirmed(Date.now() - 3_600_000)
  // A body of more than BODY_LIMIT_BYTES.
  const tooLarge = 'x'.repeat(2048)
  const provocations: Record<string, Record<string, { key?: string, query?: string, ifNoneMatch?: string, headers?: Record<string, string[]>, payload?: string, snapshots?: ReturnType<typeof snapshotsOf> }>> = {
    // Every list is served alike: one of two the refusals of a request with a key, the other without.
    ...Object.fromEntries(LIST_KINDS.map((kind, i) => {
      const keyed = i % 2 === 0 ? { key: KEYS.alphaStandard } : {}
      return [KINDS[kind].operation.operationId, {
        200: { key: KEYS.alphaStandard },
        304: { key: KEYS.alphaStandard, ifNoneMatch: current.list(kind).representations.identity.etag },
        400: { headers: { authorization: [`Bearer ${KEYS.alphaStandard}`, 'Bearer other'] } },
        401: {},
        413: { ...keyed, payload: tooLarge },
        417: { ...keyed, headers: { expect: ['200-ok'] } },
        429: { key: i % 2 === 0 ? KEYS.alphaStandard : 'sk-or-v1-unknown', snapshots: limited },
        500: { key: KEYS.alphaStandard, snapshots: failing },
        503: { key: KEYS.alphaStandard, snapshots: stale }
      }]
    })),
    listOrganizationMembers: {
      200: { key: KEYS.alphaManagement, query: '?offset=10&limit=20' },
      304: { key: KEYS.alphaManagement, query: '?offset=10&limit=20', ifNoneMatch: '*' },
      400: { key: KEYS.alphaManagement, query: '?limit=500' },
      401: {},
      403: { key: KEYS.alphaStandard },
      404: { key: DELETED_ORGANIZATION_KEY },
      413: { key: KEYS.alphaManagement, payload: tooLarge },
      417: { key: KEYS.alphaManagement, headers: { expect: ['200-ok'] } },
      429: { key: KEYS.alphaManagement, query: '?limit=5', snapshots: limited },
      500: { key: KEYS.alphaManagement, snapshots: failing },
      503: { key: KEYS.alphaManagement, snapshots: stale }
    }
  }

  const apps = new Map<ReturnType<typeof snapshotsOf> | undefined, ReturnType<typeof build>>()
  beforeAll(() => {
    apps.set(undefined, build({ data }))
    apps.set(failing, build({ snapshots: failing }))
    apps.set(limited, build({ snapshots: limited, settings: { RATE_LIMIT_PER_MINUTE: 1, RATE_LIMIT_ANONYMOUS_PER_MINUTE: 1 } }))
    apps.set(stale, build({ snapshots: stale, settings: { MAX_STALENESS_MS: 60_000 } }))
  })

  const cases = operations.flatMap(({ path, operation }) =>
    Object.entries(operation.responses).map(([status, response]) => ({ path, operation, status, response })))

  it.each(cases)('$operation.operationId answers $status as documented', async ({ path, operation, status, response }) => {
    const provocation = provocations[operation.operationId]?.[status]
    expect(provocation, `no test provokes ${operation.operationId} ${status}: add it here`).toBeDefined()
    const { key, query = '', ifNoneMatch, headers: extra, payload, snapshots: directory } = provocation!
    const headers = { ...(key ? bearer(key) : {}), ...(ifNoneMatch ? { 'if-none-match': ifNoneMatch } : {}), ...extra }
    const request = { url: `${document.servers[0]!.url}${path}${query}`, headers, payload }
    // Over the limit: the same request once more.
    if (directory === limited) await apps.get(directory)!.inject(request)
    const res = await apps.get(directory)!.inject(request)
    expect(res.statusCode).toBe(Number(status))
    if (status === '304') return expect(res.body).toBe('')
    // Errors are deterministic: the documented example is exactly what the server says. (The
    // body's schema is checked, for this response as for every other, by test/conformance.ts.)
    if (status !== '200') expect(res.json()).toEqual(response.content?.['application/json']?.example)
  })
})

describe('the check of responses against the document', () => {
  const check = createConformanceChecker(document)
  const json = 'application/json; charset=utf-8'

  it('reports a field that the document does not publish, from any test', async () => {
    // A typo in a data file that the loader would refuse, slipped past it: the wire now has a field the contract lacks.
    const app = build({ data: makeData({ providers: [{ ...makeProvider(1), headquarter: 'US' } as ReturnType<typeof makeProvider>] }) })
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(200)
    const failures = takeConformanceFailures()
    expect(failures).toHaveLength(1)
    expect(failures[0]).toMatch(/GET \/v1\/providers answered 200: \/data\/0 must NOT have additional properties/)
  })

  it('reports a status that the operation does not document', () => {
    expect(check({ method: 'GET', route: '/v1/providers', statusCode: 403, contentType: json, body: '{"error":{"code":403,"message":"no"}}' }))
      .toEqual(['GET /v1/providers answered 403: status 403 is not documented for listProviders'])
  })

  it('reports a content type that the operation does not document', () => {
    expect(check({ method: 'GET', route: '/v1/providers', statusCode: 200, contentType: 'text/plain', body: '{"data":[]}' })[0])
      .toMatch(/content type "text\/plain" is not documented/)
  })

  it('reports an error body out of shape, even outside the operations', () => {
    expect(check({ method: 'GET', route: undefined, statusCode: 404, contentType: json, body: '{"message":"Not found"}' })).toEqual([
      "GET (no route) answered 404: (body) must have required property 'error' (openapi.json#/components/schemas/Error/required)",
      "GET (no route) answered 404: (body) must NOT have additional properties (openapi.json#/components/schemas/Error/additionalProperties)",
      'GET (no route) answered 404: error.code is undefined, not the HTTP status'
    ])
    expect(check({ method: 'GET', route: '/v1/organization/members', statusCode: 404, contentType: json, body: '{"error":{"code":400,"message":"x"}}' }))
      .toEqual(['GET /v1/organization/members answered 404: error.code is 400, not the HTTP status'])
  })

  it('accepts what the server really sends', () => {
    expect(check({ method: 'GET', route: '/v1/organization/members', statusCode: 200, contentType: json, body: '{"data":[],"total_count":0}' })).toEqual([])
    expect(check({ method: 'POST', route: undefined, statusCode: 405, contentType: json, body: '{"error":{"code":405,"message":"Method POST is not allowed"}}' })).toEqual([])
  })
})
