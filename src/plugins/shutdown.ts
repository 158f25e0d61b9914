import type { Server } from 'node:http'
import fp from 'fastify-plugin'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'

declare module 'fastify' {
  interface FastifyInstance {
    /** True once close() has begun: requests in flight still finish, new work should go elsewhere. */
    isClosing(): boolean
  }
}

/**
 * How long a connection open when close() begins may stay idle before we close it. Long enough for
 * a request the client already wrote to be read (it may sit unread in the socket while the event
 * loop is busy); short enough not to hold the shutdown up.
 */
export const DRAIN_IDLE_MS = 1000

/**
 * The most connections the kernel can hold completed for us before we accept them: Node.js's default
 * listen backlog, which app.listen keeps (Linux lowers it to net.core.somaxconn, never raises it).
 */
const LISTEN_BACKLOG = 511

/** Resolves in the check phase after the next poll phase: whatever the kernel had for us by then has been read. */
const afterNextPoll = () => new Promise<void>((resolve) => setImmediate(() => setImmediate(resolve)))

/**
 * Takes the connections that the kernel has completed but the server has not accepted yet. Closing
 * the listening socket resets them, and their clients (whose connect() has succeeded) have often
 * written a request already. libuv accepts one connection a turn of the event loop (since 2022,
 * libuv/libuv#3696, in Node.js 22 and 24 alike), so when the loop is late, dozens wait there. A poll
 * phase that accepts nothing means the kernel's queue was empty; the queue is first in, first out and
 * holds at most LISTEN_BACKLOG + 1, so after that many every connection made before this began has
 * been taken, even if new ones keep coming.
 */
async function acceptWaiting (server: Server) {
  let accepted = 0
  const count = () => { accepted++ }
  // 'drop': taken and closed at once past maxConnections, a turn like any other.
  server.on('connection', count).on('drop', count)
  try {
    for (let before = -1; accepted !== before && accepted <= LISTEN_BACKLOG;) {
      before = accepted
      await afterNextPoll()
    }
  } finally {
    server.off('connection', count).off('drop', count)
  }
}

/**
 * Has Node.js's close() close the connections idle `ms` later instead of at once, and only those still
 * idle once the event loop has read what arrived by then.
 *
 * Not a public contract of Node.js: http.Server's close() closes them by calling the server's own
 * closeIdleConnections() (lib/_http_server.js, since Node.js 19), which no option defers, so it is
 * replaced on this one instance. Kept for what it saves, a request lost on every connection idle at
 * close under load (test/shutdown.test.ts); the test 'keeps a connection idle when close begins
 * open...' there fails on the Node.js release that changes how close() does it.
 *
 * A late event loop runs the timers that are due before it reads the sockets: closing from the timer
 * itself would reset a connection whose request arrived before the deadline but was not read yet. The
 * timer only schedules the close after the next poll phase, which reads it.
 */
function deferIdleClose (server: Server, ms: number) {
  const closeIdleConnections = server.closeIdleConnections.bind(server)
  let drain: NodeJS.Timeout | undefined
  let afterPoll: NodeJS.Immediate | undefined
  // Node.js's close() calls this; nothing else does (Fastify only with a serverFactory).
  server.closeIdleConnections = () => {
    drain ??= setTimeout(() => { afterPoll = setImmediate(closeIdleConnections) }, ms)
  }
  // close() has returned once the last connection closed: nothing left to drain.
  server.once('close', () => {
    clearTimeout(drain)
    clearImmediate(afterPoll)
  })
}

/**
 * What graceful shutdown needs beyond Fastify's close(): a flag the readiness probe reads,
 * `Connection: close` on every answer sent while closing, and no connection closed under a request.
 *
 * close() stops accepting connections and Node.js then destroys every connection that is idle at
 * that instant. Two kinds of connection hold a request their client has already sent and the server
 * has not read yet (under load, many do): those the kernel has completed but the server has not
 * accepted, which closing the listening socket resets, and those that look idle. Either way the
 * request is lost, a 502 at the load balancer. So the waiting connections are accepted before the
 * listening socket closes, and the idle ones are closed a little later: whatever arrives on them
 * meanwhile is answered with `Connection: close`, after which Node.js closes the connection itself,
 * between requests; those still idle after DRAIN_IDLE_MS are closed then.
 */
async function shutdownPlugin (app: FastifyInstance) {
  let closing = false
  app.decorate('isClosing', () => closing)
  // Fastify runs the preClose hooks, then closes the server.
  app.addHook('preClose', async () => {
    closing = true
    if (app.server.listening) await acceptWaiting(app.server)
  })
  app.addHook('onSend', (_request: FastifyRequest, reply: FastifyReply, payload: unknown, done: (err: null, payload: unknown) => void) => {
    if (closing) reply.header('connection', 'close')
    done(null, payload)
  })

  deferIdleClose(app.server, DRAIN_IDLE_MS)
}

export default fp(shutdownPlugin, { name: 'shutdown' })
