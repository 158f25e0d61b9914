import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import createError from '@fastify/error'
import { MemberPageQuerySchema, MemberPageSchema } from '../../schemas/member.js'
import { BadRequestResponse, ErrorResponse, InternalErrorResponse, PayloadTooLargeResponse, TooManyRequestsResponse, UnauthorizedResponse } from '../../schemas/common.js'
import { sendPage } from './json.js'
import { ECHO_MAX } from '../../plugins/errors.js'
import { truncate } from '../../truncate.js'

const OrganizationNotFound = createError('ORGANIZATION_NOT_FOUND', 'Organization %s not found', 404)
const BadQueryParameter = createError('BAD_QUERY_PARAMETER', "Invalid query parameter '%s': %s", 400)

const CANONICAL_INTEGER = /^(0|[1-9][0-9]*)$/
const PAGING_PARAMETERS = ['offset', 'limit'] as const

/**
 * Ajv coerces "1e2", "0x10", " 5", "5.0" and "" to integers; we answer those, and leading zeros
 * (octal to some readers), with a 400 instead of guessing. Runs before the schema, which then
 * checks the bounds and fills in the defaults.
 */
function rejectLooseIntegers (request: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void) {
  const query = request.query as Record<string, string | string[] | undefined>
  for (const name of PAGING_PARAMETERS) {
    const value = query[name]
    if (Array.isArray(value)) return done(new BadQueryParameter(name, 'must be given at most once'))
    if (value !== undefined && !CANONICAL_INTEGER.test(value)) {
      return done(new BadQueryParameter(name, `${JSON.stringify(truncate(value, ECHO_MAX))} is not a plain decimal integer (digits only, no sign, no leading zero)`))
    }
    // Hundreds of digits make Infinity, which the schema's maximum lets through. (A huge offset
    // is past the end: an empty page, as any offset past the end.)
    if (name === 'limit' && value !== undefined && !Number.isSafeInteger(Number(value))) {
      return done(new BadQueryParameter(name, `must be <= ${MemberPageQuerySchema.properties.limit.maximum}`))
    }
  }
  done()
}

const organizationRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/organization/members', {
    schema: {
      operationId: 'listOrganizationMembers',
      tags: ['Organization'],
      summary: 'List organization members',
      description: 'Lists all members of the organization associated with the authenticated management key, one page at a time, ' +
        'in a stable order: pages concatenate to the whole list. A management key is required. ' +
        'An offset past the end answers an empty page with the true total_count.',
      querystring: MemberPageQuerySchema,
      response: {
        200: MemberPageSchema,
        400: BadRequestResponse("Invalid query parameter 'limit': must be <= 100", 'a query parameter is out of bounds, repeated, or not a plain decimal integer'),
        401: UnauthorizedResponse('Missing Authentication header: send Authorization: Bearer <key>'),
        403: ErrorResponse(403, 'The key is not a management key', 'Only management keys can perform this operation'),
        404: ErrorResponse(404, 'The organization of the management key does not exist', 'Organization org_2vQmDeleted03 not found'),
        413: PayloadTooLargeResponse,
        429: TooManyRequestsResponse,
        500: InternalErrorResponse
      }
    },
    onRequest: app.requireManagementKey,
    preValidation: rejectLooseIntegers
  }, (request, reply) => {
    // requireManagementKey has run, so the key is set.
    const organizationId = request.apiKey!.organization_id
    const page = request.snapshot.memberPage(organizationId, request.query.offset, request.query.limit)
    if (page === undefined) throw new OrganizationNotFound(organizationId)
    sendPage(request, reply, page.json)
  })
}

export default organizationRoutes
