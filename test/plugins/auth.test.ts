import { describe, expect, it } from 'vitest'
import { KEYS, bearer, build, captureLogs, makeData, sha256 } from '../helper.js'
import { portOf, rawRequest } from '../raw-http.js'

describe('bearer authentication on /v1', () => {
  // RFC 6750 section 3: every 401 names the scheme, and says the token is invalid when one was presented.
  const unauthorized: Array<[string, Record<string, string>, string, string]> = [
    ['no header', {}, 'Missing Authentication header: send Authorization: Bearer <key>', 'Bearer'],
    ['an empty header', { authorization: '' }, 'Missing Authentication header: send Authorization: Bearer <key>', 'Bearer'],
    ['another scheme', { authorization: `Basic ${KEYS.alphaManagement}` }, 'Invalid Authentication header: expected Authorization: Bearer <key>', 'Bearer'],
    ['an empty key', { authorization: 'Bearer ' }, 'Invalid Authentication header: expected Authorization: Bearer <key>', 'Bearer'],
    ['the scheme alone', { authorization: 'Bearer' }, 'Invalid Authentication header: expected Authorization: Bearer <key>', 'Bearer'],
    ['an unknown key', bearer('sk-or-v1-unknown'), 'Invalid API key', 'Bearer error="invalid_token"'],
    ['an unknown key, lowercase scheme', { authorization: 'bearer sk-or-v1-unknown' }, 'Invalid API key', 'Bearer error="invalid_token"'],
    ['the stored hash instead of the key', bearer(sha256(KEYS.alphaManagement)), 'Invalid API key', 'Bearer error="invalid_token"']
  ]

  for (const url of ['/v1/providers', '/v1/endpoints/zdr', '/v1/organization/members']) {
    it.each(unauthorized)(`${url}: answers 401 to %s, with WWW-Authenticate`, async (_case, headers, message, challenge) => {
      const app = build()
      const res = await app.inject({ url, headers })
      expect(res.statusCode).toBe(401)
      expect(res.headers['content-type']).toBe('application/json; charset=utf-8')
      expect(res.headers['www-authenticate']).toBe(challenge)
      expect(res.json()).toEqual({ error: { code: 401, message } })
    })
  }

  // RFC 9110 section 11.1: the scheme name is case-insensitive.
  it.each(['bearer', 'BEARER', 'bEaReR'])('accepts a key after the scheme written %s', async (scheme) => {
    const app = build()
    const res = await app.inject({ url: '/v1/organization/members', headers: { authorization: `${scheme} ${KEYS.alphaManagement}` } })
    expect(res.statusCode).toBe(200)
  })

  it('says insufficient_scope on the 403 to a standard key (RFC 6750 section 3.1)', async () => {
    const app = build()
    const res = await app.inject({ url: '/v1/organization/members', headers: bearer(KEYS.alphaStandard) })
    expect(res.statusCode).toBe(403)
    expect(res.headers['www-authenticate']).toBe('Bearer error="insufficient_scope"')
  })

  // Node.js keeps the first of two; a proxy in front may have checked the other one.
  it.each([
    ['two Authorization headers', `Authorization: Bearer ${KEYS.alphaManagement}\r\nAuthorization: Bearer ${KEYS.alphaStandard}\r\n`, 'The Authorization header is sent more than once'],
    ['two Authorization headers, the second one unknown', `Authorization: Bearer ${KEYS.alphaManagement}\r\nauthorization: Bearer nope\r\n`, 'The Authorization header is sent more than once'],
    ['two Host headers', `Host: other.example\r\nAuthorization: Bearer ${KEYS.alphaManagement}\r\n`, 'The Host header is sent more than once']
  ])('answers 400 to %s, in the error shape, with a request id', async (_case, headers, message) => {
    const app = build()
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { answer } = await rawRequest(portOf(app), `GET /v1/providers HTTP/1.1\r\nHost: test\r\n${headers}\r\n`)
    expect(answer?.status).toBe(400)
    expect(answer?.headers['x-request-id']).toBeTruthy()
    expect(JSON.parse(answer!.body)).toEqual({ error: { code: 400, message } })
  })

  it('accepts every key of the keys file, whatever its kind', async () => {
    const app = build()
    for (const key of Object.values(KEYS)) {
      expect((await app.inject({ url: '/v1/providers', headers: bearer(key) })).statusCode).toBe(200)
    }
  })

  it('resolves a key among many by its hash', async () => {
    const data = makeData()
    const many = Array.from({ length: 5000 }, (_, i) => ({ name: `k${i}`, sha256: sha256(`key-${i}`), kind: 'standard' as const, organization_id: 'org_alpha' }))
    const app = build({ data: { ...data, keys: [...many, ...data.keys] } })
    expect((await app.inject({ url: '/v1/providers', headers: bearer('key-4999') })).statusCode).toBe(200)
    expect((await app.inject({ url: '/v1/providers', headers: bearer('key-5000') })).statusCode).toBe(401)
  })

  it('logs a failed login below the error level, and never the key or the header', async () => {
    // At the most verbose level, so that no line anywhere can carry a key.
    const logs = captureLogs('trace')
    const app = build({ log: logs.log })
    await app.inject({ url: '/v1/providers', headers: bearer('sk-or-v1-wrong-secret') })
    await app.inject({ url: '/v1/organization/members', headers: bearer(KEYS.alphaManagement) })
    await app.inject({ url: '/v1/organization/members', headers: bearer(KEYS.alphaStandard) })
    await app.inject({ url: '/v1/providers' })
    expect(logs.lines.length).toBeGreaterThan(0)
    expect(logs.lines.every((line) => (line.level as number) < 50)).toBe(true)
    expect(logs.lines.some((line) => line.statusCode === 401)).toBe(true)
    const text = logs.raw.join('\n')
    for (const secret of ['sk-or-v1-wrong-secret', KEYS.alphaManagement, KEYS.alphaStandard]) expect(text).not.toContain(secret)
    expect(text.toLowerCase()).not.toContain('authorization":')
  })

  it('redacts the Authorization header should anything log a request', async () => {
    const logs = captureLogs()
    const app = build({ log: logs.log })
    await app.ready()
    app.log.info({ headers: { authorization: `Bearer ${KEYS.alphaManagement}`, host: 'x' } }, 'a request')
    expect(logs.raw.join('\n')).not.toContain(KEYS.alphaManagement)
    expect(logs.lines.at(-1)).toMatchObject({ headers: { authorization: '[redacted]', host: 'x' } })
  })
})
