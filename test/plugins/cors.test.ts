import { request as httpRequest } from 'node:http'
import { describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config.js'
import { OPERATIONS } from '../../src/registry.js'
import { KEYS, bearer, build } from '../helper.js'
import { sdkRequestHeaders } from '../sdk-headers.js'

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

  it('allows the headers the official SDK sends when an app names itself, on each operation', async () => {
    const sent = await sdkRequestHeaders()
    expect(sent).toEqual({
      providersList: ['HTTP-Referer', 'X-OpenRouter-Categories', 'X-OpenRouter-Title'],
      endpointsListZdrEndpoints: ['HTTP-Referer', 'X-OpenRouter-Categories', 'X-OpenRouter-Title'],
      organizationListMembers: ['HTTP-Referer', 'X-OpenRouter-Categories', 'X-OpenRouter-Title']
    })
    const app = build({ settings: { CORS_ORIGINS: ORIGINS } })
    // As Chromium writes them in a preflight: lowercased, sorted, comma-separated, Authorization among them.
    const requested = ['authorization', ...new Set(Object.values(sent).flat().map((name) => name.toLowerCase()))].sort()
    for (const { path } of OPERATIONS) {
      const res = await app.inject({
        method: 'OPTIONS',
        url: `/v1${path}`,
        headers: { origin: DASHBOARD, 'access-control-request-method': 'GET', 'access-control-request-headers': requested.join(',') }
      })
      expect(res.statusCode, path).toBe(204)
      expect(res.headers['access-control-allow-origin'], path).toBe(DASHBOARD)
      expect(String(res.headers['access-control-allow-headers']).toLowerCase().split(', '), path).toEqual(expect.arrayContaining(requested))
    }
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
