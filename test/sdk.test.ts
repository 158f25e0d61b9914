import { execFile } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdir, mkdtemp, readFile, rename, rm } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { homedir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { promisify } from 'node:util'
import type { TSchema } from '@sinclair/typebox'
import { beforeAll, describe, expect, it } from 'vitest'
import { EndpointRecordSchema, EndpointSchema, servedEndpoint } from '../src/schemas/endpoint.js'
import { OPERATIONS } from '../src/registry.js'
import { KEYS, build, failingSnapshots, makeData, makeEndpoint, makeMembers, makeProvider, makeSparseVendorEndpoint, makeVendorEndpoint, snapshotsOf, type BuildOptions } from './helper.js'

const run = promisify(execFile)

type Sdk = typeof import('@openrouter/sdk')
type SdkErrors = typeof import('@openrouter/sdk/models/errors')
type SdkOperations = typeof import('@openrouter/sdk/models/operations')
type Loaded = { sdk: Sdk, errors: SdkErrors, operations: SdkOperations }

/** The SDK's view of a record: the same fields, names camel-cased (`privacy_policy_url` → `privacyPolicyUrl`); a map's keys are data, kept. */
function camelCased (value: unknown, isMap = false): unknown {
  if (Array.isArray(value)) return value.map((item) => camelCased(item))
  if (value === null || typeof value !== 'object') return value
  return Object.fromEntries(Object.entries(value).map(([key, field]) => [
    isMap ? key : key.replace(/_([a-z0-9])/g, (_, next: string) => next.toUpperCase()),
    camelCased(field, !isMap && key === 'native_tools')
  ]))
}

/** What the SDK's zod (v4) schemas show of themselves: enough to walk to the fields of an object. */
interface Zod {
  _zod: { def: { type: string, shape?: Record<string, Zod>, in?: Zod, innerType?: Zod, element?: Zod, getter?: () => Zod } }
  safeParse: (value: unknown) => { success: boolean }
}

/** The fields of the object a zod schema reads, through transforms, lazies, optionals, nulls and arrays. */
function zodFields (schema: Zod): Record<string, Zod> | undefined {
  const { type, shape, in: input, innerType, element, getter } = schema._zod.def
  if (type === 'object') return shape
  const inner = { pipe: input, lazy: getter?.(), optional: innerType, nullable: innerType, default: innerType, array: element }[type]
  return inner === undefined ? undefined : zodFields(inner)
}

/** The object schema of ours a field holds, through nulls and arrays. */
function ourObject (schema: TSchema | undefined): TSchema | undefined {
  if (schema === undefined) return undefined
  if (schema.type === 'object' && schema.properties !== undefined) return schema
  if (schema.type === 'array') return ourObject(schema.items as TSchema)
  return (schema.anyOf as TSchema[] | undefined)?.map(ourObject).find((object) => object !== undefined)
}

/**
 * Walks the SDK's reading of an answer field by field, beside our schema of it as served and as the data
 * holds it: a field the SDK requires must be in every answer (required as served), and a field it makes
 * optional must be accepted absent from the data (not required there), since an export of the vendor's
 * leaves it out. Answers every field compared, as `path: required` or `path: optional`, and each breach.
 */
function compareFields (theirs: Zod, served: TSchema, record: TSchema, at = ''): { compared: string[], breaches: string[] } {
  const compared: string[] = []
  const breaches: string[] = []
  for (const [name, field] of Object.entries(zodFields(theirs) ?? {})) {
    const path = at === '' ? name : `${at}.${name}`
    const optional = field.safeParse(undefined).success
    compared.push(`${path}: ${optional ? 'optional' : 'required'}`)
    const ours = { served: served.properties?.[name] as TSchema | undefined, record: record.properties?.[name] as TSchema | undefined }
    if (ours.served === undefined || ours.record === undefined) {
      breaches.push(`${path}: the SDK reads it, our schema has no such field`)
      continue
    }
    if (!optional && !(served.required as string[] | undefined)?.includes(name)) breaches.push(`${path}: the SDK requires it, we may serve an answer without it`)
    if (optional && (record.required as string[] | undefined)?.includes(name)) breaches.push(`${path}: the SDK makes it optional, our data must hold it`)
    const objects = { served: ourObject(ours.served), record: ourObject(ours.record) }
    if (zodFields(field) !== undefined && objects.served !== undefined && objects.record !== undefined) {
      const inner = compareFields(field, objects.served, objects.record, path)
      compared.push(...inner.compared)
      breaches.push(...inner.breaches)
    }
  }
  return { compared, breaches }
}

/** The paths of `ours` (`pricing.inputCacheRead`) that `theirs` lacks. */
function missing (ours: unknown, theirs: unknown, at = ''): string[] {
  if (ours === null || typeof ours !== 'object' || Array.isArray(ours)) return []
  return Object.entries(ours).flatMap(([key, value]) => {
    const path = at === '' ? key : `${at}.${key}`
    if (theirs === null || typeof theirs !== 'object' || !(key in theirs)) return [path]
    return missing(value, (theirs as Record<string, unknown>)[key], path)
  })
}

// The pinned SDK, and the newest the registry publishes: a client released since the pin is what a user
// installs with `npm i @openrouter/sdk`. The newest is installed once, outside the clone, by its version.
const require = createRequire(import.meta.url)
const PINNED = (require('@openrouter/sdk/package.json') as { version: string }).version

async function newestPublished (): Promise<string> {
  const { stdout } = await run('npm', ['view', '@openrouter/sdk', 'version'])
  return stdout.trim()
}

/** The folder `@openrouter/sdk@version` is installed in, installed there first when it is not. */
async function installed (version: string): Promise<string> {
  const dir = join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'model-gateway-directory', `openrouter-sdk-${version}`)
  if (existsSync(join(dir, 'node_modules/@openrouter/sdk/package.json'))) return dir
  await mkdir(join(dir, '..'), { recursive: true })
  // Installed beside, then renamed: a run stopped halfway leaves no folder that looks complete.
  const work = await mkdtemp(`${dir}-`)
  await run('npm', ['install', '--prefix', work, '--no-save', '--no-package-lock', '--ignore-scripts', '--no-audit', '--no-fund', `@openrouter/sdk@${version}`])
  await rename(work, dir).catch(() => rm(work, { recursive: true, force: true }))
  return dir
}

