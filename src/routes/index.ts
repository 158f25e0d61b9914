import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { packageInfo } from '../package-info.js'
import { OPERATIONS } from '../registry.js'

const IndexSchema = Type.Object({
  name: Type.String(),
  version: Type.String(),
  operations: Type.Array(Type.Object({ id: Type.String(), method: Type.Literal('GET'), path: Type.String() })),
  docs: Type.String(),
  runbook: Type.String(),
  openapi: Type.Array(Type.String()),
  metrics: Type.Optional(Type.String()),
  probes: Type.Object({ liveness: Type.String(), readiness: Type.String() })
})

// The operations of the OpenAPI document, by its operation ids: both are made from the registry.
const INDEXED_OPERATIONS = OPERATIONS.map(({ operationId, path }) => ({ id: operationId, method: 'GET' as const, path: `/v1${path}` }))

/**
 * GET /: what this server is and where its parts are, for someone who opens its address in a
 * browser or curls it first (a bare 404 there told them nothing). Outside /v1, so without a key,
 * like the probes and the contract. Addresses are paths on this server, not absolute URLs: the Host
 * a request names is the client's word, and a proxy in front may rewrite it.
 */
const indexRoutes: FastifyPluginAsyncTypebox<{ metrics: boolean }> = async (app, { metrics }) => {
  app.get('/', {
    // Not an operation of the API (whose paths are relative to /v1): left out of the OpenAPI document.
    schema: { hide: true, summary: 'What this server is, and the addresses of its parts', response: { 200: IndexSchema } }
  }, async () => ({
    ...await packageInfo(),
    operations: INDEXED_OPERATIONS,
    docs: '/docs',
    runbook: '/runbook',
    openapi: ['/v1/openapi.json', '/v1/openapi.yaml'],
    // METRICS=false answers /metrics with a 404: then it is not named.
    ...(metrics ? { metrics: '/metrics' } : {}),
    probes: { liveness: '/health', readiness: '/ready' }
  }))
}

export default indexRoutes
