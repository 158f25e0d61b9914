import type { IncomingHttpHeaders } from 'node:http'
import fp from 'fastify-plugin'
import createError from '@fastify/error'
import { errorCodes, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'

const MissingHost = createError('MISSING_HOST_HEADER', 'Missing Host header: HTTP/1.1 requires one', 400)
const RepeatedHeader = createError('REPEATED_HEADER', 'The %s header is sent more than once', 400)

/**
 * Refuses a request whose headers a proxy in front of us may have read otherwise. Node.js keeps
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
  if (hosts === 0 && request.raw.httpVersion === '1.1') return new MissingHost()
  return undefined
}

/**
 * Fastify parses (and bounds, with `bodyLimit`) the body of every method but GET and HEAD, whose
 * body it leaves alone: Node.js would then read it to the end after the answer, however long.
 * Read it here under the same bound, and drop it.
 */
/** The request says a body follows: chunked, or a length that is not zero. */
export function announcesBody (headers: IncomingHttpHeaders): boolean {
  return headers['transfer-encoding'] !== undefined || (headers['content-length'] ?? '0') !== '0'
}

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

async function requestChecksPlugin (app: FastifyInstance, { bodyLimit }: { bodyLimit: number }) {
  // onRequest at the root: before authentication, on every path.
  app.addHook('onRequest', (request: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void) => {
    const refused = checkHeaders(request)
    if (refused) return done(refused)
    if (request.method === 'GET' || request.method === 'HEAD') return readBodyOfGet(request, bodyLimit, done)
    done()
  })
}

export default fp(requestChecksPlugin, { name: 'request-checks' })
