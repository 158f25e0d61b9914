import { hash } from 'node:crypto'
import fp from 'fastify-plugin'
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

// The scheme name is case-insensitive (RFC 9110 section 11.1); the key is what follows the space,
// trimmed, so `Bearer  <key>` is a key too.
const BEARER_SCHEME = /^bearer /i

/**
 * Bearer authentication (RFC 6750) against the request's snapshot: the presented key is hashed and
 * looked up, since only hashes are stored; one Map lookup however many keys exist, and nothing to
 * compare in variable time against a stored secret. Every 401 says how to authenticate, and why when
 * a key was presented (RFC 6750 section 3).
 *
 * Not @fastify/bearer-auth: it answers "invalid header" both for another scheme and for an unknown
 * key, which users need told apart, and it settles every check through a promise, which cost each
 * request a turn of the microtask queue; what remains of it is the few lines below.
 */
function authenticate (request: FastifyRequest, reply: FastifyReply): Error | undefined {
  const header = request.headers.authorization
  if (!header) return refuse(request, reply, new MissingHeader(), 'Bearer', 'missing authorization header')
  const key = BEARER_SCHEME.test(header) ? header.slice(7).trim() : ''
  // Another scheme, or no key after the scheme: no key was presented.
  if (key === '') return refuse(request, reply, new MalformedHeader(), 'Bearer', 'invalid authorization header')
  // One-shot hash(): less than half the cost of createHash() for a string this short.
  const apiKey = request.snapshot.findKey(hash('sha256', key))
  if (apiKey === undefined) return refuse(request, reply, new UnknownKey(), 'Bearer error="invalid_token"', 'unknown key')
  request.apiKey = apiKey
  return undefined
}

function refuse (request: FastifyRequest, reply: FastifyReply, error: Error, challenge: string, reason: string): Error {
  // A failed login is the client's mistake, not ours: kept out of the default log, where its
  // access line (status 401) already stands.
  request.log.debug('unauthorized: %s', reason)
  reply.header('www-authenticate', challenge)
  return error
}

async function authPlugin (app: FastifyInstance) {
  app.decorateRequest('apiKey', null)
  // onRequest, before the query is even parsed: an anonymous caller costs us as little as possible.
  app.addHook('onRequest', (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => {
    done(authenticate(request, reply))
  })

  app.decorate('requireManagementKey', function (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) {
    if (request.apiKey?.kind === 'management') return done()
    // RFC 6750 section 3.1: a valid key without the rights the operation needs.
    reply.header('www-authenticate', 'Bearer error="insufficient_scope"')
    done(new NotManagementKey())
  })
}

export default fp(authPlugin, { name: 'auth', dependencies: ['snapshot'] })
