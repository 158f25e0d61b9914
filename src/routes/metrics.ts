import type { FastifyPluginAsync } from 'fastify'

/**
 * GET /metrics for Prometheus, outside /v1 and without a key, like the probes: a scraper calls it
 * every few seconds per replica, so it writes no access line. Left out of the OpenAPI document.
 */
const metricsRoutes: FastifyPluginAsync = async (app) => {
  app.get('/metrics', { logLevel: 'warn', schema: { hide: true } }, async (_request, reply) =>
    reply.type(app.metrics.registry.contentType).send(await app.metrics.render()))
}

export default metricsRoutes
