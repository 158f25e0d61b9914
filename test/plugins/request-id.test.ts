import { describe, expect, it } from 'vitest'
import { KEYS, bearer, build, captureLogs, failingSnapshots } from '../helper.js'

// 72 random bits per process (12 base64url characters), then a base-36 counter.
const GENERATED = /^[A-Za-z0-9_-]{12}-[0-9a-z]+$/

describe('the request id', () => {
  it.each([
    ['a listing', '/v1/providers', bearer(KEYS.alphaManagement), 200],
    ['a missing key', '/v1/providers', {}, 401],
    ['an unknown key', '/v1/providers', bearer('nope'), 401],
    ['a standard key on members', '/v1/organization/members', bearer(KEYS.alphaStandard), 403],
    ['a bad query', '/v1/organization/members?limit=0', bearer(KEYS.alphaManagement), 400],
    ['an unknown path', '/v1/nothing', {}, 404],
    ['a malformed URL', '/v1/providers%', {}, 400],
    ['a probe', '/health', {}, 200]
  ])('is on the answer to %s (%s)', async (_name, url, headers, status) => {
    const app = build()
    const res = await app.inject({ url, headers })
    expect(res.statusCode).toBe(status)
    expect(res.headers['x-request-id']).toMatch(GENERATED)
  })

  it('is on a 405 and on a 500', async () => {
    const app = build({ snapshots: failingSnapshots() })
    const failed = await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaManagement) })
    expect(failed.statusCode).toBe(500)
    expect(failed.headers['x-request-id']).toMatch(GENERATED)
    const wrongMethod = await app.inject({ method: 'DELETE', url: '/v1/providers' })
    expect(wrongMethod.statusCode).toBe(405)
    expect(wrongMethod.headers['x-request-id']).toMatch(GENERATED)
  })

  it('is new for every request', async () => {
    const app = build()
    const ids = new Set<unknown>()
    for (let i = 0; i < 20; i++) ids.add((await app.inject({ url: '/health' })).headers['x-request-id'])
    expect(ids.size).toBe(20)
  })

  it.each([
    'f47ac10b-58cc-4372-a567-0e02b2c3d479',
    '4bf92f3577b34da6a3ce929d0e0e4736',
    'Root.1-abc_DEF',
    'x'.repeat(128)
  ])('keeps a well-formed id the proxy sent: %s', async (incoming) => {
    const app = build()
    const res = await app.inject({ url: '/v1/providers', headers: { 'x-request-id': incoming } })
    expect(res.headers['x-request-id']).toBe(incoming)
  })

  it.each([
    ['too long', 'x'.repeat(129)],
    ['empty', ''],
    ['with a space', 'abc def'],
    ['with markup', '<script>'],
    ['with JSON', '{"level":50}'],
    ['with a comma (two headers joined)', 'abc,def'],
    // It would be on every line of the request.
    ['an API key', `sk-or-v1-${'0f1e'.repeat(16)}`],
    ['a key\'s hash', 'a5c4e807126556732b21be35230cd1832a1dfc41ea032cb651c0f578ccc222ce']
  ])('replaces an id that is %s', async (_name, incoming) => {
    const app = build()
    const res = await app.inject({ url: '/v1/providers', headers: { 'x-request-id': incoming } })
    expect(res.headers['x-request-id']).toMatch(GENERATED)
  })

  it('is the reqId of every log line of the request', async () => {
    // At the most verbose level: the failed login's own line must carry the id too.
    const logs = captureLogs('trace')
    const app = build({ log: logs.log })
    const mine = await app.inject({ url: '/v1/providers', headers: { 'x-request-id': 'from-the-proxy-1' } })
    const generated = await app.inject({ url: '/v1/organization/members', headers: bearer(KEYS.alphaStandard) })
    const access = logs.lines.filter((line) => line.msg === 'request completed')
    expect(access).toHaveLength(2)
    expect(access[0]).toMatchObject({ reqId: 'from-the-proxy-1', statusCode: 401 })
    expect(mine.headers['x-request-id']).toBe('from-the-proxy-1')
    expect(access[1]).toMatchObject({ reqId: generated.headers['x-request-id'], statusCode: 403 })
    expect(logs.lines.filter((line) => line.reqId === 'from-the-proxy-1').map((line) => line.msg)).toEqual(['unauthorized: missing authorization header', 'request completed'])
    expect(logs.lines.every((line) => typeof line.reqId === 'string')).toBe(true)
  })
})
