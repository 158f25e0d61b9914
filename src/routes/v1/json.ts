import type { FastifyReply } from 'fastify'

/**
 * Sends a body that was validated and serialized at load. Naming the type makes Fastify send the
 * bytes as they are instead of serializing them again; the route's response schema still
 * documents them.
 */
export function sendSerialized (reply: FastifyReply, json: Buffer | string) {
  return reply.type('application/json; charset=utf-8').send(json)
}
