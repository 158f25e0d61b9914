import { once } from 'node:events'
import { connect } from 'node:net'
import { describe, expect, it } from 'vitest'
import { BODY_LIMIT_BYTES } from '../../src/app.js'
import { KEYS, bearer, build } from '../helper.js'
import { exchange, openConnection, portOf, rawRequest } from '../raw-http.js'

const KEY = `Authorization: Bearer ${KEYS.alphaManagement}\r\n`

// No operation takes a body. A few bytes sent by mistake are dropped; anything over the bound is
// refused as soon as it is known, and not read any further.
describe('request bodies', () => {
  it('answers 413 in the error shape to a body over the bound announced by Content-Length, before it arrives', async () => {
    const app = build()
    await app.listen({ host: '127.0.0.1', port: 0 })
    // 50 MiB announced, none sent: the answer cannot wait for the body.
    for (const method of ['GET', 'POST']) {
      const { answer, keptOpen } = await rawRequest(portOf(app), `${method} /v1/providers HTTP/1.1\r\nHost: test\r\n${KEY}Content-Length: ${50 * 1024 * 1024}\r\n\r\n`)
      expect(answer?.status).toBe(413)
      expect(answer?.headers.connection).toBe('close')
      expect(JSON.parse(answer!.body)).toEqual({ error: { code: 413, message: 'Request body is too large' } })
      expect(keptOpen).toBe(false)
    }
  })

  it('answers 413 to a chunked body once it passes the bound, without waiting for its end', async () => {
    const app = build()
    await app.listen({ host: '127.0.0.1', port: 0 })
    const chunk = 'x'.repeat(BODY_LIMIT_BYTES + 1)
    for (const method of ['GET', 'POST']) {
      // The body's last chunk never comes.
      const { answer, keptOpen } = await rawRequest(portOf(app), `${method} /v1/providers HTTP/1.1\r\nHost: test\r\n${KEY}Transfer-Encoding: chunked\r\n\r\n${chunk.length.toString(16)}\r\n${chunk}\r\n`)
      expect(answer?.status).toBe(413)
      expect(keptOpen).toBe(false)
    }
  })

  // The rest of a body refused is read and dropped so that the client gets its answer (a client that
  // fetches does: test/closing-connections.test.ts), but not for as long as the client likes.
  it('ends its side after a 413, and closes the connection in a while however long the client goes on sending', async () => {
    const app = build()
    await app.listen({ host: '127.0.0.1', port: 0 })
    // Half-open allowed: the client does not end its side when the server ends its own.
    const socket = connect({ port: portOf(app), host: '127.0.0.1', allowHalfOpen: true })
    await once(socket, 'connect')
    socket.on('error', () => {})
    const ended = once(socket, 'end')
    const closed = new Promise((resolve) => socket.on('close', resolve))
    const answer = exchange(socket, `POST /v1/providers HTTP/1.1\r\nHost: test\r\n${KEY}Content-Type: application/json\r\nContent-Length: ${1024 * 1024 * 1024}\r\n\r\n`)
    const chunk = Buffer.alloc(16 * 1024, 'x')
    const sending = setInterval(() => { if (socket.writable) socket.write(chunk) }, 10)
    try {
      expect((await answer)?.status).toBe(413)
      await ended
      await closed
    } finally {
      clearInterval(sending)
    }
  })

  it('answers 413 to a 2 MiB body through inject too', async () => {
    const app = build()
    const res = await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaManagement), payload: 'x'.repeat(2 * 1024 * 1024) })
    expect(res.statusCode).toBe(413)
  })

  it('reads and drops a body within the bound, and keeps the connection', async () => {
    const app = build()
    await app.listen({ host: '127.0.0.1', port: 0 })
    const body = 'x'.repeat(BODY_LIMIT_BYTES)
    const socket = await openConnection(portOf(app))
    const get = await exchange(socket, `GET /v1/providers HTTP/1.1\r\nHost: test\r\n${KEY}Content-Length: ${body.length}\r\n\r\n${body}`)
    expect(get?.status).toBe(200)
    const post = await exchange(socket, `POST /v1/providers HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`)
    expect(post?.status).toBe(405)
    // Still the same connection: the bodies were read to their end.
    expect((await exchange(socket, 'GET /health HTTP/1.1\r\nHost: test\r\n\r\n'))?.status).toBe(200)
    socket.destroy()
  })
})
