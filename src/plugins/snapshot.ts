import fp from 'fastify-plugin'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { Snapshots } from '../repositories/lifecycle.js'
import type { Snapshot } from '../repositories/snapshot.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** The data this request is answered from, from its authentication to its last byte. */
    snapshot: Snapshot
  }
}

/**
 * Pins the current snapshot on each request, first of all hooks: a change installed
 * while the request runs reaches the next request, never half of this one (new keys with the
 * old members).
 */
async function snapshotPlugin (app: FastifyInstance, { snapshots }: { snapshots: Snapshots }) {
  app.decorateRequest('snapshot', null as unknown as Snapshot)
  app.addHook('onRequest', (request: FastifyRequest, _reply: FastifyReply, done: () => void) => {
    request.snapshot = snapshots.current()
    done()
  })
}

export default fp(snapshotPlugin, { name: 'snapshot' })
