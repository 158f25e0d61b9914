import { describe, expect, it } from 'vitest'
import { KEYS, bearer, build, captureLogs, failingSnapshots, makeData } from '../helper.js'
import { portOf, rawRequest } from '../raw-http.js'

const accessLines = (lines: Array<Record<string, unknown>>) => lines.filter((line) => line.msg === 'request completed')

describe('the error shape', () => {
  it.each(['/v1/nothing-here', '/nothing-here', '/v1', '/v1/', '/v2/providers'])('answers 404 with the error shape for %s', async (url) => {
    const app = build()
    const res = await app.inject({ url, headers: bearer(KEYS.alphaManagement) })
    expect(res.statusCode).toBe(404)
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8')
    expect(res.json()).toEqual({ error: { code: 404, message: `Not found: GET ${url}` } })
  })

  it.each(['POST', 'PUT', 'PATCH', 'DELETE'] as const)('answers %s on a known path with 405 and Allow', async (method) => {
    const app = build()
    const res = await app.inject({ method, url: '/v1/organization/members?limit=5', headers: bearer(KEYS.alphaManagement) })
    expect(res.statusCode).toBe(405)
    expect(res.headers.allow).toBe('GET, HEAD')
    expect(res.json()).toEqual({ error: { code: 405, message: `Method ${method} is not allowed on /v1/organization/members; use GET` } })
  })

  // No route takes a body, so none is parsed: the method is what is wrong, whatever the body says.
  it.each([
    ['malformed JSON', 'application/json', '{"broken'],
    ['a content type nobody parses', 'application/x-whatever', 'x'.repeat(1024)]
  ])('answers a wrong method with %s as body with 405, without a key', async (_case, contentType, payload) => {
    const app = build()
    const res = await app.inject({ method: 'POST', url: '/v1/providers', headers: { 'content-type': contentType }, payload })
    expect(res.statusCode).toBe(405)
    expect(res.json()).toEqual({ error: { code: 405, message: 'Method POST is not allowed on /v1/providers; use GET' } })
  })

  it('answers HEAD like GET, without a body', async () => {
    const app = build()
    const res = await app.inject({ method: 'HEAD', url: '/v1/providers', headers: bearer(KEYS.alphaManagement) })
    expect(res.statusCode).toBe(200)
    expect(res.body).toBe('')
  })

  it('answers 500 with a generic message when the data layer fails, and logs the cause with the request id', async () => {
    const failure = new Error('disk on fire at /var/secret/path')
    const logs = captureLogs()
    const app = build({ snapshots: failingSnapshots(makeData(), failure, ['providers', 'members']), log: logs.log })
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
    const app = build({ log: logs.log })
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
    const app = build()
    const res = await app.inject({ url, headers: bearer(KEYS.alphaManagement) })
    expect(res.statusCode).toBe(400)
    expect(res.json()).toEqual({ error: { code: 400, message: `'${url}' is not a valid url component` } })
  })

  // Requests Node cannot parse never reach Fastify's router: only a real socket shows the answer.
  const H = 'GET /health HTTP/1.1\r\nHost: test\r\n'
  const CHUNKED_POST = 'POST /health HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n'
  it.each([
    ['garbage instead of HTTP', 'NOT HTTP AT ALL\r\n\r\n', 400],
    ['Content-Length and Transfer-Encoding both (smuggling)', `${H}Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`, 400],
    ['two different Content-Length headers (smuggling)', `${H}Content-Length: 1\r\nContent-Length: 2\r\n\r\nab`, 400],
    ['a Transfer-Encoding that does not end in chunked', `${H}Transfer-Encoding: chunked, identity\r\n\r\n`, 400],
    ['an unknown Transfer-Encoding', `${H}Transfer-Encoding: xchunked\r\n\r\n`, 400],
    ['a space before the colon', `${H}Content-Length : 1\r\n\r\na`, 400],
    ['a folded header line', `${H}X-A: a\r\n b\r\n\r\n`, 400],
    ['a folded Transfer-Encoding', `${H}Transfer-Encoding:\r\n chunked\r\n\r\n`, 400],
    ['a space in a header name', `${H}X A: b\r\n\r\n`, 400],
    ['a header line starting with a space', `${H} X-A: b\r\n\r\n`, 400],
    ['bare LF line ends', 'GET /health HTTP/1.1\nHost: test\n\n', 400],
    ['a CR alone in a header value', `${H}X-A: a\rb\r\n\r\n`, 400],
    ['a NUL in a header value', `${H}X-A: a\0b\r\n\r\n`, 400],
    ['a Content-Length that is not a number', `${H}Content-Length: abc\r\n\r\n`, 400],
    ['a negative Content-Length', `${H}Content-Length: -1\r\n\r\n`, 400],
    ['a chunk size that is not hex', `${CHUNKED_POST}zz\r\n`, 400],
    ['a chunk without its CRLF', `${CHUNKED_POST}1\r\nxx0\r\n\r\n`, 400],
    ['a malformed chunk extension', `${CHUNKED_POST}1;a"b\r\nx\r\n0\r\n\r\n`, 400],
    ['a method Node does not know', 'FOO /health HTTP/1.1\r\nHost: test\r\n\r\n', 400],
    ['a space in the method', 'GE T /health HTTP/1.1\r\nHost: test\r\n\r\n', 400],
    ['an unknown HTTP version', 'GET /health HTTP/9.9\r\nHost: test\r\n\r\n', 400],
    ['a space in the URL', 'GET /he alth HTTP/1.1\r\nHost: test\r\n\r\n', 400],
    ['a control character in the URL', 'GET /he\x01alth HTTP/1.1\r\nHost: test\r\n\r\n', 400],
    ['the HTTP/2 preface', 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 400],
    ['headers larger than Node accepts', `${H}X-Big: ${'a'.repeat(20000)}\r\n\r\n`, 431],
    ['more header lines than Node accepts', `${H}${Array.from({ length: 3000 }, (_, i) => `X-${i}: a\r\n`).join('')}\r\n`, 431]
  ])('answers %s in the error shape, with a request id and an access line', async (_case, raw, status) => {
    const logs = captureLogs()
    const app = build({ log: logs.log })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { answer, keptOpen } = await rawRequest(portOf(app), raw)
    expect(answer?.status).toBe(status)
    expect(answer?.headers['content-type']).toBe('application/json; charset=utf-8')
    expect(JSON.parse(answer!.body)).toEqual({ error: { code: status, message: expect.stringMatching(/^(Bad Request|Request Header Fields Too Large): /) } })
    expect(keptOpen).toBe(false)
    const id = answer!.headers['x-request-id']
    expect(id).toBeTruthy()
    expect(accessLines(logs.lines)).toEqual([expect.objectContaining({ reqId: id, statusCode: status, msg: 'request completed', clientError: expect.stringMatching(/^HPE_/) })])
  })

  it('answers an HTTP/1.1 request without Host with 400 in the error shape, and serves HTTP/1.0 without one', async () => {
    const logs = captureLogs()
    const app = build({ log: logs.log })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { answer } = await rawRequest(portOf(app), `GET /v1/providers HTTP/1.1\r\nAuthorization: Bearer ${KEYS.alphaManagement}\r\n\r\n`)
    expect(answer?.status).toBe(400)
    expect(JSON.parse(answer!.body)).toEqual({ error: { code: 400, message: 'Missing Host header: HTTP/1.1 requires one' } })
    expect(accessLines(logs.lines)).toEqual([expect.objectContaining({ reqId: answer!.headers['x-request-id'], statusCode: 400, url: '/v1/providers' })])
    const old = await rawRequest(portOf(app), `GET /v1/providers HTTP/1.0\r\nAuthorization: Bearer ${KEYS.alphaManagement}\r\n\r\n`)
    expect(old.answer?.status).toBe(200)
  })

  it('answers an expectation it cannot meet with 417 in the error shape, with a request id, an access line and metrics', async () => {
    const logs = captureLogs()
    const app = build({ log: logs.log })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { answer } = await rawRequest(portOf(app), `GET /v1/providers HTTP/1.1\r\nHost: test\r\nExpect: 200-ok\r\nAuthorization: Bearer ${KEYS.alphaManagement}\r\n\r\n`)
    expect(answer?.status).toBe(417)
    expect(answer?.headers['content-type']).toBe('application/json; charset=utf-8')
    expect(JSON.parse(answer!.body)).toEqual({ error: { code: 417, message: "Expectation Failed: 'Expect: 200-ok' is not supported; only 100-continue is" } })
    const id = answer!.headers['x-request-id']
    expect(id).toBeTruthy()
    expect(accessLines(logs.lines)).toEqual([expect.objectContaining({ reqId: id, statusCode: 417, url: '/v1/providers' })])
    const metrics = (await app.inject({ url: '/metrics' })).body
    expect(metrics).toContain('http_requests_total{method="GET",route="/v1/providers",status="417"} 1')
    // 100-continue is met: the request is served.
    const continued = await rawRequest(portOf(app), `GET /v1/providers HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\nAuthorization: Bearer ${KEYS.alphaManagement}\r\n\r\n`)
    expect(continued.answer?.status).toBe(100)
  })

  it('answers CONNECT with 405 in the error shape, with a request id and an access line', async () => {
    const logs = captureLogs()
    const app = build({ log: logs.log })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { answer, keptOpen } = await rawRequest(portOf(app), 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n')
    expect(answer?.status).toBe(405)
    expect(answer?.headers.allow).toBe('GET, HEAD')
    expect(JSON.parse(answer!.body)).toEqual({ error: { code: 405, message: 'Method CONNECT is not allowed on example.com:443; use GET' } })
    expect(keptOpen).toBe(false)
    expect(accessLines(logs.lines)).toEqual([expect.objectContaining({ reqId: answer!.headers['x-request-id'], statusCode: 405, method: 'CONNECT', url: 'example.com:443' })])
  })
})

describe('bounded echoes', () => {
  // Not a hex digit: a long run of them is shaped like a key's hash, and redacted.
  const long = `/v1/${'x'.repeat(15000)}`

  it('logs at most 1 KiB of a 15 KB URL', async () => {
    const logs = captureLogs()
    const app = build({ log: logs.log })
    await app.inject({ url: `${long}?q=${'b'.repeat(100)}` })
    const url = logs.lines[0]!.url as string
    expect(url.length).toBeLessThanOrEqual(1025)
    expect(url.startsWith('/v1/xxxx')).toBe(true)
    expect(logs.raw[0]!.length).toBeLessThan(1500)
  })

  it.each([
    ['a 404', { url: long }, 404, `Not found: GET /v1/${'x'.repeat(196)}…`],
    ['a 405', { url: long.replace('/v1/', '/v1/providers/'), method: 'POST' as const }, 404, undefined],
    ['a malformed URL', { url: `${long}%` }, 400, `'/v1/${'x'.repeat(196)}…' is not a valid url component`],
    ['a bad query value', { url: `/v1/organization/members?limit=${'9'.repeat(15000)}`, headers: bearer(KEYS.alphaManagement) }, 400, undefined]
  ])('answers %s with a message of bounded length', async (_case, request, status, message) => {
    const app = build()
    const res = await app.inject(request)
    expect(res.statusCode).toBe(status)
    const text = res.json().error.message as string
    expect(text.length).toBeLessThan(300)
    if (message !== undefined) expect(text).toBe(message)
  })
})
