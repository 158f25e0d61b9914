import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { beforeAll, describe, expect, it } from 'vitest'
import { OpenRouter } from '@openrouter/sdk'
import { InternalServerResponseError, NotFoundResponseError, OpenRouterDefaultError, UnauthorizedResponseError } from '@openrouter/sdk/models/errors'
import { KEYS, build, failingSnapshots, makeData, makeEndpoint, makeMembers, makeProvider, snapshotsOf , type BuildOptions } from './helper.js'

/** The SDK's view of a record: the same fields, names camel-cased (`privacy_policy_url` → `privacyPolicyUrl`). */
function camelCased (value: unknown): unknown {
  if (Array.isArray(value)) return value.map(camelCased)
  if (value === null || typeof value !== 'object') return value
  return Object.fromEntries(Object.entries(value).map(([key, field]) => [key.replace(/_([a-z0-9])/g, (_, next: string) => next.toUpperCase()), camelCased(field)]))
}

// A data set that exercises what a client can trip on: absent optional fields, nulls, negative
// prices, a last page that is full (so the pager must ask once more and get an empty page).
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
    })
  ]
})

async function listen (directory: NonNullable<BuildOptions['snapshots']>) {
  const app = build({ snapshots: directory })
  const address = await app.listen({ host: '127.0.0.1', port: 0 })
  return { app, serverURL: `${address}/v1` }
}

// The official client, unchanged, against a listening server: the compatibility promise.
describe('the official @openrouter/sdk client', () => {
  let server: Awaited<ReturnType<typeof listen>>
  // Retries off: an error must surface at once, not after a back-off.
  const client = (apiKey: string, serverURL = server.serverURL) => new OpenRouter({ apiKey, serverURL, retryConfig: { strategy: 'none' } })

  beforeAll(async () => { server = await listen(snapshotsOf(data)) })

  it('providers.list() answers every provider of the data, field by field', async () => {
    const res = await client(KEYS.alphaStandard).providers.list()
    expect(res.data).toStrictEqual(camelCased(data.providers))
  })

  it('endpoints.listZdrEndpoints() answers every endpoint of the data, field by field', async () => {
    const res = await client(KEYS.alphaStandard).endpoints.listZdrEndpoints()
    // supportsVoiceCloning is not a field of ours: the SDK fills in its default when it is absent.
    expect(res.data).toStrictEqual(data.endpoints.map((endpoint) => ({ ...(camelCased(endpoint) as object), supportsVoiceCloning: false })))
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

  it('raises UnauthorizedResponseError for an unknown key', async () => {
    const error = await client('sk-or-v1-unknown').organization.listMembers().catch((e: unknown) => e)
    expect(error).toBeInstanceOf(UnauthorizedResponseError)
    expect(error).toMatchObject({ statusCode: 401, error: { code: 401, message: 'Invalid API key' } })
  })

  it('raises NotFoundResponseError for a management key whose organization does not exist', async () => {
    const error = await client(KEYS.orphanManagement).organization.listMembers().catch((e: unknown) => e)
    expect(error).toBeInstanceOf(NotFoundResponseError)
    expect(error).toMatchObject({ statusCode: 404, error: { code: 404, message: 'Organization org_gone not found' } })
  })

  it('raises its generic error, with the status and our body, where it has no class of its own', async () => {
    // A standard key on the member listing (403), and a missing key on the providers (401): the
    // SDK declares no class for those statuses on those operations.
    const calls = [
      { call: () => client(KEYS.alphaStandard).organization.listMembers(), status: 403 },
      { call: () => client('').providers.list(), status: 401 }
    ]
    for (const { call, status } of calls) {
      const error = await call().catch((e: unknown) => e)
      expect(error).toBeInstanceOf(OpenRouterDefaultError)
      expect((error as OpenRouterDefaultError).statusCode).toBe(status)
      expect(JSON.parse((error as OpenRouterDefaultError).body)).toMatchObject({ error: { code: status } })
    }
  })

  it('runs the README\'s example script, examples/list-with-sdk.mjs', async () => {
    const { stdout } = await promisify(execFile)(process.execPath, ['examples/list-with-sdk.mjs'], {
      env: { PATH: process.env.PATH ?? '', OPENROUTER_BASE_URL: server.serverURL, OPENROUTER_API_KEY: KEYS.alphaManagement }
    })
    expect(stdout).toContain('3 providers, for example:')
    expect(stdout).toContain('2 endpoints under zero data retention')
    expect(stdout).toContain('members page: 45 (345 of 345)')
  })

  describe('when the server fails', () => {
    let failing: Awaited<ReturnType<typeof listen>>
    beforeAll(async () => {
      failing = await listen(failingSnapshots(data))
    })

    it('raises InternalServerResponseError from each of the three operations', async () => {
      const sdk = client(KEYS.alphaManagement, failing.serverURL)
      for (const call of [() => sdk.providers.list(), () => sdk.endpoints.listZdrEndpoints(), () => sdk.organization.listMembers()]) {
        const error = await call().catch((e: unknown) => e)
        expect(error).toBeInstanceOf(InternalServerResponseError)
        expect(error).toMatchObject({ statusCode: 500, error: { code: 500, message: 'Internal Server Error' } })
      }
    })
  })
})
