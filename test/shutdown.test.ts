import { connect, type Socket } from 'node:net'
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import { describe, expect, it, vi } from 'vitest'
import { KEYS, bearer, build } from './helper.js'
import { startServer } from './process.js'

/** Resolves once a new TCP connection to the port is refused. */
async function refusesConnections (port: number) {
  await vi.waitFor(async () => {
    const outcome = await new Promise((resolve) => {
      const socket = connect(port, '127.0.0.1')
      socket.on('connect', () => { socket.destroy(); resolve('accepted') })
      socket.on('error', (error: NodeJS.ErrnoException) => resolve(error.code))
    })
    expect(outcome).toBe('ECONNREFUSED')
  }, { timeout: 5000, interval: 20 })
}

/** Reads one whole HTTP/1.1 answer (the server closes the connection after it while shutting down). */
async function readUntilClosed (socket: Socket) {
  let text = ''
  socket.setEncoding('utf8')
  socket.on('data', (chunk) => { text += chunk })
  await once(socket, 'close')
  return text
}

describe('graceful shutdown, in process', () => {
  it('finishes requests in flight while /ready answers 503 and new connections are refused', async () => {
    const app = build()
    // Hold every request in onRequest until the test lets them go: two requests are then in flight
    // for as long as the test needs, without any timing guess.
    let release!: () => void
    const gate = new Promise<void>((resolve) => { release = resolve })
    let arrived = 0
    app.addHook('onRequest', async () => { arrived++; await gate })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = app.server.address() as AddressInfo
    const base = `http://127.0.0.1:${port}`

    const listing = fetch(`${base}/v1/providers`, { headers: bearer(KEYS.alphaStandard) })
    const probe = fetch(`${base}/ready`)
    await vi.waitFor(() => expect(arrived).toBe(2))

    const closed = app.close()
    await refusesConnections(port)
    release()

    const [listed, probed] = await Promise.all([listing, probe])
    expect(listed.status).toBe(200)
    expect((await listed.json()).data).toHaveLength(3)
    expect(probed.status).toBe(503)
    expect(await probed.json()).toEqual({ error: { code: 503, message: 'Shutting down' } })
    // Clients are told to take their next request elsewhere.
    expect(listed.headers.get('connection')).toBe('close')
    expect(probed.headers.get('connection')).toBe('close')
    await closed
  })

  it('serves a request that arrives on an open connection while closing, in the error shape', async () => {
    const app = build()
    let release!: () => void
    const gate = new Promise<void>((resolve) => { release = resolve })
    app.addHook('onRequest', async (request) => { if (request.url === '/v1/providers') await gate })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = app.server.address() as AddressInfo
    // Keeps close() from finishing while the second request comes in.
    const held = fetch(`http://127.0.0.1:${port}/v1/providers`)

    // Half a request: the connection is busy, so close() leaves it open, and the rest arrives after.
    const socket = connect(port, '127.0.0.1')
    await once(socket, 'connect')
    socket.write('GET /ready HTTP/1.1\r\nHost: test\r\n')
    await new Promise((resolve) => setTimeout(resolve, 50))
    const closed = app.close()
    await refusesConnections(port)
    const answer = readUntilClosed(socket)
    socket.write('\r\n')
    const text = await answer
    expect(text).toMatch(/^HTTP\/1\.1 503 /)
    expect(text).toMatch(/\r\nconnection: close\r\n/i)
    expect(text).toMatch(/\r\n\r\n\{"error":\{"code":503,"message":"Shutting down"\}\}$/)

    release()
    expect((await held).status).toBe(401)
    await closed
  })

  it('answers /ready 200 until close starts', async () => {
    const app = build()
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = app.server.address() as AddressInfo
    expect((await fetch(`http://127.0.0.1:${port}/ready`)).status).toBe(200)
  })
})

describe('graceful shutdown of the server process', () => {
  // A request whose body has not arrived is in flight for as long as the client likes. With
  // `Expect: 100-continue` the server says when it has the request, so the test knows it is in flight.
  async function startSlowUpload (url: string) {
    const { port } = new URL(url)
    const socket = connect(Number(port), '127.0.0.1')
    await once(socket, 'connect')
    socket.write('POST /ready HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n')
    const [interim] = await once(socket, 'data')
    expect(String(interim)).toMatch(/^HTTP\/1\.1 100 Continue/)
    return { socket, port: Number(port) }
  }

  it('on SIGTERM answers the request in flight, refuses new connections, then exits 0', async () => {
    const server = await startServer()
    const { socket, port } = await startSlowUpload(server.url)

    server.process.kill('SIGTERM')
    await refusesConnections(port)
    const answer = readUntilClosed(socket)
    socket.write('{}')
    const text = await answer
    // The upload is answered in full (the method is wrong, so a 405 in the error shape) and the
    // connection closed after it.
    expect(text).toMatch(/^HTTP\/1\.1 405 /)
    expect(text).toMatch(/\r\nconnection: close\r\n/i)
    expect(text).toContain('{"error":{"code":405,"message":"Method POST is not allowed on /ready; use GET"}}')
    expect(await server.exited).toBe(0)
  })

  it('exits 1 once SHUTDOWN_GRACE_MS has passed with a request still in flight, and says so in the log', async () => {
    const server = await startServer({ SHUTDOWN_GRACE_MS: '300' })
    const { socket } = await startSlowUpload(server.url)
    const started = Date.now()
    server.process.kill('SIGTERM')
    expect(await server.exited).toBe(1)
    expect(Date.now() - started).toBeLessThan(5000)
    socket.destroy()
    const lines = server.output().trim().split('\n').map((line) => JSON.parse(line))
    expect(lines.at(-1)).toMatchObject({ level: 50, msg: 'killed by timeout (300ms)' })
  })
})
