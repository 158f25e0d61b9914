import { describe, expect, it } from 'vitest'
import { KEYS, bearer, build, makeData, makeEndpoint } from '../../helper.js'

describe('GET /v1/endpoints/zdr', () => {
  it('lists the ZDR endpoints with every field, in order', async () => {
    const data = makeData()
    const app = build({ data })
    const res = await app.inject({ url: '/v1/endpoints/zdr', headers: bearer(KEYS.betaManagement) })
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8')
    expect(res.json()).toEqual({ data: data.endpoints })
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
    expect(endpoint).toStrictEqual(unmeasured)
    expect(res.body).toContain('"prompt":"0.000000015"')
    expect(res.body).toContain('"latency_last_30m":null')
  })

  it('needs a key', async () => {
    const app = build()
    const res = await app.inject({ url: '/v1/endpoints/zdr', headers: bearer('nope') })
    expect(res.statusCode).toBe(401)
    expect(res.json()).toEqual({ error: { code: 401, message: 'Invalid API key' } })
  })
})
