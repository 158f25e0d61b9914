import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { DirectoryRepository } from '../../repositories/directory.js'
import { EndpointListSchema } from '../../schemas/endpoint.js'
import { ErrorSchema } from '../../schemas/common.js'
import { sendList } from './json.js'

const endpointRoutes: FastifyPluginAsyncTypebox<{ repository: DirectoryRepository }> = async (app, { repository }) => {
  app.get('/endpoints/zdr', {
    schema: {
      operationId: 'listEndpointsZdr',
      tags: ['Endpoints'],
      summary: 'Preview the impact of ZDR on the available endpoints',
      response: { 200: EndpointListSchema, 401: ErrorSchema, 500: ErrorSchema }
    }
  }, (request, reply) => {
    sendList(request, reply, repository.zdrEndpoints())
  })
}

export default endpointRoutes
