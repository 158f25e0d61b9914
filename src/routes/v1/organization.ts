import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import createError from '@fastify/error'
import type { DirectoryRepository } from '../../repositories/directory.js'
import { MemberPageQuerySchema, MemberPageSchema } from '../../schemas/member.js'
import { ErrorSchema } from '../../schemas/common.js'
import { sendSerialized } from './json.js'

const OrganizationNotFound = createError('ORGANIZATION_NOT_FOUND', 'Organization %s not found', 404)
const BadQueryParameter = createError('BAD_QUERY_PARAMETER', "Invalid query parameter '%s': %s", 400)

const CANONICAL_INTEGER = /^(0|[1-9][0-9]*)$/

/**
 * Ajv coerces "1e2", "0x10", " 5", "5.0" and "" to integers; we answer those, and leading zeros
 * (octal to some readers), with a 400 instead of guessing. Runs before the schema, which then checks the bounds and fills in the defaults.
 */
function rejectLooseIntegers (request: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void) {
  const query = request.query as Record<string, string | string[] | undefined>
  for (const name of ['offset', 'limit']) {
    const value = query[name]
    if (Array.isArray(value)) return done(new BadQueryParameter(name, 'must be given at most once'))
    if (value !== undefined && !CANONICAL_INTEGER.test(value)) {
      return done(new BadQueryParameter(name, `${JSON.stringify(value)} is not a plain decimal integer (digits only, no sign, no leading zero)`))
    }
  }
  done()
}

const organizationRoutes: FastifyPluginAsyncTypebox<{ repository: DirectoryRepository }> = async (app, { repository }) => {
  app.get('/organization/members', {
    schema: {
      operationId: 'listOrganizationMembers',
      tags: ['Organization'],
      summary: 'List organization members',
      querystring: MemberPageQuerySchema,
      response: {
        200: MemberPageSchema,
        400: ErrorSchema,
        401: ErrorSchema,
        403: ErrorSchema,
        404: ErrorSchema,
        500: ErrorSchema
      }
    },
    onRequest: app.requireManagementKey,
    preValidation: rejectLooseIntegers
  }, (request, reply) => {
    // requireManagementKey has run, so the key is set.
    const organizationId = request.apiKey!.organization_id
    const page = repository.memberPageJson(organizationId, request.query.offset, request.query.limit)
    if (page === undefined) throw new OrganizationNotFound(organizationId)
    sendSerialized(reply, page)
  })
}

export default organizationRoutes
