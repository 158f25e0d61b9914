import { connect, type Socket } from 'node:net'
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import type { FastifyInstance } from 'fastify'

export interface RawAnswer {
  status: number
  /** Header names lowercased; a repeated header keeps its last value. */
  headers: Record<string, string>
  body: string
}

/** The port of a listening app. */
export const portOf = (app: FastifyInstance) => (app.server.address() as AddressInfo).port

/** An open connection to 127.0.0.1:port, for requests no HTTP client would send. */
export async function openConnection (port: number) {
  const socket = connect(port, '127.0.0.1')
  await once(socket, 'connect')
  return socket
}

/** The first whole answer in `text`, or undefined while it has not all arrived. */
export function parseAnswer (text: string): RawAnswer | undefined {
  const end = text.indexOf('\r\n\r\n')
  if (end < 0) return undefined
  const [statusLine, ...lines] = text.slice(0, end).split('\r\n')
  const headers = Object.fromEntries(lines.map((line) => {
    const colon = line.indexOf(':')
    return [line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim()]
  }))
  const length = Number(headers['content-length'] ?? 0)
  if (text.length < end + 4 + length) return undefined
  return { status: Number(statusLine!.split(' ')[1]), headers, body: text.slice(end + 4, end + 4 + length) }
}

/** Writes `raw` on `socket` and resolves with the answer, or with undefined if the connection closes without one. */
export function exchange (socket: Socket, raw: string | Buffer = ''): Promise<RawAnswer | undefined> {
  return new Promise((resolve) => {
    let text = ''
    const onData = (chunk: Buffer) => {
      text += chunk.toString('latin1')
      const answer = parseAnswer(text)
      if (answer) { cleanup(); resolve(answer) }
    }
    const onClose = () => { cleanup(); resolve(undefined) }
    const cleanup = () => { socket.off('data', onData).off('close', onClose) }
    socket.on('data', onData).on('close', onClose).on('error', () => {})
    if (raw.length > 0) socket.write(raw)
  })
}

/** Sends one raw request on a connection of its own; answers the answer and whether the server then closed the connection. */
export async function rawRequest (port: number, raw: string | Buffer) {
  const socket = await openConnection(port)
  const closed = once(socket, 'close').then(() => true)
  const answer = await exchange(socket, raw)
  // The server closes after answering, or keeps the connection: ask with a second request.
  const keptOpen = answer !== undefined && !socket.destroyed && await exchange(socket, 'GET /health HTTP/1.1\r\nHost: test\r\n\r\n') !== undefined
  socket.destroy()
  await closed
  return { answer, keptOpen }
}
