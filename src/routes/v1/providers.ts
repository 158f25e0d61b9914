import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { DirectoryRepository } from '../../repositories/directory.js'
import { ProviderListSchema } from '../../schemas/provider.js'
import { ErrorSchema } from '../../schemas/common.js'
import { sendList } from './json.js'

const providerRoutes: FastifyPluginAsyncTypebox<{ repository: DirectoryRepository }> = async (app, { repository }) => {
  app.get('/providers', {
    schema: {
      operationId: 'listProviders',
      tags: ['Providers'],
      summary: 'List all providers',
      response: { 200: ProviderListSchema, 401: ErrorSchema, 500: ErrorSchema }
    }
  }, (request, reply) => {
    sendList(request, reply, repository.providers())
  })
}

export default providerRoutes
