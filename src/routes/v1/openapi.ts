import type { FastifyPluginAsync } from 'fastify'

/**
 * The OpenAPI document of the /v1 operations, as JSON and YAML. Hidden from the document itself:
 * it describes the API, it is not one of its operations.
 */
const openapiDocumentRoutes: FastifyPluginAsync = async (app) => {
  let json: string | undefined
  let yaml: string | undefined
  // Generated and rendered for their first reader (the routes cannot change once the app is ready),
  // not at start (plugins/openapi.ts). A schema @fastify/swagger cannot render would fail that reader
  // with a 500; test/openapi.test.ts renders both forms on every test run.
  app.get('/openapi.json', { schema: { hide: true } }, async (_request, reply) =>
    reply.type('application/json; charset=utf-8').send(json ??= `${JSON.stringify(await app.openapi.object(), null, 2)}\n`))
  app.get('/openapi.yaml', { schema: { hide: true } }, async (_request, reply) =>
    reply.type('application/yaml; charset=utf-8').send(yaml ??= await app.openapi.yaml()))
}

export default openapiDocumentRoutes
