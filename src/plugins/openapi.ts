import fp from 'fastify-plugin'
import swagger from '@fastify/swagger'
import type { FastifyInstance } from 'fastify'

/**
 * The OpenAPI 3.1 document, generated from the routes' TypeBox schemas as they are registered:
 * no hand-written copy to drift. Registered before the routes, whose onRoute events it collects;
 * `app.swagger()` answers the document once the app is ready.
 */
async function openapiPlugin (app: FastifyInstance) {
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Model-gateway directory',
        version: '1.0.0',
        description: 'Three read-only operations of a model-gateway API, compatible with the public OpenRouter API: ' +
          'the upstream providers, the endpoints available under zero data retention (ZDR), and the members of the ' +
          'organization tied to a management key. Every failure answers the Error body, with `error.code` equal to the HTTP status.'
      },
      // The routes live under /v1; with the prefix in the server URL, @fastify/swagger strips it
      // from the paths (stripBasePath), so they read /providers as in the spec.
      servers: [{ url: '/v1', description: 'This server; the base address carries the major version' }],
      tags: [
        { name: 'Providers', description: 'The upstream providers known to the service' },
        { name: 'Endpoints', description: 'Model endpoints and their availability under ZDR' },
        { name: 'Organization', description: 'The organization tied to a management key' }
      ],
      components: {
        securitySchemes: {
          bearerAuth: { type: 'http', scheme: 'bearer', description: 'An API key: `Authorization: Bearer <API_KEY>`. The member listing needs a management key.' }
        }
      },
      // The default of every operation, as in the spec.
      security: [{ bearerAuth: [] }]
    },
    refResolver: {
      // Schemas with an $id (Provider, Endpoint, Member, Error) become components under that name
      // instead of the default def-0, def-1...
      buildLocalReference: (json: { $id?: unknown }, _baseUri: unknown, _fragment: unknown, i: number) =>
        typeof json.$id === 'string' ? json.$id : `def-${i}`
    }
  })
}

export default fp(openapiPlugin, { name: 'openapi' })
