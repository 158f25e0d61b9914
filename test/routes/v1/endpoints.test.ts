import { describe, expect, it } from 'vitest'
import { KEYS, bearer, build, makeData, makeEndpoint, makeVendorEndpoint } from '../../helper.js'

describe('GET /v1/endpoints/zdr', () => {
  it('lists the ZDR endpoints with every field, in order', async () => {
    const data = makeData()
    const app = build({ data })
    const res = await app.inject({ url: '/v1/endpoints/zdr', headers: bearer(KEYS.betaManagement) })
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8')
    expect(res.json()).toEqual({ data: data.endpoints.map((endpoint) => ({ ...endpoint, native_tools: {} })) })
  })

  it('keeps null figures as null keys, and prices as decimal strings', async () => {
    const unmeasured = makeEndpoint(7, {
      max_prompt_tokens: null,
      max_completion_tokens: null,
      quantization: null,
      latency_last_30m: null,
      throughput_last_30m: null,
      uptime_last_5m: null,
      uptime_last_30m: null,
      uptime_last_1d: null,
      status: -10,
      pricing: { prompt: '0.000000015', completion: '-1', image: '0', request: '0.005' }
    })
    const app = build({ data: makeData({ endpoints: [unmeasured] }) })
    const res = await app.inject({ url: '/v1/endpoints/zdr', headers: bearer(KEYS.alphaStandard) })
    const [endpoint] = res.json().data
    expect(endpoint).toStrictEqual({ ...unmeasured, native_tools: {} })
    expect(res.body).toContain('"prompt":"0.000000015"')
    expect(res.body).toContain('"latency_last_30m":null')
  })

  it("serves the vendor's newer fields as the data holds them, each record's keys in the data's order", async () => {
    // Keys in an order of their own (native_tools first, prices shuffled): served as written, not re-ordered.
    const { native_tools: tools, pricing, ...rest } = makeVendorEndpoint(3)
    const { web_search: webSearch, ...prices } = pricing
    const reordered = { native_tools: tools, ...rest, pricing: { web_search: webSearch, ...prices } }
    const app = build({ data: makeData({ endpoints: [reordered, makeVendorEndpoint(4, { quantization: 'unknown', native_tools: {} })] }) })
    const res = await app.inject({ url: '/v1/endpoints/zdr', headers: bearer(KEYS.alphaStandard) })
    expect(res.statusCode).toBe(200)
    expect(res.body).toBe(JSON.stringify({ data: [reordered, makeVendorEndpoint(4, { quantization: 'unknown', native_tools: {} })] }))
  })

  it('serves native_tools, an empty object, after the last field of a record whose data has none', async () => {
    const older = makeEndpoint(5)
    const app = build({ data: makeData({ endpoints: [older] }) })
    const res = await app.inject({ url: '/v1/endpoints/zdr', headers: bearer(KEYS.alphaStandard) })
    expect(res.body).toBe(JSON.stringify({ data: [{ ...older, native_tools: {} }] }))
  })

  it('needs a key', async () => {
    const app = build()
    const res = await app.inject({ url: '/v1/endpoints/zdr', headers: bearer('nope') })
    expect(res.statusCode).toBe(401)
    expect(res.json()).toEqual({ error: { code: 401, message: 'Invalid API key' } })
  })
})
