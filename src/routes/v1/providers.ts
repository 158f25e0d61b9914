import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { ProviderListSchema } from '../../schemas/provider.js'
import { BadRequestResponse, InternalErrorResponse, NotModifiedResponse, PayloadTooLargeResponse, TooManyRequestsResponse, UnauthorizedResponse } from '../../schemas/common.js'
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
        400: BadRequestResponse('The Authorization header is sent more than once'),
        401: UnauthorizedResponse('Missing Authentication header: send Authorization: Bearer <key>'),
        413: PayloadTooLargeResponse,
        429: TooManyRequestsResponse,
        500: InternalErrorResponse
      }
    }
  }, (request, reply) => {
    sendList(request, reply, request.snapshot.providers())
  })
}

export default providerRoutes
