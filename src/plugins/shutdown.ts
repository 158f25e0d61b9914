import fp from 'fastify-plugin'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'

declare module 'fastify' {
  interface FastifyInstance {
    /** True once close() has begun: requests in flight still finish, new work should go elsewhere. */
    isClosing(): boolean
  }
}

/**
 * What graceful shutdown needs beyond Fastify's close(): a flag the readiness probe reads, and
 * `Connection: close` on every answer sent while closing. Node keeps a keep-alive connection open
 * after answering a request that was in flight when close() began, so close() would otherwise
 * wait out the keep-alive timeout (and the grace period with it) instead of ending with the
 * last answer; the header also tells the client to send its next request elsewhere.
 */
async function shutdownPlugin (app: FastifyInstance) {
  let closing = false
  app.decorate('isClosing', () => closing)
  app.addHook('preClose', async () => { closing = true })
  app.addHook('onSend', (_request: FastifyRequest, reply: FastifyReply, payload: unknown, done: (err: null, payload: unknown) => void) => {
    if (closing) reply.header('connection', 'close')
    done(null, payload)
  })
}

export default fp(shutdownPlugin, { name: 'shutdown' })
