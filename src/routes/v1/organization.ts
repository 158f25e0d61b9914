import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import createError from '@fastify/error'
import { MemberPageQuerySchema, MemberPageSchema } from '../../schemas/member.js'
import { BadRequestResponse, ErrorResponse, NotModifiedResponse } from '../../schemas/common.js'
import { apiKeyOf, requireManagementKey } from '../../plugins/auth.js'
import { errorBody } from '../../plugins/errors.js'
import type { Senders } from './send.js'
import { KINDS, describeOperation } from '../../registry.js'
import { ECHO_MAX } from '../../truncate.js'
import { redactAndTruncate } from '../../secrets.js'

const OrganizationNotFound = createError('ORGANIZATION_NOT_FOUND', 'Organization %s not found', 404)
const BadQueryParameter = createError('BAD_QUERY_PARAMETER', "Invalid query parameter '%s': %s", 400)

/**
 * The organization exists in the source but the server refused its data: a 500, not a 404, since the
 * fault is the data the server was given, and a holder of its keys told "not found" would think it
 * deleted. It names no record or value (the log that refused the data does): only what kind of fault.
 */
const refusedOrganization = (organizationId: string) =>
  `Organization ${organizationId} cannot be served: the server refused its data (more members than it may have, or a member record that is not valid); the server's log says why`

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
      return done(new BadQueryParameter(name, `${JSON.stringify(redactAndTruncate(value, ECHO_MAX))} is not a plain decimal integer (digits only, no sign, no leading zero)`))
    }
    // Hundreds of digits make Infinity, which the schema's maximum lets through. (A huge offset
    // is past the end: an empty page, as any offset past the end.)
    if (name === 'limit' && value !== undefined && !Number.isSafeInteger(Number(value))) {
      return done(new BadQueryParameter(name, `must be <= ${MemberPageQuerySchema.properties.limit.maximum}`))
    }
  }
  done()
}

const organizationRoutes: FastifyPluginAsyncTypebox<{ send: Senders }> = async (app, { send }) => {
  const { operation } = KINDS.organizations
  app.get(operation.path, {
    schema: {
      ...describeOperation(operation),
      querystring: MemberPageQuerySchema,
      response: {
        200: MemberPageSchema,
        304: NotModifiedResponse,
        400: BadRequestResponse("Invalid query parameter 'limit': must be <= 100", 'a query parameter is out of bounds, repeated, or not a plain decimal integer'),
        403: ErrorResponse(403, 'The key is not a management key', 'Only management keys can perform this operation'),
        404: ErrorResponse(404, 'The organization of the management key does not exist', 'Organization org_2vQmDeleted03 not found'),
        500: ErrorResponse(500, 'Unexpected server error; or the organization of the management key exists, but the server refused its data ' +
          '(more members than it may have, or a member record that is not valid) and does not serve it until the data is fixed: ' +
          `then the message says so ("${refusedOrganization('<id>')}")`, 'Internal Server Error')
      }
    },
    onRequest: requireManagementKey,
    preValidation: rejectLooseIntegers
  }, (request, reply) => {
    const organizationId = apiKeyOf(request).organization_id
    const { offset, limit } = request.query
    const members = request.snapshot.members(organizationId)
    if (members === undefined) {
      if (!request.snapshot.isRefused(organizationId)) throw new OrganizationNotFound(organizationId)
      reply.code(500).send(errorBody(500, refusedOrganization(organizationId)))
      return
    }
    send.sendPage(request, reply, members, offset, limit)
  })
}

export default organizationRoutes
