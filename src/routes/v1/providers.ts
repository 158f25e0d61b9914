import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { ProviderListSchema } from '../../schemas/provider.js'
import { InternalErrorResponse, TooManyRequestsResponse, NotModifiedResponse, UnauthorizedResponse } from '../../schemas/common.js'
import { sendList } from './json.js'

const providerRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/providers', {
    schema: {
      operationId: 'listProviders',
      tags: ['Providers'],
      summary: 'List all providers',
      description: 'Lists the upstream providers known to the service with their public contact and policy links and their country codes.',
      response: {
        200: ProviderListSchema,
        304: NotModifiedResponse,
        401: UnauthorizedResponse('Missing Authentication header: send Authorization: Bearer <key>'),
        429: TooManyRequestsResponse,
        500: InternalErrorResponse
      }
    }
  }, (request, reply) => {
    sendList(request, reply, request.directory.providers())
  })
}

export default providerRoutes
