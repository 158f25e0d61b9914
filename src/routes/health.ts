import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { ErrorSchema } from '../schemas/common.js'
import { errorBody } from '../plugins/errors.js'

const HealthSchema = Type.Object({ status: Type.Literal('ok') })
const ReadySchema = Type.Object({ status: Type.Literal('ready') })

/**
 * Probes for orchestrators and load balancers. They live outside /v1, so outside its
 * authentication: a probe carries no key. A probe every few seconds per replica is not traffic,
 * so their access lines are left out of the log (a failing probe shows in the orchestrator).
 */
const healthRoutes: FastifyPluginAsyncTypebox<{ stale: () => boolean }> = async (app, { stale }) => {
  app.get('/health', {
    logLevel: 'warn',
    // Probes, not operations of the API: left out of the OpenAPI document.
    schema: { hide: true, summary: 'Liveness: the process answers', response: { 200: HealthSchema } }
  }, async () => ({ status: 'ok' as const }))

  app.get('/ready', {
    logLevel: 'warn',
    schema: { hide: true, summary: 'Readiness: data loaded and confirmed current, and not shutting down', response: { 200: ReadySchema, 503: ErrorSchema } }
  }, async (_request, reply) => {
    // The data is loaded before the server listens: the process answers but is not ready while it
    // closes, and while its data cannot be confirmed current for longer than its bound.
    if (app.isClosing()) return reply.code(503).send(errorBody(503, 'Shutting down'))
    if (stale()) return reply.code(503).send(errorBody(503, 'The data served cannot be confirmed current (MAX_STALENESS_MS)'))
    return { status: 'ready' as const }
  })
}

export default healthRoutes
