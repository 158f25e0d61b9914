import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { EndpointListSchema } from '../../schemas/endpoint.js'
import { BadRequestResponse, InternalErrorResponse, NotModifiedResponse, PayloadTooLargeResponse, TooManyRequestsResponse, UnauthorizedResponse } from '../../schemas/common.js'
import { sendList } from './json.js'

const endpointRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/endpoints/zdr', {
    schema: {
      operationId: 'listEndpointsZdr',
      tags: ['Endpoints'],
      summary: 'Preview the impact of ZDR on the available endpoints',
      description: 'Returns the model endpoints that are available under zero data retention (ZDR), with limits, pricing, latency, throughput and uptime figures.',
      response: {
        200: EndpointListSchema,
        304: NotModifiedResponse,
        400: BadRequestResponse('The Host header is sent more than once'),
        401: UnauthorizedResponse('Invalid API key'),
        413: PayloadTooLargeResponse,
        429: TooManyRequestsResponse,
        500: InternalErrorResponse
      }
    }
  }, (request, reply) => {
    sendList(request, reply, request.snapshot.zdrEndpoints())
  })
}

export default endpointRoutes
