import { describe, expect, it } from 'vitest'
import { build, captureLogs } from '../helper.js'

describe('GET /health', () => {
  it('answers 200 {"status":"ok"} without a key', async () => {
    const app = build()
    const res = await app.inject({ url: '/health' })
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8')
    expect(res.json()).toStrictEqual({ status: 'ok' })
  })

  it('answers HEAD without a body', async () => {
    const app = build()
    const res = await app.inject({ method: 'HEAD', url: '/health' })
    expect(res.statusCode).toBe(200)
    expect(res.body).toBe('')
  })

  it('ignores a key, even a wrong one', async () => {
    const app = build()
    const res = await app.inject({ url: '/health', headers: { authorization: 'Bearer nope' } })
    expect(res.statusCode).toBe(200)
  })

  it('answers another method with 405 in the error shape', async () => {
    const app = build()
    const res = await app.inject({ method: 'POST', url: '/health' })
    expect(res.statusCode).toBe(405)
    expect(res.json()).toEqual({ error: { code: 405, message: 'Method POST is not allowed on /health; use GET' } })
  })
})

describe('GET /ready', () => {
  it('answers 200 {"status":"ready"} without a key once the data is loaded', async () => {
    const app = build()
    const res = await app.inject({ url: '/ready' })
    expect(res.statusCode).toBe(200)
    expect(res.json()).toStrictEqual({ status: 'ready' })
  })

  // The 503 during shutdown needs a request in flight while the server closes: test/shutdown.test.ts.
})

describe('the probes in the log', () => {
  it('writes no access line for a probe, but does for the operations', async () => {
    const logs = captureLogs()
    const app = build({ log: logs.log })
    await app.inject({ url: '/health' })
    await app.inject({ url: '/ready' })
    await app.inject({ url: '/v1/providers' })
    const access = logs.lines.filter((line) => line.msg === 'request completed')
    expect(access.map((line) => line.url)).toEqual(['/v1/providers'])
  })
})
