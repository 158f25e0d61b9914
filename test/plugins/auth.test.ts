import { afterEach, describe, expect, it } from 'vitest'
import { KEYS, bearer, build, captureLogs, makeData, sha256 } from '../helper.js'

describe('bearer authentication on /v1', () => {
  let app: ReturnType<typeof build>
  afterEach(() => app.close())

  const unauthorized: Array<[string, Record<string, string>, string]> = [
    ['no header', {}, 'Missing Authentication header: send Authorization: Bearer <key>'],
    ['an empty header', { authorization: '' }, 'Missing Authentication header: send Authorization: Bearer <key>'],
    ['another scheme', { authorization: `Basic ${KEYS.alphaManagement}` }, 'Invalid Authentication header: expected Authorization: Bearer <key>'],
    ['a lowercase scheme', { authorization: `bearer ${KEYS.alphaManagement}` }, 'Invalid Authentication header: expected Authorization: Bearer <key>'],
    ['an empty key', { authorization: 'Bearer ' }, 'Invalid Authentication header: expected Authorization: Bearer <key>'],
    ['the scheme alone', { authorization: 'Bearer' }, 'Invalid Authentication header: expected Authorization: Bearer <key>'],
    ['an unknown key', bearer('sk-or-v1-unknown'), 'Invalid API key'],
    ['the stored hash instead of the key', bearer(sha256(KEYS.alphaManagement)), 'Invalid API key']
  ]

  for (const url of ['/v1/providers', '/v1/endpoints/zdr', '/v1/organization/members']) {
    it.each(unauthorized)(`${url}: answers 401 to %s`, async (_case, headers, message) => {
      app = build()
      const res = await app.inject({ url, headers })
      expect(res.statusCode).toBe(401)
      expect(res.headers['content-type']).toBe('application/json; charset=utf-8')
      expect(res.json()).toEqual({ error: { code: 401, message } })
    })
  }

  it('accepts every key of the keys file, whatever its kind', async () => {
    app = build()
    for (const key of Object.values(KEYS)) {
      expect((await app.inject({ url: '/v1/providers', headers: bearer(key) })).statusCode).toBe(200)
    }
  })

  it('resolves a key among many by its hash', async () => {
    const data = makeData()
    const many = Array.from({ length: 5000 }, (_, i) => ({ name: `k${i}`, sha256: sha256(`key-${i}`), kind: 'standard' as const, organization_id: 'org_alpha' }))
    app = build({ data: { ...data, keys: [...many, ...data.keys] } })
    expect((await app.inject({ url: '/v1/providers', headers: bearer('key-4999') })).statusCode).toBe(200)
    expect((await app.inject({ url: '/v1/providers', headers: bearer('key-5000') })).statusCode).toBe(401)
  })

  it('logs a failed login below the error level, and never the key or the header', async () => {
    // At the most verbose level, so that no line anywhere can carry a key.
    const logs = captureLogs('trace')
    app = build({ log: logs.log })
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
    app = build({ log: logs.log })
    await app.ready()
    app.log.info({ headers: { authorization: `Bearer ${KEYS.alphaManagement}`, host: 'x' } }, 'a request')
    expect(logs.raw.join('\n')).not.toContain(KEYS.alphaManagement)
    expect(logs.lines.at(-1)).toMatchObject({ headers: { authorization: '[redacted]', host: 'x' } })
  })
})
