import fp from 'fastify-plugin'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { Directory } from '../repositories/directory.js'
import type { DirectoryView } from '../repositories/views.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** The data this request is answered from, from its authentication to its last byte. */
    directory: DirectoryView
  }
}

/**
 * Pins the directory's current view on each request, first of all hooks: a change installed
 * while the request runs reaches the next request, never half of this one (new keys with the
 * old members).
 */
async function snapshotPlugin (app: FastifyInstance, { directory }: { directory: Directory }) {
  app.decorateRequest('directory', null as unknown as DirectoryView)
  app.addHook('onRequest', (request: FastifyRequest, _reply: FastifyReply, done: () => void) => {
    request.directory = directory.current()
    done()
  })
}

export default fp(snapshotPlugin, { name: 'snapshot' })
