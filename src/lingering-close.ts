import type { IncomingMessage } from 'node:http'
import type { Socket } from 'node:net'

/**
 * How long a connection answered before its request's body had all arrived goes on reading, and
 * dropping, what the client sends. Long enough for a client to finish sending a body of megabytes
 * on a slow machine; short enough that a client sending forever cannot hold the connection (or a
 * shutdown) up. nginx's lingering_time is 30 s; our bodies are refused at 1 KiB.
 */
const LINGER_MS = 5000

const lingering = new WeakSet<Socket>()

/** The connection's answer is out and it only reads and drops what comes, until it closes. */
export const isLingering = (socket: Socket) => lingering.has(socket)

/**
 * Has Node.js close the connection of `request`, once its answer is sent, as nginx's lingering_close
 * does: the answer and the end of it go out (a half-close), then what the client still sends is read
 * and dropped until the body has all come, the client closes its side, or LINGER_MS has passed.
 * Closing at once, with the body unread, makes the kernel reset the connection, and a client still
 * writing its body gets EPIPE or ECONNRESET instead of the answer waiting in its socket.
 *
 * Not a public contract of Node.js: after an answer sent with `Connection: close`, the HTTP server
 * closes the connection by calling the socket's destroySoon() (lib/_http_server.js), which would
 * destroy it as soon as the answer is flushed; it is replaced on this one socket. The rest of the
 * body goes on through the HTTP parser to the request, which Node.js reads to its end once answered.
 */
export function lingerAfterAnswer (request: IncomingMessage) {
  const socket = request.socket as Socket
  socket.destroySoon = () => {
    if (lingering.has(socket) || socket.destroyed) return
    lingering.add(socket)
    if (socket.writable) socket.end()
    let clientDone = request.complete || socket.readableEnded
    // Only once the answer and its end have been handed to the kernel: destroying sooner cuts them.
    const closeWhenDone = () => { if (clientDone && socket.writableFinished) socket.destroy() }
    const clientIsDone = () => { clientDone = true; closeWhenDone() }
    request.once('end', clientIsDone)
    socket.once('end', clientIsDone)
    socket.once('finish', closeWhenDone)
    const bound = setTimeout(() => socket.destroy(), LINGER_MS)
    socket.once('close', () => clearTimeout(bound))
    closeWhenDone()
  }
}
