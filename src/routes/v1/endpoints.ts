import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { EndpointListSchema } from '../../schemas/endpoint.js'
import { NotModifiedResponse } from '../../schemas/common.js'
import type { Senders } from './send.js'

const endpointRoutes: FastifyPluginAsyncTypebox<{ send: Senders }> = async (app, { send }) => {
  app.get('/endpoints/zdr', {
    schema: {
      operationId: 'listEndpointsZdr',
      tags: ['Endpoints'],
      summary: 'Preview the impact of ZDR on the available endpoints',
      description: 'Returns the model endpoints that are available under zero data retention (ZDR), with limits, pricing, latency, throughput and uptime figures.',
      response: {
        200: EndpointListSchema,
        304: NotModifiedResponse
      }
    }
  }, (request, reply) => {
    send.sendList(request, reply, request.snapshot.list('endpoints'))
  })
}

export default endpointRoutes
