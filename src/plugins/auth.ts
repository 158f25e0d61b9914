import { hash } from 'node:crypto'
import fp from 'fastify-plugin'
import createError from '@fastify/error'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { ApiKey } from '../schemas/keys-and-organizations.js'
import type { Snapshots } from '../repositories/lifecycle.js'
import type { Snapshot } from '../repositories/snapshot.js'
import { errorBody } from './errors.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** The data this request is answered from, from its authentication to its last byte. */
    snapshot: Snapshot
  }
}

const MissingHeader = createError('AUTH_MISSING_HEADER', 'Missing Authentication header: send Authorization: Bearer <key>', 401)
const MalformedHeader = createError('AUTH_MALFORMED_HEADER', 'Invalid Authentication header: expected Authorization: Bearer <key>', 401)
const UnknownKey = createError('AUTH_UNKNOWN_KEY', 'Invalid API key', 401)
// Tells the holder what they can tell already (the key worked until now): nothing about other keys.
const ExpiredKey = createError('AUTH_EXPIRED_KEY', 'This API key has expired', 401)
const RotatedKey = createError('AUTH_ROTATED_KEY', 'This API key was rotated and its grace period has ended: use its successor', 401)
const DisabledKey = createError('AUTH_DISABLED_KEY', 'This API key is disabled', 401)
const STALE_MESSAGE = 'The data served cannot be confirmed current; try again later'

/** The seconds a client waits after a 503 for data not confirmed current: about how long a replica takes to catch up. */
const STALE_RETRY_AFTER_S = 5
const NotManagementKey = createError('AUTH_NOT_MANAGEMENT_KEY', 'Only management keys can perform this operation', 403)

// The scheme name is case-insensitive (RFC 9110 section 11.1); the key is what follows the space,
// trimmed, so `Bearer  <key>` is a key too.
const BEARER_SCHEME = /^bearer /i

// Where the hook leaves the key: a symbol of this module, not a field of every request's type, so
// that only apiKeyOf reads it and a route outside an authenticated scope cannot take a missing key
// for a present one.
const API_KEY = Symbol('apiKey')
type AuthenticatedRequest = FastifyRequest & { [API_KEY]: ApiKey | null }

/** The key the request authenticated with; throws (a 500) on a route that no auth hook guards. */
export function apiKeyOf (request: FastifyRequest): ApiKey {
  const key = (request as AuthenticatedRequest)[API_KEY]
  if (!key) throw new Error('no authenticated key: the route is outside the authenticated scope')
  return key
}

/** Route hook: lets only management keys through. */
export function requireManagementKey (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) {
  if (apiKeyOf(request).kind === 'management') return done()
  // RFC 6750 section 3.1: a valid key without the rights the operation needs.
  reply.header('www-authenticate', 'Bearer error="insufficient_scope"')
  done(new NotManagementKey())
}

/**
 * What happens to a request without a valid key before its 401: the per-address limit counts it,
 * and may answer 429 itself. It ends the request either way: `refuse` takes the error to answer.
 */
export type RefusalLimit = (request: FastifyRequest, reply: FastifyReply, refusal: Error, refuse: (error: Error) => void) => void

const refuseAtOnce: RefusalLimit = (_request, _reply, refusal, refuse) => refuse(refusal)

interface AuthOptions {
  /** The data served: the current snapshot is pinned on each request, before its key is looked up. */
  snapshots: Snapshots
  limitRefusals?: RefusalLimit | undefined
  /** Now, in ms since the epoch: a key's expiry is compared with it. Tests give their own. */
  clock?: () => number
  /** MAX_STALENESS_MS: past this long without the data confirmed current, every keyed request is refused. */
  maxStalenessMs?: number | undefined
}

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
function authenticate (request: FastifyRequest, reply: FastifyReply, now: number): ApiKey | Error {
  const header = request.headers.authorization
  if (!header) return unauthorized(request, reply, new MissingHeader(), 'Bearer', 'missing authorization header')
  const key = BEARER_SCHEME.test(header) ? header.slice(7).trim() : ''
  // Another scheme, or no key after the scheme: no key was presented.
  if (key === '') return unauthorized(request, reply, new MalformedHeader(), 'Bearer', 'invalid authorization header')
  // One-shot hash(): less than half the cost of createHash() for a string this short.
  const found = request.snapshot.findKey(hash('sha256', key))
  if (found === undefined) return unauthorized(request, reply, new UnknownKey(), 'Bearer error="invalid_token"', 'unknown key')
  // One comparison: a key stops at its instant on every replica, with no change to follow, each
  // replica judging it on the source's clock, whatever its own says.
  if (request.snapshot.expiryOf(found) <= now) {
    if (request.snapshot.isPreviousSecret(found)) return unauthorized(request, reply, new RotatedKey(), 'Bearer error="invalid_token", error_description="The key was rotated"', 'rotated key')
    return unauthorized(request, reply, new ExpiredKey(), 'Bearer error="invalid_token", error_description="The key has expired"', 'expired key')
  }
  // Reversible, unlike an expiry: the holder learns that it is this key, not a typo.
  if (found.disabled === true) return unauthorized(request, reply, new DisabledKey(), 'Bearer error="invalid_token", error_description="The key is disabled"', 'disabled key')
  return found
}

function unauthorized (request: FastifyRequest, reply: FastifyReply, error: Error, challenge: string, reason: string): Error {
  // A failed login is the client's mistake, not ours: kept out of the default log, where its
  // access line (status 401) already stands.
  request.log.debug('unauthorized: %s', reason)
  reply.header('www-authenticate', challenge)
  return error
}

async function authPlugin (app: FastifyInstance, { snapshots, limitRefusals = refuseAtOnce, clock = Date.now, maxStalenessMs }: AuthOptions) {
  app.decorateRequest('snapshot', null as unknown as Snapshot)
  app.decorateRequest(API_KEY, null)
  // onRequest, before the query is even parsed: an anonymous caller costs us as little as possible.
  // The snapshot is pinned here, first: a change installed while the request runs reaches the next
  // request, never half of this one (new keys with the old members).
  app.addHook('onRequest', (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => {
    request.snapshot = snapshots.current()
    const now = clock()
    // Fail closed where the operator asked for it: a key revoked meanwhile might be served.
    // Answered here, not through the error handler: a 503 said on purpose keeps its message, and is not an error to log.
    if (maxStalenessMs !== undefined && now - snapshots.confirmedAt() > maxStalenessMs) {
      reply.code(503).header('retry-after', String(STALE_RETRY_AFTER_S)).send(errorBody(503, STALE_MESSAGE))
      return
    }
    // A key's expiry is an instant of the source's clock (PostgreSQL's now()), not of this host's.
    const outcome = authenticate(request, reply, now + snapshots.clockOffsetMs())
    if (outcome instanceof Error) return limitRefusals(request, reply, outcome, done)
    ;(request as AuthenticatedRequest)[API_KEY] = outcome
    done()
  })
}

export default fp(authPlugin, { name: 'auth' })
