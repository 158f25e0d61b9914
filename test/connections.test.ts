import { once } from 'node:events'
import { describe, expect, it } from 'vitest'
import { loadConfig } from '../src/config.js'
import { KEYS, bearer, build, captureLogs, makeData, makeProvider } from './helper.js'
import { exchange, openConnection, parseAnswer, portOf } from './raw-http.js'

const defaults = loadConfig({})

/** An app listening with `limits` over the defaults. */
async function listening (limits: Partial<typeof defaults>, log?: ReturnType<typeof captureLogs>['log']) {
  const app = build({ settings: { ...defaults, ...limits }, log })
  await app.listen({ host: '127.0.0.1', port: 0 })
  return app
}

/** Writes `bytes` one byte per turn of `tick` until the connection closes; answers what came back. */
function trickle (socket: Awaited<ReturnType<typeof openConnection>>, bytes: string, tick: (next: () => void) => void) {
  let sent = 0
  const next = () => {
    if (socket.destroyed || sent >= bytes.length) return
    socket.write(bytes[sent++]!)
    tick(next)
  }
  const answer = exchange(socket)
  next()
  return answer
}

// The timers' values here are the settings under test, made short; the tests wait for the server
// to act, never for a time of their own.
describe('connection timeouts', () => {
  it('cuts a request whose body trickles in, with 408 in the error shape and an access line, at REQUEST_TIMEOUT_MS', async () => {
    const logs = captureLogs()
    // The inactivity timeout stays long: a byte every 50 ms keeps the connection active.
    const app = await listening({ HEADERS_TIMEOUT_MS: 300, REQUEST_TIMEOUT_MS: 300 }, logs.log)
    const socket = await openConnection(portOf(app))
    socket.write(`POST /ready HTTP/1.1\r\nHost: test\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\n`)
    const answer = await trickle(socket, 'x'.repeat(1000), (next) => setTimeout(next, 50))
    expect(answer?.status).toBe(408)
    expect(JSON.parse(answer!.body)).toEqual({ error: { code: 408, message: 'Request Timeout' } })
    await once(socket, 'close')
    expect(logs.lines.filter((line) => line.statusCode === 408)).toEqual([expect.objectContaining({ reqId: answer!.headers['x-request-id'], clientError: 'ERR_HTTP_REQUEST_TIMEOUT' })])
  })

  it('cuts a request whose headers trickle in, with 408, at HEADERS_TIMEOUT_MS', async () => {
    const app = await listening({ HEADERS_TIMEOUT_MS: 300 })
    const socket = await openConnection(portOf(app))
    const answer = await trickle(socket, `GET /health HTTP/1.1\r\nHost: test\r\nX-Slow: ${'a'.repeat(1000)}\r\n\r\n`, (next) => setTimeout(next, 50))
    expect(answer?.status).toBe(408)
    await once(socket, 'close')
  })

  it('gives no second answer on a connection whose answer is still going out when the next request times out', async () => {
    const logs = captureLogs()
    // An answer of some 5 MB to a client that does not read it: most of it waits in the server's socket.
    const providers = Array.from({ length: 20_000 }, (_, i) => makeProvider(i))
    const app = build({ data: makeData({ providers }), settings: { ...defaults, HEADERS_TIMEOUT_MS: 300 }, log: logs.log })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const socket = await openConnection(portOf(app))
    const { authorization } = bearer(KEYS.alphaStandard)
    // A second request whose headers never end, sent with the first (pipelined): it times out.
    socket.write(`GET /v1/providers HTTP/1.1\r\nHost: test\r\nAuthorization: ${authorization}\r\n\r\nGET /health HTTP/1.1\r\nHost: te`)
    await expect.poll(() => logs.lines.some((line) => line.clientError === 'ERR_HTTP_REQUEST_TIMEOUT'), { timeout: 5000 }).toBe(true)

    const chunks: Buffer[] = []
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    await once(socket, 'close')
    const text = Buffer.concat(chunks).toString('latin1')
    const answer = parseAnswer(text)
    expect(answer?.status).toBe(200)
    // The whole answer, and nothing after it: a 408 there would read as the answer to another request.
    expect(text.length - text.indexOf('\r\n\r\n') - 4).toBe(Number(answer!.headers['content-length']))
  })

  it('closes a connection that sends nothing, or nothing more, after KEEP_ALIVE_TIMEOUT_MS', async () => {
    const app = await listening({ KEEP_ALIVE_TIMEOUT_MS: 200 })
    const silent = await openConnection(portOf(app))
    const served = await openConnection(portOf(app))
    expect((await exchange(served, 'GET /health HTTP/1.1\r\nHost: test\r\n\r\n'))?.status).toBe(200)
    // The server ends both: no answer, just the end of the connection.
    expect(await exchange(silent)).toBeUndefined()
    expect(await exchange(served)).toBeUndefined()
  })

  it('tells a keep-alive client how long an idle connection lasts', async () => {
    const app = await listening({})
    const socket = await openConnection(portOf(app))
    const answer = await exchange(socket, 'GET /health HTTP/1.1\r\nHost: test\r\n\r\n')
    expect(answer?.headers['keep-alive']).toBe(`timeout=${defaults.KEEP_ALIVE_TIMEOUT_MS / 1000}`)
    socket.destroy()
  })

  it('holds the defaults docs/configuration.md gives', () => {
    expect(defaults).toMatchObject({ KEEP_ALIVE_TIMEOUT_MS: 72000, HEADERS_TIMEOUT_MS: 10000, REQUEST_TIMEOUT_MS: 30000, MAX_CONNECTIONS: 8000 })
  })
})

describe('the connection cap', () => {
  it('closes a connection past MAX_CONNECTIONS on arrival, and takes new ones once others have gone', async () => {
    const app = await listening({ MAX_CONNECTIONS: 2 })
    const request = `GET /v1/providers HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer ${KEYS.alphaStandard}\r\n\r\n`
    const first = await openConnection(portOf(app))
    const second = await openConnection(portOf(app))
    expect((await exchange(first, request))?.status).toBe(200)
    expect((await exchange(second, request))?.status).toBe(200)

    const dropped = once(app.server, 'drop')
    const third = await openConnection(portOf(app))
    await dropped
    expect(await exchange(third, request)).toBeUndefined()

    const gone = once(first, 'close')
    first.destroy()
    await gone
    // The server counts the connection as gone once it has seen it close.
    await expect.poll(async () => {
      const fourth = await openConnection(portOf(app))
      const answer = await exchange(fourth, request)
      fourth.destroy()
      return answer?.status
    }, { timeout: 10_000, interval: 1 }).toBe(200)
    second.destroy()
  })
})