async function loadSdk (dir: string): Promise<Loaded> {
  const resolve = createRequire(join(dir, 'index.js')).resolve
  return {
    sdk: await import(pathToFileURL(resolve('@openrouter/sdk')).href) as Sdk,
    errors: await import(pathToFileURL(resolve('@openrouter/sdk/models/errors')).href) as SdkErrors,
    operations: await import(pathToFileURL(resolve('@openrouter/sdk/models/operations')).href) as SdkOperations
  }
}

const newest = await newestPublished().catch((error: Error) => error)
const clients: Array<{ which: string, load: () => Promise<Loaded> }> = [
  {
    which: newest === PINNED ? `${PINNED}, pinned, the newest published` : `${PINNED}, pinned`,
    load: async () => ({ sdk: await import('@openrouter/sdk'), errors: await import('@openrouter/sdk/models/errors'), operations: await import('@openrouter/sdk/models/operations') })
  }
]
if (newest !== PINNED) {
  clients.push({
    which: newest instanceof Error ? 'the newest published' : `${newest}, the newest published`,
    load: async () => {
      if (newest instanceof Error) throw new Error(`cannot ask the npm registry for the newest @openrouter/sdk: ${newest.message}`)
      return await loadSdk(await installed(newest))
    }
  })
}

/**
 * The README's table of the errors the SDK raises: one row per status, one column per operation, a class
 * name or — where the operation never answers that status.
 */
async function readmeErrors () {
  const lines = (await readFile('README.md', 'utf8')).split('\n')
  const header = lines.findIndex((line) => line.startsWith('| Answer | `providers.list()`'))
  const operations = lines[header]!.split('|').slice(2, -1).map((cell) => cell.trim().replaceAll('`', ''))
  const rows = lines.slice(header + 2, lines.findIndex((line, i) => i > header && !line.startsWith('|')))
  return rows.flatMap((row) => {
    const [answer = '', ...classes] = row.split('|').slice(1, -1).map((cell) => cell.trim())
    const status = Number(/^`(\d{3})`/.exec(answer)?.[1])
    return classes.flatMap((cell, i) => cell === '—' ? [] : [{ operation: operations[i]!, status, class: cell.replaceAll('`', '') }])
  })
}
const README_ERRORS = await readmeErrors()

