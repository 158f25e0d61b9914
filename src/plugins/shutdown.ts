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

  const server = app.server
  const closeIdleConnections = server.closeIdleConnections.bind(server)
  let drain: NodeJS.Timeout | undefined
  // Node.js's close() calls this; nothing else does (Fastify only with a serverFactory).
  server.closeIdleConnections = () => {
    drain ??= setTimeout(closeIdleConnections, DRAIN_IDLE_MS)
  }
  // close() has returned once the last connection closed: nothing left to drain.
  server.once('close', () => clearTimeout(drain))
}

export default fp(shutdownPlugin, { name: 'shutdown' })
