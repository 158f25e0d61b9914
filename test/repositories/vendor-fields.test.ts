import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ListEndpointsZdrResponse$inboundSchema } from '@openrouter/sdk/models/operations'
import { afterAll, afterEach, describe, expect, it } from 'vitest'
import { createLifecycle, type Lifecycle } from '../../src/repositories/lifecycle.js'
import { createFileSource, DATA_FILES, loadDataFolder } from '../../src/repositories/sources/files.js'
import { createPostgresSource } from '../../src/repositories/sources/postgres.js'
import type { DirectoryData } from '../../src/repositories/records.js'
import type { Endpoint } from '../../src/schemas/endpoint.js'
import { KEYS, bearer, build, makeData, makeEndpoint, makeSparseVendorEndpoint, makeVendorEndpoint } from '../helper.js'
import { databaseWith, sharedPostgres } from '../postgres.js'

// The fields OpenRouter's newer clients describe in a ZDR endpoint, beyond the spec's copy: a data file
// and a PostgreSQL document hold them, the schema checks them, and the server serves them as written.

const server = sharedPostgres()
afterAll(() => server.close())

const lifecycles: Lifecycle[] = []
const folders: string[] = []
afterEach(async () => {
  await Promise.all(lifecycles.splice(0).map((lifecycle) => lifecycle.close()))
  await Promise.all(folders.splice(0).map((dir) => rm(dir, { recursive: true, force: true })))
})

async function folderOf (data: DirectoryData) {
  const dir = await mkdtemp(join(tmpdir(), 'vendor-fields-'))
  folders.push(dir)
  for (const [kind, file] of Object.entries(DATA_FILES)) await writeFile(join(dir, file), JSON.stringify(data[kind as keyof DirectoryData]))
  return dir
}

/** A replica over `data`: a folder of files, or a PostgreSQL database imported from them. */
const sources: Array<[string, (data: DirectoryData) => Promise<Lifecycle>]> = [
  ['files', async (data) => createLifecycle(createFileSource(await folderOf(data)))],
  ['PostgreSQL', async (data) => {
    const { url, client } = await databaseWith(server, data)
    await client.end()
    return createLifecycle(createPostgresSource({ url, connectTimeoutMs: 0 }))
  }]
]

describe.each(sources)('endpoints with the vendor\'s newer fields, from %s', (_source, replicaOf) => {
  /** The ZDR listing of a replica loaded from these endpoints. */
  async function listingOf (endpoints: Endpoint[]) {
    const lifecycle = await replicaOf(makeData({ endpoints }))
    lifecycles.push(lifecycle)
    await lifecycle.load()
    return await build({ snapshots: lifecycle }).inject({ url: '/v1/endpoints/zdr', headers: bearer(KEYS.alphaStandard) })
  }

  it('are loaded and served as written, next to a record that has none of them', async () => {
    const endpoints = [makeVendorEndpoint(1), makeEndpoint(2), makeVendorEndpoint(3, { native_tools: {}, quantization: null })]
    const res = await listingOf(endpoints)
    expect(res.statusCode).toBe(200)
    expect(res.body).toBe(JSON.stringify({ data: [endpoints[0], { ...endpoints[1], native_tools: {} }, endpoints[2]] }))
  })

  it('without the fields the vendor makes optional (pricing.image, pricing.request, status) are loaded and served without them', async () => {
    const endpoints = [makeSparseVendorEndpoint(1), makeEndpoint(2)]
    expect(Object.keys(endpoints[0]!)).not.toContain('status')
    expect(Object.keys(endpoints[0]!.pricing)).toEqual(['prompt', 'completion'])
    const res = await listingOf(endpoints)
    expect(res.statusCode).toBe(200)
    expect(res.body).toBe(JSON.stringify({ data: endpoints.map((endpoint) => ({ ...endpoint, native_tools: {} })) }))
    // The official SDK reads the answer as the vendor's: the fields absent, not filled in.
    const [sparse, full] = ListEndpointsZdrResponse$inboundSchema.parse(res.json()).data
    expect(sparse).not.toHaveProperty('status')
    expect(sparse!.pricing).toEqual({ prompt: endpoints[0]!.pricing.prompt, completion: endpoints[0]!.pricing.completion })
    expect(full).toMatchObject({ status: 0, pricing: { image: '0', request: '0' } })
  })
})

describe('zdr-endpoints.json with a newer field wrong', () => {
  const { pricing } = makeVendorEndpoint(0)
  it.each([
    ['a quantization outside the enumeration', { quantization: 'fp8_e4m3' },
      'zdr-endpoints.json: [1].quantization: "fp8_e4m3" is not one of "int4", "int8", "fp4", "mxfp4", "nvfp4", "fp6", "fp8", "mxfp8", "fp16", "bf16", "fp32", "unknown"'],
    ['a native tool not named openrouter:*', { native_tools: { web_search: { type: 'web_search_20260209' } } },
      'zdr-endpoints.json: [1].native_tools.web_search: is not a known field; names here match ^openrouter:[a-z0-9_.-]+$'],
    ['a native tool without its provider type', { native_tools: { 'openrouter:web_search': {} } },
      'zdr-endpoints.json: [1].native_tools.openrouter:web_search.type: is required'],
    ['a price key spelt wrong', { pricing: { ...pricing, input_cache_reed: '0' } },
      'zdr-endpoints.json: [1].pricing.input_cache_reed: is not a known field; did you mean "input_cache_read"?'],
    ['a price that is a number', { pricing: { ...pricing, web_search: 0.01 } },
      'zdr-endpoints.json: [1].pricing.web_search: 0.01: expected string'],
    ['a discount above 1', { pricing: { ...pricing, discount: 25 } },
      'zdr-endpoints.json: [1].pricing.discount: 25: expected number to be less or equal to 1'],
    ['a day of the week that is none', { pricing: { ...pricing, overrides: [{ utc_days: ['caturday'] }] } },
      'zdr-endpoints.json: [1].pricing.overrides[0].utc_days[0]: "caturday" is not one of "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"'],
    ['a workload the vendor does not name', { perf_last_30m_by_workload: { chat: { latency: null, request_count: null, throughput: null } } },
      'zdr-endpoints.json: [1].perf_last_30m_by_workload.chat: is not a known field'],
    ['a workload without its request count', { perf_last_30m_by_workload: { text_generation: { latency: null, throughput: null } } },
      'zdr-endpoints.json: [1].perf_last_30m_by_workload.text_generation.request_count: is required']
  ])('refuses %s, naming the file, the record and the field', async (_case, fields, message) => {
    const dir = await folderOf(makeData({ endpoints: [makeVendorEndpoint(0), makeVendorEndpoint(1, fields as object)] }))
    await expect(loadDataFolder(dir)).rejects.toThrow(message)
  })
})
