import { hash } from 'node:crypto'
import fp from 'fastify-plugin'
import bearerAuth from '@fastify/bearer-auth'
import createError from '@fastify/error'
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'
import type { ApiKey } from '../schemas/fixtures.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** The key the request authenticated with; set by the auth hook before any handler runs. */
    apiKey: ApiKey | null
  }
  interface FastifyInstance {
    /** Route hook: lets only management keys through. */
    requireManagementKey: onRequestHookHandler
  }
}

const MissingHeader = createError('AUTH_MISSING_HEADER', 'Missing Authentication header: send Authorization: Bearer <key>', 401)
const MalformedHeader = createError('AUTH_MALFORMED_HEADER', 'Invalid Authentication header: expected Authorization: Bearer <key>', 401)
const UnknownKey = createError('AUTH_UNKNOWN_KEY', 'Invalid API key', 401)
const NotManagementKey = createError('AUTH_NOT_MANAGEMENT_KEY', 'Only management keys can perform this operation', 403)

// bearer-auth trims what follows `Bearer `, so `Bearer  <key>` is a key too. The scheme name is
// case-insensitive (RFC 9110 section 11.1).
const BEARER_PREFIX = /^Bearer \s*\S/i

/**
 * bearer-auth says "invalid header" for both a wrong scheme and an unknown key; users need to know
 * which. Every 401 says how to authenticate (RFC 6750 section 3), and why when a key was presented.
 */
function explain (error: Error & { code?: string }, request: FastifyRequest, reply: FastifyReply): Error {
  if (error.code === 'FST_BEARER_AUTH_MISSING_AUTHORIZATION_HEADER') {
    reply.header('www-authenticate', 'Bearer')
    return new MissingHeader()
  }
  if (error.code === 'FST_BEARER_AUTH_INVALID_AUTHORIZATION_HEADER') {
    if (BEARER_PREFIX.test(request.headers.authorization ?? '')) {
      reply.header('www-authenticate', 'Bearer error="invalid_token"')
      return new UnknownKey()
    }
    // Another scheme, or no key after the scheme: no key was presented.
    reply.header('www-authenticate', 'Bearer')
    return new MalformedHeader()
  }
  return error
}

async function authPlugin (app: FastifyInstance) {
  app.decorateRequest('apiKey', null)

  await app.register(bearerAuth, {
    keys: [],
    // Only a hash is stored, so a key is resolved by hashing what was presented: one Map lookup,
    // however many keys exist, and nothing to compare in variable time against a stored secret.
    auth (key: string, request: FastifyRequest) {
      // One-shot hash(): less than half the cost of createHash() for a string this short.
      // In the request's own snapshot, which its handler answers from too.
      const apiKey = request.directory.findKey(hash('sha256', key))
      if (apiKey === undefined) return false
      request.apiKey = apiKey
      return true
    },
    addHook: false,
    // The scheme name compared without regard to case (RFC 9110 section 11.1); with the default,
    // rfc6750, `bearer <key>` is refused.
    specCompliance: 'rfc6749',
    // A failed login is the client's mistake, not ours: keep it out of the error level, and out of
    // the default log altogether, where its access line (status 401) already stands.
    verifyErrorLogLevel: 'debug'
  })

  const verify = app.verifyBearerAuth
  if (verify === undefined) throw new Error('@fastify/bearer-auth did not decorate verifyBearerAuth')
  // onRequest, before the query is even parsed: an anonymous caller costs us as little as possible.
  app.addHook('onRequest', (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => {
    verify(request, reply, (error?: Error) => done(error ? explain(error, request, reply) : undefined))
  })

  app.decorate('requireManagementKey', function (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) {
    if (request.apiKey?.kind === 'management') return done()
    // RFC 6750 section 3.1: a valid key without the rights the operation needs.
    reply.header('www-authenticate', 'Bearer error="insufficient_scope"')
    done(new NotManagementKey())
  })
}

export default fp(authPlugin, { name: 'auth', dependencies: ['snapshot'] })
