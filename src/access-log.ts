import { hostname } from 'node:os'
import { LogController, type FastifyBaseLogger, type FastifyReply, type FastifyRequest } from 'fastify'
import { stdSerializers, type Bindings, type ChildLoggerOptions, type DestinationStream } from 'pino'
import { redactSecrets, redactUrl } from './secrets.js'

/** Node.js accepts URLs of up to 16 KiB; a line keeps the first KiB, enough to tell any request of ours. */
const LOGGED_URL_MAX = 1024

/**
 * A URL as a line may show it: bounded, and without the keys a client sent in its path or query
 * (by mistake, or as a client that takes keys in the query): the log is read by more people than
 * hold keys.
 */
const loggedUrl = (url: string) => redactUrl(url, LOGGED_URL_MAX)

/**
 * pino's serializers of a request and of an error, Fastify's but for secrets: a line of Fastify's own
 * that logs a request (`{ req }`), or an error whose message quotes a URL, carries no key either.
 */
export const logSerializers = {
  req: (request: FastifyRequest) => ({
    method: request.method,
    url: loggedUrl(request.url),
    host: request.host,
    remoteAddress: request.ip,
    remotePort: request.socket?.remotePort
  }),
  err: (error: Error) => {
    const serialized = stdSerializers.err(error)
    // pino hands back as it is whatever is not an error.
    if (typeof serialized?.message === 'string') serialized.message = redactSecrets(serialized.message)
    if (typeof serialized?.stack === 'string') serialized.stack = redactSecrets(serialized.stack)
    return serialized
  }
}

/**
 * One line per request, written when the response is done, instead of Fastify's two
 * ("incoming request" and "request completed"): half the log volume for the same facts.
 * The request id is on the line as on every other line of the request (see RequestLogger).
 */
export class AccessLogController extends LogController {
  readonly #write: LineWriter | undefined

  /** `stream`: the logger's own destination, which the line of a request answered without error goes to directly. */
  constructor (stream?: DestinationStream) {
    super()
    this.#write = stream && accessLineWriter(stream)
  }

  override incomingRequest () {}

  override requestCompleted (error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply) {
    logRequestCompleted(request, reply, error, this.#write)
  }
}

/** The levels at which an access line (info) is written. */
const LOGS_INFO = new Set(['trace', 'debug', 'info'])

/** The access line of a request; also written by hand for the answers Fastify makes without hooks. */
export function logRequestCompleted (request: FastifyRequest, reply: FastifyReply, error?: Error | null, write?: LineWriter) {
  const log = reply.log
  // The request's own bindings as the line's first fields: the same line as its child logger writes.
  const lazy = log instanceof RequestLogger
  const logger = lazy ? log.parent : log
  // Milliseconds to the microsecond: the digits beyond are noise, and each access line costs its bytes.
  const responseTime = Math.round(reply.elapsedTime * 1000) / 1000
  if (!error && write && lazy) {
    if (LOGS_INFO.has(logger.level)) write(log.bindings, request.method, loggedUrl(request.url), reply.statusCode, responseTime)
    return
  }
  const line = {
    ...(lazy ? log.bindings : undefined),
    method: request.method,
    url: loggedUrl(request.url),
    statusCode: reply.statusCode,
    responseTime
  }
  if (error) logger.error({ ...line, err: error }, 'request errored')
  else logger.info(line, 'request completed')
}

type LineWriter = (bindings: Bindings, method: string, url: string, statusCode: number, responseTime: number) => void

/**
 * The line pino writes for a request completed (its default base: pid and hostname; epoch time),
 * made as one template and written to pino's destination: pino's walk over the line's object,
 * escaping each key and value on its own, was the largest part of an access line's cost
 * (docs/performance.md, "The request path"). test/access-log.test.ts holds this line equal to pino's own for the same fields,
 * escapes included: a pino release that writes its lines otherwise fails it.
 */
function accessLineWriter (stream: DestinationStream): LineWriter {
  const base = `,"pid":${process.pid},"hostname":${JSON.stringify(hostname())}`
  return (bindings, method, url, statusCode, responseTime) => {
    let fields = ''
    for (const key in bindings) fields += `,${JSON.stringify(key)}:${JSON.stringify(bindings[key])}`
    stream.write(`{"level":30,"time":${Date.now()}${base}${fields},"method":${JSON.stringify(method)},"url":${JSON.stringify(url)},"statusCode":${statusCode},"responseTime":${responseTime},"msg":"request completed"}\n`)
  }
}

type LogArguments = [object: unknown, message?: string, ...values: unknown[]]

/**
 * The logger of a request, whose pino child (bound to the request id) is made when something logs
 * through it: Fastify makes one per request, which cost as much as half the access line, and most
 * requests log nothing but that line, which the parent writes with the same bindings.
 */
class RequestLogger implements FastifyBaseLogger {
  #child: FastifyBaseLogger | undefined
  constructor (readonly parent: FastifyBaseLogger, readonly bindings: Bindings) {}

  get #logger (): FastifyBaseLogger { return this.#child ??= this.parent.child(this.bindings) }
  get level () { return this.#logger.level }
  set level (level: string) { this.#logger.level = level }
  fatal (...args: LogArguments) { this.#logger.fatal(...args as [unknown]) }
  error (...args: LogArguments) { this.#logger.error(...args as [unknown]) }
  warn (...args: LogArguments) { this.#logger.warn(...args as [unknown]) }
  info (...args: LogArguments) { this.#logger.info(...args as [unknown]) }
  debug (...args: LogArguments) { this.#logger.debug(...args as [unknown]) }
  trace (...args: LogArguments) { this.#logger.trace(...args as [unknown]) }
  silent (...args: LogArguments) { this.#logger.silent(...args as [unknown]) }
  child (bindings: Bindings, options?: ChildLoggerOptions) { return this.#logger.child(bindings, options) }
}

/**
 * Fastify's childLoggerFactory: a RequestLogger, unless the route sets its own level or serializers
 * (the probes log at warn), for which the child is made at once as Fastify does.
 */
export function requestLogger (logger: FastifyBaseLogger, bindings: Bindings, options: ChildLoggerOptions): FastifyBaseLogger {
  // The only two options Fastify passes, for a route that sets them.
  if (options.level !== undefined || options.serializers !== undefined) return logger.child(bindings, options)
  return new RequestLogger(logger, bindings)
}

/**
 * The access line of an answer Node.js or we write on the raw socket, with no Fastify request
 * (a request Node.js could not parse, a CONNECT): same message, the fields that are known.
 */
export function logRawAnswer (log: FastifyBaseLogger, line: { reqId: string, statusCode: number, method?: string, url?: string, clientError?: string }) {
  log.info({ ...line, url: line.url === undefined ? undefined : loggedUrl(line.url) }, 'request completed')
}
