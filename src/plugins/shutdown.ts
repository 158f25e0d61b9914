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
const DRAIN_IDLE_MS = 1000

/**
 * Has Node.js's close() close the connections idle at that instant `ms` later instead of at once.
 *
 * Not a public contract of Node.js: http.Server's close() closes them by calling the server's own
 * closeIdleConnections() (lib/_http_server.js, since Node.js 19), which no option defers, so it is
 * replaced on this one instance. Kept for what it saves, a request lost on every connection idle at
 * close under load (test/shutdown.test.ts); the test 'keeps a connection idle when close begins
 * open...' there fails on the Node.js release that changes how close() does it.
 */
function deferIdleClose (server: Server, ms: number) {
  const closeIdleConnections = server.closeIdleConnections.bind(server)
  let drain: NodeJS.Timeout | undefined
  // Node.js's close() calls this; nothing else does (Fastify only with a serverFactory).
  server.closeIdleConnections = () => {
    drain ??= setTimeout(closeIdleConnections, ms)
  }
  // close() has returned once the last connection closed: nothing left to drain.
  server.once('close', () => clearTimeout(drain))
}

/**
 * What graceful shutdown needs beyond Fastify's close(): a flag the readiness probe reads,
 * `Connection: close` on every answer sent while closing, and no connection closed under a request.
 *
 * close() stops accepting connections and Node.js then destroys every connection that is idle at
 * that instant. An idle connection may hold a request its client already sent that the server has
 * not read yet (under load, many do): destroying it resets the connection and loses the request,
 * a 502 at the load balancer. So the idle connections are closed a little later instead: whatever
 * arrives on them meanwhile is answered with `Connection: close`, after which Node.js closes the
 * connection itself, between requests; those still idle after DRAIN_IDLE_MS are closed then.
 */
async function shutdownPlugin (app: FastifyInstance) {
  let closing = false
  app.decorate('isClosing', () => closing)
  app.addHook('preClose', async () => { closing = true })
  app.addHook('onSend', (_request: FastifyRequest, reply: FastifyReply, payload: unknown, done: (err: null, payload: unknown) => void) => {
    if (closing) reply.header('connection', 'close')
    done(null, payload)
  })

  deferIdleClose(app.server, DRAIN_IDLE_MS)
}

export default fp(shutdownPlugin, { name: 'shutdown' })
