import { connect } from 'node:net'
import { once } from 'node:events'
import { afterEach, describe, expect, it } from 'vitest'
import { KEYS, bearer, build, captureLogs, failingDirectory, makeData } from '../helper.js'

describe('the error shape', () => {
  let app: ReturnType<typeof build>
  afterEach(() => app.close())

  it.each(['/v1/nothing-here', '/nothing-here', '/', '/v1', '/v2/providers'])('answers 404 with the error shape for %s', async (url) => {
    app = build()
    const res = await app.inject({ url, headers: bearer(KEYS.alphaManagement) })
    expect(res.statusCode).toBe(404)
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8')
    expect(res.json()).toEqual({ error: { code: 404, message: `Not found: GET ${url}` } })
  })

  it.each(['POST', 'PUT', 'PATCH', 'DELETE'] as const)('answers %s on a known path with 405 and Allow', async (method) => {
    app = build()
    const res = await app.inject({ method, url: '/v1/organization/members?limit=5', headers: bearer(KEYS.alphaManagement) })
    expect(res.statusCode).toBe(405)
    expect(res.headers.allow).toBe('GET, HEAD')
    expect(res.json()).toEqual({ error: { code: 405, message: `Method ${method} is not allowed on /v1/organization/members; use GET` } })
  })

  // No route takes a body, so none is parsed: the method is what is wrong, whatever the body says.
  it.each([
    ['malformed JSON', 'application/json', '{"broken'],
    ['a content type nobody parses', 'application/x-whatever', 'x'.repeat(2 * 1024 * 1024)]
  ])('answers a wrong method with %s as body with 405, without a key', async (_case, contentType, payload) => {
    app = build()
    const res = await app.inject({ method: 'POST', url: '/v1/providers', headers: { 'content-type': contentType }, payload })
    expect(res.statusCode).toBe(405)
    expect(res.json()).toEqual({ error: { code: 405, message: 'Method POST is not allowed on /v1/providers; use GET' } })
  })

  it('answers HEAD like GET, without a body', async () => {
    app = build()
    const res = await app.inject({ method: 'HEAD', url: '/v1/providers', headers: bearer(KEYS.alphaManagement) })
    expect(res.statusCode).toBe(200)
    expect(res.body).toBe('')
  })

  it('answers 500 with a generic message when the data layer fails, and logs the cause with the request id', async () => {
    const failure = new Error('disk on fire at /var/secret/path')
    const logs = captureLogs()
    app = build({ directory: failingDirectory(makeData(), failure, ['providers', 'memberPageJson']), log: logs.log })
    for (const url of ['/v1/providers', '/v1/organization/members']) {
      const res = await app.inject({ url, headers: bearer(KEYS.alphaManagement) })
      expect(res.statusCode).toBe(500)
      expect(res.headers['content-type']).toBe('application/json; charset=utf-8')
      expect(res.json()).toEqual({ error: { code: 500, message: 'Internal Server Error' } })
      expect(res.body).not.toContain('disk on fire')
      expect(res.body).not.toContain('at ')
    }
    const logged = logs.lines.filter((line) => line.level === 50)
    expect(logged.length).toBeGreaterThanOrEqual(2)
    expect(logged[0]!.reqId).toBeTruthy()
    expect((logged[0]!.err as { message: string }).message).toBe('disk on fire at /var/secret/path')
    // The endpoints list still works: one broken source does not take the others down.
    expect((await app.inject({ url: '/v1/endpoints/zdr', headers: bearer(KEYS.alphaManagement) })).statusCode).toBe(200)
  })

  it('writes one access line per request, with method, path, status, duration and request id', async () => {
    const logs = captureLogs()
    app = build({ log: logs.log })
    const requests = [
      { url: '/v1/providers?x=1', headers: bearer(KEYS.alphaManagement), status: 200 },
      { url: '/v1/missing', headers: bearer(KEYS.alphaManagement), status: 404 },
      { url: '/v1/organization/members?limit=0', headers: bearer(KEYS.alphaManagement), status: 400 },
      { url: '/v1/providers', headers: bearer('sk-or-v1-wrong'), status: 401 },
      { url: '/v1/providers', headers: {}, status: 401 },
      { url: '/v1/organization/members', headers: bearer(KEYS.alphaStandard), status: 403 },
      { url: '/v1/providers', method: 'DELETE' as const, headers: {}, status: 405 },
      { url: '/v1/providers%', headers: {}, status: 400 }
    ]
    for (const { url, method, headers } of requests) await app.inject({ url, method, headers })
    // Nothing but the access lines: one a request, whatever its outcome.
    expect(logs.lines.map((line) => [line.url, line.statusCode, line.msg])).toEqual(requests.map((r) => [r.url, r.status, 'request completed']))
    expect(logs.lines[0]).toMatchObject({ method: 'GET', url: '/v1/providers?x=1', statusCode: 200, level: 30 })
    expect(typeof logs.lines[0]!.responseTime).toBe('number')
    expect(new Set(logs.lines.map((line) => line.reqId)).size).toBe(requests.length)
  })

  it.each(['/v1/providers%', '/%E0%A4%A'])('answers a malformed URL %s with 400 and the error shape', async (url) => {
    app = build()
    const res = await app.inject({ url, headers: bearer(KEYS.alphaManagement) })
    expect(res.statusCode).toBe(400)
    expect(res.json()).toEqual({ error: { code: 400, message: `'${url}' is not a valid url component` } })
  })

  // Requests Node cannot parse never reach Fastify's router: only a real socket shows the answer.
  it.each([
    ['garbage instead of HTTP', 'NOT HTTP AT ALL\r\n\r\n', 400],
    ['headers larger than Node accepts', `GET /v1/providers HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20000)}\r\n\r\n`, 431]
  ])('answers %s with the error shape', async (_case, raw, status) => {
    app = build()
    const address = await app.listen({ host: '127.0.0.1', port: 0 })
    const socket = connect(Number(new URL(address).port), '127.0.0.1')
    let answer = ''
    socket.on('data', (chunk) => { answer += chunk })
    socket.on('error', () => {})
    socket.write(raw)
    await once(socket, 'close')
    const [head, body] = answer.split('\r\n\r\n')
    expect(head).toMatch(new RegExp(`^HTTP/1.1 ${status} `))
    expect(head).toContain('Content-Type: application/json')
    expect(JSON.parse(body!)).toEqual({ error: { code: status, message: expect.any(String) } })
  })
})