// A data set that exercises what a client can trip on: absent optional fields, nulls, negative
// prices, OpenRouter's newer fields and an endpoint without them, an endpoint without the fields the
// vendor makes optional, a last page that is full (so the pager must ask once more and get an empty page).
const data = makeData({
  organizations: [
    { id: 'org_alpha', name: 'Alpha', members: makeMembers('alpha', 345) },
    { id: 'org_beta', name: 'Beta', members: makeMembers('beta', 200) }
  ],
  providers: [
    makeProvider(1, { status_page_url: 'https://status.provider-1.example' }),
    { name: 'Sparse', slug: 'sparse', privacy_policy_url: null },
    makeProvider(3, { headquarters: null, datacenters: null, terms_of_service_url: null })
  ],
  endpoints: [
    makeEndpoint(1),
    makeEndpoint(2, {
      max_prompt_tokens: null,
      max_completion_tokens: null,
      quantization: null,
      status: -10,
      latency_last_30m: null,
      throughput_last_30m: null,
      uptime_last_5m: null,
      uptime_last_30m: null,
      uptime_last_1d: null,
      pricing: { prompt: '-1', completion: '-1', image: '0', request: '0.005' }
    }),
    makeVendorEndpoint(3),
    makeVendorEndpoint(4, { native_tools: {}, quantization: 'unknown', supports_voice_cloning: true }),
    makeSparseVendorEndpoint(5)
  ]
})

async function listen (directory: NonNullable<BuildOptions['snapshots']>, settings?: BuildOptions['settings']) {
  const app = build({ snapshots: directory, settings })
  const address = await app.listen({ host: '127.0.0.1', port: 0 })
  return { app, serverURL: `${address}/v1` }
}

