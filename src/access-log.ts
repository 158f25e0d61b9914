import { LogController, type FastifyBaseLogger, type FastifyReply, type FastifyRequest } from 'fastify'
import { truncate } from './truncate.js'

/** Node.js accepts URLs of up to 16 KiB; a line keeps the first KiB, enough to tell any request of ours. */
const LOGGED_URL_MAX = 1024

/**
 * One line per request, written when the response is done, instead of Fastify's two
 * ("incoming request" and "request completed"): half the log volume for the same facts.
 * The request id is on the line through the request's child logger.
 */
export class AccessLogController extends LogController {
  override incomingRequest () {}

  override requestCompleted (error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply) {
    logRequestCompleted(request, reply, error)
  }
}

/** The access line of a request; also written by hand for the answers Fastify makes without hooks. */
export function logRequestCompleted (request: FastifyRequest, reply: FastifyReply, error?: Error | null) {
  // Milliseconds to the microsecond: the digits beyond are noise, and each access line costs its bytes.
  const line = { method: request.method, url: truncate(request.url, LOGGED_URL_MAX), statusCode: reply.statusCode, responseTime: Math.round(reply.elapsedTime * 1000) / 1000 }
  if (error) reply.log.error({ ...line, err: error }, 'request errored')
  else reply.log.info(line, 'request completed')
}

/**
 * The access line of an answer Node.js or we write on the raw socket, with no Fastify request
 * (a request Node.js could not parse, a CONNECT): same message, the fields that are known.
 */
export function logRawAnswer (log: FastifyBaseLogger, line: { reqId: string, statusCode: number, method?: string, url?: string, clientError?: string }) {
  log.info({ ...line, url: line.url === undefined ? undefined : truncate(line.url, LOGGED_URL_MAX) }, 'request completed')
}
