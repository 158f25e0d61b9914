import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { TSchema } from '@sinclair/typebox'
import { KINDS, LIST_KINDS, describeOperation, type ListOperation } from '../../registry.js'
import { ListOf, NotModifiedResponse } from '../../schemas/common.js'
import type { Senders } from './send.js'

/**
 * Every kind the registry serves as a whole list, at its operation's path: the list its snapshot
 * serialized, or a 304 (send.ts).
 */
const listRoutes: FastifyPluginAsyncTypebox<{ send: Senders }> = async (app, { send }) => {
  for (const kind of LIST_KINDS) {
    const entry = KINDS[kind] as { schema: TSchema, served?: { schema: TSchema }, operation: ListOperation }
    const { operation } = entry
    app.get(operation.path, {
      schema: {
        ...describeOperation(operation),
        response: {
          200: ListOf(entry.served?.schema ?? entry.schema, operation.listDescription),
          304: NotModifiedResponse
        }
      }
    }, (request, reply) => {
      send.sendList(request, reply, request.snapshot.list(kind))
    })
  }
}

export default listRoutes
