import { randomBytes } from 'node:crypto'
import type { IncomingMessage } from 'node:http'
import { containsSecret } from '../secrets.js'

export const REQUEST_ID_HEADER = 'x-request-id'

// The charset of the ids that proxies generate (UUIDs, hex, base64url), bounded in length: an id
// goes verbatim into every log line of its request, so anything else could forge or flood log lines.
const WELL_FORMED = /^[A-Za-z0-9._-]{1,128}$/

// Generated ids: 72 random bits drawn once per process, then a counter. Unique across replicas
// and restarts like a UUID (Fastify's default counter starts again at 1 in every process), at a
// fraction of the cost: a UUID per request was the costliest step after the socket write.
const processPrefix = randomBytes(9).toString('base64url')
let sequence = 0

/**
 * Fastify's `genReqId`: keeps the id a proxy in front of us already gave the request, so that one
 * id follows it through every log; makes one otherwise, and in place of one shaped like a key or a
 * key's hash (a client's header mapping gone wrong), which every line of the request would carry.
 */
export function requestIdOf (request: IncomingMessage): string {
  const incoming = request.headers[REQUEST_ID_HEADER]
  return typeof incoming === 'string' && WELL_FORMED.test(incoming) && !containsSecret(incoming) ? incoming : newRequestId()
}

/** A new id, for the answers Node.js makes before there is a request (unparsable requests). */
export function newRequestId (): string {
  return `${processPrefix}-${(++sequence).toString(36)}`
}
