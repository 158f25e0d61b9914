import type { FastifyReply, FastifyRequest } from 'fastify'
import type { SerializedList } from '../../repositories/views.js'

/**
 * Sends a body that was validated and serialized when its snapshot was installed: a Buffer goes out as it is (the route's
 * response schema only documents it), under the JSON content type.
 */
export function sendSerialized (reply: FastifyReply, json: Buffer) {
  return reply.type('application/json; charset=utf-8').send(json)
}

/**
 * Sends a list with its precomputed strong ETag, or a bodiless 304 when the client already has it.
 * (@fastify/etag would hash every other response of the scope, errors included, and only knows
 * a single exact tag; this is the whole of If-None-Match, RFC 9110 section 13.1.2, in a few lines.)
 */
export function sendList (request: FastifyRequest, reply: FastifyReply, list: SerializedList) {
  reply.header('etag', list.etag)
  if (isNotModified(request.headers['if-none-match'], list)) return reply.code(304).send()
  return sendSerialized(reply, list.json)
}

function isNotModified (header: string | undefined, { etag, weakEtag }: SerializedList): boolean {
  if (header === undefined) return false
  if (header.trim() === '*') return true
  // Weak comparison: W/"x" matches "x".
  return header.split(',').some((tag) => {
    const trimmed = tag.trim()
    return trimmed === etag || trimmed === weakEtag
  })
}
