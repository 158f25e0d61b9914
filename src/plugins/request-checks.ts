import type { IncomingHttpHeaders } from 'node:http'
import fp from 'fastify-plugin'
import createError from '@fastify/error'
import { errorCodes, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import { REQUEST_ID_HEADER } from './request-id.js'
import { ECHO_MAX, truncate } from '../truncate.js'

const MissingHost = createError('MISSING_HOST_HEADER', 'Missing Host header: HTTP/1.1 requires one', 400)
const RepeatedHeader = createError('REPEATED_HEADER', 'The %s header is sent more than once', 400)
const ExpectationFailed = createError('EXPECTATION_FAILED', "Expectation Failed: 'Expect: %s' is not supported; only 100-continue is", 417)

// Node.js's own reading of Expect (lib/_http_server.js): an HTTP/1.1 request whose Expect does not
// hold 100-continue is one it would refuse with a bare 417 (errors.ts hands it to us instead).
const CONTINUE = /(?:^|\W)100-continue(?:$|\W)/i

/**
 * Refuses a request whose headers a proxy in front of us may have read otherwise, or that expects
 * what we do not do (`Expect` other than 100-continue, RFC 9110 section 10.1.1). Node.js keeps
 * the first of two `Host` or two `Authorization` headers; a proxy may have routed or authorized
 * the request on the second. And an HTTP/1.1 request without `Host` is a 400 (RFC 9112 section
 * 3.2), which Node.js would answer itself without a body, an id or a log line
 * (`requireHostHeader: false` in app.ts hands it to us). Only the raw header list tells repeats.
 */
function checkHeaders (request: FastifyRequest): Error | undefined {
  const raw = request.raw.rawHeaders
  let hosts = 0
  let authorizations = 0
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!
    // The length first: most headers are neither, and lowering their names costs.
    if (name.length === 4 && name.toLowerCase() === 'host') hosts++
    else if (name.length === 13 && name.toLowerCase() === 'authorization') authorizations++
  }
  if (hosts > 1) return new RepeatedHeader('Host')
  if (authorizations > 1) return new RepeatedHeader('Authorization')
  if (request.raw.httpVersion !== '1.1') return undefined
  if (hosts === 0) return new MissingHost()
  const expectation = request.headers.expect
  if (expectation !== undefined && !CONTINUE.test(expectation)) return new ExpectationFailed(truncate(expectation, ECHO_MAX))
  return undefined
}

/** The request says a body follows: chunked, or a length that is not zero. */
export function announcesBody (headers: IncomingHttpHeaders): boolean {
  return headers['transfer-encoding'] !== undefined || (headers['content-length'] ?? '0') !== '0'
}

/**
 * Fastify parses (and bounds, with `bodyLimit`) the body of every method but GET and HEAD, whose
 * body it leaves alone: Node.js would then read it to the end after the answer, however long.
 * Read it here under the same bound, and drop it.
 */
function readBodyOfGet (request: FastifyRequest, limit: number, done: (err?: Error) => void) {
  const { headers, raw } = request
  if (!announcesBody(headers)) return done()
  if (Number(headers['content-length']) > limit) return done(new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE())
  let received = 0
  const finish = (error?: Error) => {
    raw.off('data', onData).off('end', finish).off('error', finish)
    done(error)
  }
  const onData = (chunk: Buffer) => {
    received += chunk.length
    if (received > limit) finish(new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE())
  }
  raw.on('data', onData).on('end', finish).on('error', finish)
}

/**
 * The first hook of every request, the 404s and the failed logins included: the answer carries the
 * request id (the error handler keeps headers already set, so errors carry it too), so that a client
 * can quote it and we can find the log line; then the checks of the request as a whole, before
 * authentication, on every path.
 */
async function requestChecksPlugin (app: FastifyInstance, { bodyLimit }: { bodyLimit: number }) {
  app.addHook('onRequest', (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => {
    reply.header(REQUEST_ID_HEADER, request.id)
    const refused = checkHeaders(request)
    if (refused) return done(refused)
    if (request.method === 'GET' || request.method === 'HEAD') return readBodyOfGet(request, bodyLimit, done)
    done()
  })
}

export default fp(requestChecksPlugin, { name: 'request-checks' })
