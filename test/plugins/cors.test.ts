import { request as httpRequest } from 'node:http'
import { describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config.js'
import { KEYS, bearer, build } from '../helper.js'

const DASHBOARD = 'https://dash.example'
const ORIGINS = `${DASHBOARD}, http://localhost:5173`

const corsHeaders = (headers: Record<string, unknown>) => Object.keys(headers).filter((name) => name.startsWith('access-control-'))

const preflight = (origin: string) => ({
  method: 'OPTIONS' as const,
  url: '/v1/organization/members',
  headers: { origin, 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' }
})

describe('CORS with CORS_ORIGINS', () => {

  it('answers a preflight from a listed origin, without a key: Authorization allowed', async () => {
    const app = build({ settings: { CORS_ORIGINS: ORIGINS } })
    const res = await app.inject(preflight(DASHBOARD))
    expect(res.statusCode).toBe(204)
    expect(res.body).toBe('')
    expect(res.headers['access-control-allow-origin']).toBe(DASHBOARD)
    expect(res.headers['access-control-allow-methods']).toBe('GET, HEAD')
    expect(String(res.headers['access-control-allow-headers']).split(', ')).toContain('Authorization')
    expect(res.headers['access-control-max-age']).toBe('7200')
    expect(res.headers.vary).toContain('Origin')
  })

  it('lets a listed origin read the answers, errors included, and the rate-limit and request-id headers', async () => {
    const app = build({ settings: { CORS_ORIGINS: ORIGINS, RATE_LIMIT_PER_MINUTE: 1 } })
    for (const [headers, status] of [[bearer(KEYS.alphaStandard), 200], [{}, 401], [bearer(KEYS.alphaStandard), 429]] as const) {
      const res = await app.inject({ url: '/v1/providers', headers: { ...headers, origin: 'http://localhost:5173' } })
      expect(res.statusCode).toBe(status)
      expect(res.headers['access-control-allow-origin']).toBe('http://localhost:5173')
      expect(String(res.headers['access-control-expose-headers']).split(', ')).toEqual(expect.arrayContaining([
        'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'Retry-After', 'X-Request-Id', 'ETag'
      ]))
      expect(res.headers.vary).toContain('Origin')
    }
  })

  it('gives an origin not listed no Access-Control-* header at all, and answers its preflight 405', async () => {
    const app = build({ settings: { CORS_ORIGINS: ORIGINS } })
    const res = await app.inject({ url: '/v1/providers', headers: { ...bearer(KEYS.alphaStandard), origin: 'https://evil.example' } })
    expect(res.statusCode).toBe(200)
    expect(corsHeaders(res.headers)).toEqual([])
    const refused = await app.inject(preflight('https://evil.example'))
    expect(refused.statusCode).toBe(405)
    expect(refused.json()).toEqual({ error: { code: 405, message: 'Method OPTIONS is not allowed on /v1/organization/members; use GET' } })
    expect(corsHeaders(refused.headers)).toEqual([])
  })

  it('allows any origin with *', async () => {
    const app = build({ settings: { CORS_ORIGINS: '*' } })
    const res = await app.inject(preflight('https://anyone.example'))
    expect(res.statusCode).toBe(204)
    expect(res.headers['access-control-allow-origin']).toBe('https://anyone.example')
  })

  it('is off by default: no origin is allowed', async () => {
    const app = build()
    const res = await app.inject({ url: '/v1/providers', headers: { ...bearer(KEYS.alphaStandard), origin: DASHBOARD } })
    expect(corsHeaders(res.headers)).toEqual([])
    expect((await app.inject(preflight(DASHBOARD))).statusCode).toBe(405)
  })

  it('works over a real socket: preflight, then the call with the key', async () => {
    const app = build({ settings: { CORS_ORIGINS: ORIGINS } })
    const origin = await app.listen({ host: '127.0.0.1', port: 0 })
    const send = (method: string, headers: Record<string, string>) => new Promise<{ status: number, headers: Record<string, unknown> }>((resolve, reject) => {
      httpRequest(`${origin}/v1/providers`, { method, headers }, (res) => {
        res.resume()
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers }))
      }).on('error', reject).end()
    })
    const pre = await send('OPTIONS', { origin: DASHBOARD, 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' })
    expect(pre.status).toBe(204)
    expect(pre.headers['access-control-allow-origin']).toBe(DASHBOARD)
    const call = await send('GET', { origin: DASHBOARD, ...bearer(KEYS.alphaStandard) })
    expect(call.status).toBe(200)
    expect(call.headers['access-control-allow-origin']).toBe(DASHBOARD)
  })
})

describe('CORS_ORIGINS at start', () => {
  it.each(['dash.example', 'https://dash.example/path', 'ftp://dash.example'])('refuses %j', (value) => {
    expect(() => loadConfig({ CORS_ORIGINS: value })).toThrow(/CORS_ORIGINS/)
  })
})
