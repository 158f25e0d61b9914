import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { ProviderListSchema } from '../../schemas/provider.js'
import { NotModifiedResponse } from '../../schemas/common.js'
import type { Senders } from './send.js'

const providerRoutes: FastifyPluginAsyncTypebox<{ send: Senders }> = async (app, { send }) => {
  app.get('/providers', {
    schema: {
      operationId: 'listProviders',
      tags: ['Providers'],
      summary: 'List all providers',
      description: 'Lists the upstream providers known to the service with their public contact and policy links and their country codes.',
      response: {
        200: ProviderListSchema,
        304: NotModifiedResponse
      }
    }
  }, (request, reply) => {
    send.sendList(request, reply, request.snapshot.list('providers'))
  })
}

export default providerRoutes
