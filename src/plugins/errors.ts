import { STATUS_CODES } from 'node:http'
import fp from 'fastify-plugin'
import type { Socket } from 'node:net'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { ErrorSchema } from '../schemas/common.js'
import { logRequestCompleted } from '../access-log.js'
import { REQUEST_ID_HEADER } from './request-id.js'

/** The body every non-2xx answer carries; `code` always equals the HTTP status. */
export function errorBody (code: number, message: string) {
  return { error: { code, message } }
}

function statusOf (error: FastifyError): number {
  const status = error.statusCode
  return status !== undefined && status >= 400 && status <= 599 ? status : 500
}

function validationMessage (error: FastifyError): string {
  const issue = error.validation?.[0]
  const parameter = issue?.instancePath.replace(/^\//, '')
  if (error.validationContext === 'querystring' && issue && parameter) {
    return `Invalid query parameter '${parameter}': ${issue.message ?? 'is invalid'}`
  }
  return error.message
}

/** 4xx keep their clear message; a 5xx says only its status, and its real cause goes to the log. */
function sendError (error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  const status = statusOf(error)
  if (status >= 500) {
    request.log.error({ err: error }, 'request failed')
    return reply.code(status).send(errorBody(status, STATUS_CODES[status] ?? 'Internal Server Error'))
  }
  return reply.code(status).send(errorBody(status, error.validation ? validationMessage(error) : error.message))
}

/**
 * Fastify answers a malformed URL before any route, hook or error handler runs (option
 * `frameworkErrors`): this answer gets our shape, the request id and its access line by hand.
 */
export function frameworkErrors (error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  sendError(error, request, reply.header(REQUEST_ID_HEADER, request.id))
  logRequestCompleted(request, reply)
}

/**
 * Node answers a request it cannot even parse (bad HTTP, headers too large, timeout) on the raw
 * socket (option `clientErrorHandler`); same shape, written by hand because there is no reply.
 */
export function clientErrorHandler (error: Error & { code?: string }, socket: Socket) {
  if (error.code === 'ECONNRESET' || socket.destroyed) return
  const status = error.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : error.code === 'HPE_HEADER_OVERFLOW' ? 431 : 400
  const body = JSON.stringify(errorBody(status, STATUS_CODES[status] ?? 'Bad Request'))
  if (socket.writable) {
    socket.write(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n\r\n${body}`)
  }
  socket.destroy(error)
}

async function errorsPlugin (app: FastifyInstance) {
  // Shared, so that every route refers to one Error schema (and the OpenAPI document has one component).
  app.addSchema(ErrorSchema)

  app.setErrorHandler(sendError)

  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?', 1)[0] ?? request.url
    // Every route is read-only: a known path asked with another method is a 405, not a 404.
    if (request.method !== 'GET' && request.method !== 'HEAD' && app.hasRoute({ method: 'GET', url: path })) {
      return reply.code(405).header('allow', 'GET, HEAD')
        .send(errorBody(405, `Method ${request.method} is not allowed on ${path}; use GET`))
    }
    return reply.code(404).send(errorBody(404, `Not found: ${request.method} ${path}`))
  })
}

export default fp(errorsPlugin, { name: 'errors' })