// The official client, unchanged, against a listening server: the compatibility promise.
describe.each(clients)('the official @openrouter/sdk client $which', ({ load }) => {
  let server: Awaited<ReturnType<typeof listen>>
  let OpenRouter: Sdk['OpenRouter']
  let errors: SdkErrors
  let operations: SdkOperations
  // Retries off: an error must surface at once, not after a back-off.
  const client = (apiKey: string, serverURL = server.serverURL) => new OpenRouter({ apiKey, serverURL, retryConfig: { strategy: 'none' } })

  beforeAll(async () => {
    const loaded = await load()
    OpenRouter = loaded.sdk.OpenRouter
    errors = loaded.errors
    operations = loaded.operations
    server = await listen(snapshotsOf(data))
  })

  it.each(OPERATIONS.map((operation) => [operation.operationId, operation.sdk]))('%s: the method the registry names, %s, calls it and parses its answer', async (_id, method) => {
    // Null would say the SDK has no method for it: none of the registry's operations may be so today.
    expect(method, 'the registry names no SDK method for this operation').toEqual(expect.any(String))
    const [group, name] = method!.split('.')
    const sdk = client(KEYS.alphaManagement) as unknown as Record<string, Record<string, (() => Promise<{ result?: { data: unknown[] }, data?: unknown[] }>) | undefined> | undefined>
    const call = sdk[group!]?.[name!]
    expect(call, `the SDK has no ${method}`).toBeTypeOf('function')
    const answer = await call!.call(sdk[group!])
    expect((answer.result ?? answer).data!.length).toBeGreaterThan(0)
  })

  it('providers.list() answers every provider of the data, field by field', async () => {
    const res = await client(KEYS.alphaStandard).providers.list()
    expect(res.data).toStrictEqual(camelCased(data.providers))
  })

  it('endpoints.listZdrEndpoints() parses every endpoint, each field holding the value served, none dropped but native_tools', async () => {
    const res = await client(KEYS.alphaStandard).endpoints.listZdrEndpoints()
    const served = data.endpoints.map((endpoint) => camelCased(servedEndpoint(endpoint)) as Record<string, unknown>)
    expect(res.data).toHaveLength(served.length)
    res.data.forEach((endpoint, i) => {
      // supportsVoiceCloning is optional: the SDK fills in its default when it is absent.
      expect({ supportsVoiceCloning: false, ...served[i] }, `endpoint ${i}`).toMatchObject(endpoint)
      // An SDK older than native_tools drops it; nothing else may be.
      expect(missing(served[i], endpoint).filter((path) => !path.startsWith('nativeTools')), `endpoint ${i}`).toEqual([])
    })
  })

  it('reads an endpoint as our schema says it: each field it requires always served, each it makes optional accepted absent from the data', () => {
    const answer = zodFields(operations.ListEndpointsZdrResponse$inboundSchema as unknown as Zod)!
    const { compared, breaches } = compareFields(answer.data!, EndpointSchema, EndpointRecordSchema)
    // The walk reaches every level: the record, its prices, a conditional price, a workload's percentiles.
    expect(compared).toEqual(expect.arrayContaining(['model_id: required', 'status: optional', 'pricing: required', 'pricing.prompt: required', 'pricing.image: optional', 'pricing.request: optional', 'pricing.overrides.utc_days: optional', 'perf_last_30m_by_workload.text_generation.latency.p50: required']))
    expect(breaches).toEqual([])
  })

  const pagings = [
    { organization: 0, key: KEYS.alphaManagement, limit: undefined, pages: [50, 50, 50, 50, 50, 50, 45] },
    { organization: 0, key: KEYS.alphaManagement, limit: 100, pages: [100, 100, 100, 45] },
    { organization: 1, key: KEYS.betaManagement, limit: undefined, pages: [50, 50, 50, 50, 0] },
    { organization: 1, key: KEYS.betaManagement, limit: 100, pages: [100, 100, 0] }
  ]
  it.each(pagings)('organization.listMembers({ limit: $limit }) pages with its own iterator to the end: $pages', async ({ organization, key, limit, pages }) => {
    const members = data.organizations[organization]!.members.slice()
    const iterator = await client(key).organization.listMembers(limit === undefined ? {} : { limit })
    const sizes: number[] = []
    const seen: unknown[] = []
    for await (const page of iterator) {
      expect(page.result.totalCount).toBe(members.length)
      sizes.push(page.result.data.length)
      seen.push(...page.result.data)
    }
    expect(sizes).toEqual(pages)
    expect(seen).toStrictEqual(camelCased(members))
  })

  describe('errors, as the README\'s table says each operation raises them', () => {
    const servers: Partial<Record<'failing' | 'limited' | 'stale', Awaited<ReturnType<typeof listen>>>> = {}
    beforeAll(async () => {
      servers.failing = await listen(failingSnapshots(data))
      servers.limited = await listen(snapshotsOf(data), { RATE_LIMIT_PER_MINUTE: 1, RATE_LIMIT_ANONYMOUS_PER_MINUTE: 1 })
      // Data last confirmed an hour ago, past MAX_STALENESS_MS.
      const stale = snapshotsOf(data)
      stale.confirmed(Date.now() - 3_600_000)
      servers.stale = await listen(stale, { MAX_STALENESS_MS: 60_000 })
    })

    /** How a status is provoked: the key, and the server that answers it (the data's own by default). */
    const provocations: Record<number, { key: string, server?: keyof typeof servers }> = {
      401: { key: 'sk-or-v1-unknown' },
      403: { key: KEYS.alphaStandard },
      404: { key: KEYS.orphanManagement },
      429: { key: KEYS.alphaManagement, server: 'limited' },
      500: { key: KEYS.alphaManagement, server: 'failing' },
      503: { key: KEYS.alphaManagement, server: 'stale' }
    }

    it.each(README_ERRORS)('$operation raises $class on $status', async ({ operation, status, class: name }) => {
      const provocation = provocations[status]
      expect(provocation, `no provocation of ${status}: add one`).toBeDefined()
      const { key, server: which } = provocation!
      const sdk = client(key, which === undefined ? server.serverURL : servers[which]!.serverURL)
      const call = { 'providers.list()': () => sdk.providers.list(), 'endpoints.listZdrEndpoints()': () => sdk.endpoints.listZdrEndpoints(), 'organization.listMembers()': () => sdk.organization.listMembers() }[operation]!
      // Over the limit: the same call once more.
      if (status === 429) await call().catch(() => undefined)
      const error = await call().catch((e: unknown) => e)
      const errorClass = errors[name as keyof SdkErrors] as unknown as new (...args: never[]) => Error
      expect(error).toBeInstanceOf(errorClass)
      expect((error as { statusCode: number }).statusCode).toBe(status)
      const body = name === 'OpenRouterDefaultError' ? JSON.parse((error as { body: string }).body) as { error: unknown } : { error: (error as { error: unknown }).error }
      expect(body.error).toMatchObject({ code: status, message: expect.any(String) })
    })
  })
})

describe('the README\'s example script, examples/list-with-sdk.mjs', () => {
  it('runs against a listening server, with the pinned SDK', async () => {
    const server = await listen(snapshotsOf(data))
    const { stdout } = await promisify(execFile)(process.execPath, ['examples/list-with-sdk.mjs'], {
      env: { PATH: process.env.PATH ?? '', OPENROUTER_BASE_URL: server.serverURL, OPENROUTER_API_KEY: KEYS.alphaManagement }
    })
    expect(stdout).toContain('3 providers, for example:')
    expect(stdout).toContain('5 endpoints under zero data retention')
    expect(stdout).toContain('members page: 45 (345 of 345)')
  })
})
