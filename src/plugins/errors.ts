import { createRequire } from 'node:module'
import type { IncomingMessage, ServerResponse } from 'node:http'
import fp from 'fastify-plugin'
import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { ErrorSchema } from '../schemas/common.js'
import { logRawAnswer, logRequestCompleted } from '../access-log.js'
import { redactAndTruncate, redactUrl } from '../secrets.js'
import { ECHO_MAX } from '../truncate.js'
import { REQUEST_ID_HEADER, newRequestId } from './request-id.js'
import { announcesBody } from './request-checks.js'
import { isLingering, lingerAfterAnswer } from '../lingering-close.js'

// Required, not imported: importing node:http as an ES module reads every one of its exports, and
// reading WebSocket loads the fetch client bundled in Node.js (undici) at each start (docs/performance.md).
const { STATUS_CODES } = createRequire(import.meta.url)('node:http') as typeof import('node:http')

/** A 4xx message, whatever it quotes, stays one short line. */
const MESSAGE_MAX = 512

/** The body every non-2xx answer carries; `code` always equals the HTTP status. */
export function errorBody (code: number, message: string) {
  return { error: { code, message } }
}

function validationMessage (error: FastifyError): string {
  const issue = error.validation?.[0]
  const parameter = issue?.instancePath.replace(/^\//, '')
  if (error.validationContext === 'querystring' && issue && parameter) {
    return `Invalid query parameter '${parameter}': ${issue.message ?? 'is invalid'}`
  }
  return error.message
}

/** Every operation answers GET and HEAD only. */
const ALLOWED_METHODS = 'GET, HEAD'
const methodNotAllowed = (method: string | undefined, path: string) => `Method ${method} is not allowed on ${redactUrl(path, ECHO_MAX)}; use GET`

/** 4xx keep their clear message; a 5xx says only its status, and its real cause goes to the log. */
function sendError (error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  const status = error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode <= 599 ? error.statusCode : 500
  if (status >= 500) {
    request.log.error({ err: error }, 'request failed')
    return reply.code(status).send(errorBody(status, STATUS_CODES[status] ?? 'Internal Server Error'))
  }
  // Answered before the announced body had all arrived (too large, or refused before it was needed;
  // `complete` is also false, for a moment, without a body): closing the connection is the only way
  // not to read the rest, which Node.js would otherwise read to the end. It closes lingering, so that a
  // client still sending gets this answer rather than a reset.
  if (announcesBody(request.headers) && !request.raw.complete) {
    reply.header('connection', 'close')
    lingerAfterAnswer(request.raw)
  }
  return reply.code(status).send(errorBody(status, redactAndTruncate(error.validation ? validationMessage(error) : error.message, MESSAGE_MAX)))
}

/**
 * Fastify answers a malformed URL before any route, hook or error handler runs (option
 * `frameworkErrors`): this answer gets our shape, the request id and its access line by hand.
 */
export function frameworkErrors (error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  // Fastify's message quotes the whole URL, up to 16 KiB of it.
  const bounded = error.code === 'FST_ERR_BAD_URL' ? Object.assign(error, { message: `'${redactUrl(request.url, ECHO_MAX)}' is not a valid url component` }) : error
  sendError(bounded, request, reply.header(REQUEST_ID_HEADER, request.id))
  logRequestCompleted(request, reply)
}

/** An answer in the error shape written on a raw socket, which is then closed: there is no reply object. */
function writeRawError (socket: Socket, requestId: string, status: number, message: string, extraHeaders = '') {
  const body = JSON.stringify(errorBody(status, message))
  socket.write(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
    `${REQUEST_ID_HEADER}: ${requestId}\r\n${extraHeaders}Connection: close\r\n\r\n${body}`)
}

/** Node.js's parser refusals that have a status of their own; every other one is a 400. */
const CLIENT_ERROR_STATUS: Record<string, number> = {
  ERR_HTTP_REQUEST_TIMEOUT: 408,
  HPE_HEADER_OVERFLOW: 431
}

/**
 * Node answers a request it cannot even parse (bad HTTP, a smuggling attempt, headers too large,
 * a timeout) on the raw socket (option `clientErrorHandler`): same shape, with a request id and an
 * access line like any answer, written by hand because there is no request. `this` is the app.
 */
export function clientErrorHandler (this: FastifyInstance, error: Error & { code?: string, reason?: string }, socket: Socket) {
  // A lingering connection has had its answer: the client's end, mid-body, is no new request.
  if (error.code === 'ECONNRESET' || socket.destroyed || isLingering(socket)) return
  const status = CLIENT_ERROR_STATUS[error.code ?? ''] ?? 400
  const requestId = newRequestId()
  // The parser's reason is its own fixed text ("Invalid header value char"), never the client's bytes.
  const message = `${STATUS_CODES[status]}${error.reason ? `: ${error.reason}` : ''}`
  // A timeout can strike while an answer is still going out on the connection (to a client that reads
  // slowly): no second answer then, which the client would take for the answer to its next request.
  // Every answer of this server is written whole (a buffer, never a stream), so an answer is going out
  // exactly while the socket holds bytes not yet written.
  const answering = socket.writableLength > 0
  if (socket.writable && !answering) writeRawError(socket, requestId, status, message)
  logRawAnswer(this.log, { reqId: requestId, statusCode: status, clientError: error.code })
  socket.destroySoon()
}

/**
 * CONNECT asks us to be a proxy; Node.js emits it apart from other requests and, without a
 * listener, closes the connection without a word. It gets a 405 like any other method.
 */
function answerConnect (app: FastifyInstance, request: IncomingMessage, socket: Socket) {
  const requestId = newRequestId()
  socket.on('error', () => {})
  writeRawError(socket, requestId, 405, methodNotAllowed('CONNECT', request.url ?? ''), `Allow: ${ALLOWED_METHODS}\r\n`)
  logRawAnswer(app.log, { reqId: requestId, statusCode: 405, method: request.method, url: request.url })
  socket.destroySoon()
}

async function errorsPlugin (app: FastifyInstance) {
  // Shared, so that every route refers to one Error schema (and the OpenAPI document has one component).
  app.addSchema(ErrorSchema)

  app.setErrorHandler(sendError)
  // Node.js hands a net.Socket; its type says only Duplex.
  app.server.on('connect', (request: IncomingMessage, socket: Duplex) => answerConnect(app, request, socket as Socket))
  // An Expect other than 100-continue: Node.js would answer a bare 417 itself. Routed as any request
  // instead, it gets its 417 from the header checks (request-checks.ts), with an id, a log line and
  // its metrics.
  app.server.on('checkExpectation', (request: IncomingMessage, response: ServerResponse) => app.routing(request, response))

  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?', 1)[0] ?? request.url
    // Every route is read-only: a known path asked with another method is a 405, not a 404.
    if (request.method !== 'GET' && request.method !== 'HEAD' && app.hasRoute({ method: 'GET', url: path })) {
      return reply.code(405).header('allow', ALLOWED_METHODS).send(errorBody(405, methodNotAllowed(request.method, path)))
    }
    return reply.code(404).send(errorBody(404, `Not found: ${request.method} ${redactUrl(path, ECHO_MAX)}`))
  })
}

export default fp(errorsPlugin, { name: 'errors' })
