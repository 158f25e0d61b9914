import Fastify, { type FastifyServerOptions } from 'fastify'
import type { DestinationStream } from 'pino'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { AccessLogController, logSerializers, requestLogger } from './access-log.js'
import { corsOrigins, loadConfig, type Config, type ConnectionLimits } from './config.js'
import type { Snapshots } from './repositories/lifecycle.js'
import errors, { clientErrorHandler, frameworkErrors } from './plugins/errors.js'
import auth from './plugins/auth.js'
import openapi from './plugins/openapi.js'
import { requestIdOf } from './plugins/request-id.js'
import requestChecks from './plugins/request-checks.js'
import shutdown from './plugins/shutdown.js'
import metrics from './plugins/metrics.js'
import { createRateLimits } from './plugins/rate-limit.js'
import cors from './plugins/cors.js'
import indexRoutes from './routes/index.js'
import healthRoutes from './routes/health.js'
import metricsRoutes from './routes/metrics.js'
import listRoutes from './routes/v1/lists.js'
import organizationRoutes from './routes/v1/organization.js'
import openapiDocumentRoutes from './routes/v1/openapi.js'
import { createSenders } from './routes/v1/send.js'
import docsPage from './routes/docs.js'
import runbookRoutes from './routes/runbook.js'
import { compilersFactory } from './schema-compilers.js'
import { PageCache } from './representation.js'
import { SharedErrorResponses } from './schemas/common.js'

export interface LogOptions {
  level: string
  /** Where JSON lines go; stdout when absent. */
  stream?: DestinationStream
  /** Human-readable lines, for a person watching a terminal. */
  pretty?: boolean
}

type AppSettings = ConnectionLimits & Pick<Config, 'METRICS' | 'RATE_LIMIT_PER_MINUTE' | 'RATE_LIMIT_ANONYMOUS_PER_MINUTE' | 'REDIS_URL' | 'TRUST_PROXY' | 'CORS_ORIGINS' | 'MAX_STALENESS_MS'>

interface AppOptions {
  /** The data served; its current view is pinned on each request. */
  snapshots: Snapshots
  /** No logging unless the caller (main.ts, a test) asks for it. */
  log?: LogOptions
  /** The defaults of config.ts for those not given. */
  settings?: Partial<AppSettings>
  /** Now, in ms since the epoch, for keys' expiries and the data's staleness: tests give their own. */
  clock?: () => number
}

/**
 * No route takes a body: a few bytes sent by mistake are read and dropped, anything larger is
 * answered 413 at once (and its connection closed, so that the rest is not read either).
 */
export const BODY_LIMIT_BYTES = 1024

function loggerOptions (log: LogOptions | undefined): FastifyServerOptions['logger'] {
  if (log === undefined) return false
  return {
    level: log.level,
    // Keys are secrets: whatever logs a request's headers, the key stays out of the log; whatever
    // logs a request or an error, so does a key sent in the URL (access-log.ts).
    redact: { paths: ['req.headers.authorization', 'headers.authorization'], censor: '[redacted]' },
    serializers: logSerializers,
    ...(log.stream ? { stream: log.stream } : {}),
    ...(log.pretty && !log.stream ? { transport: { target: 'pino-pretty', options: { translateTime: 'SYS:HH:MM:ss.l' } } } : {})
  }
}

/** A number of hops (Fastify's types lack that form, which a function gives), or addresses and ranges. */
function trustProxy (setting: string) {
  if (!/^[0-9]+$/.test(setting)) return setting
  const hops = Number(setting)
  return (_address: string, hop: number) => hop < hops
}

/** Builds the application; never listens (main.ts does, tests inject). */
export function buildApp ({ snapshots, log, settings, clock = Date.now }: AppOptions) {
  const config: AppSettings = { ...loadConfig({}), ...settings }
  const app = Fastify({
    logger: loggerOptions(log),
    logController: new AccessLogController(log?.stream),
    childLoggerFactory: requestLogger,
    frameworkErrors,
    clientErrorHandler,
    genReqId: requestIdOf,
    // Validation built on first use, responses sent with JSON.stringify (schema-compilers.ts).
    schemaController: { compilersFactory },
    // While closing, Fastify would answer requests on open connections with a 503 of its own shape;
    // they are served as usual instead (with `Connection: close`), and /ready tells the balancer.
    return503OnClosing: false,
    // request.ip, which the per-address rate limit counts by: the connection's address unless told
    // which proxies in front may name the client (X-Forwarded-For).
    ...(config.TRUST_PROXY ? { trustProxy: trustProxy(config.TRUST_PROXY) } : {}),
    keepAliveTimeout: config.KEEP_ALIVE_TIMEOUT_MS,
    // Silence on a connection that is not between requests (while a client does not read its
    // answer) is bounded like idleness between requests.
    connectionTimeout: config.KEEP_ALIVE_TIMEOUT_MS,
    requestTimeout: config.REQUEST_TIMEOUT_MS,
    bodyLimit: BODY_LIMIT_BYTES,
    http: {
      headersTimeout: config.HEADERS_TIMEOUT_MS,
      // Node.js looks for requests past their timeouts every 30 s by default, which would let a
      // 10 s limit last 40 s; once a second costs a walk over the open connections.
      connectionsCheckingInterval: 1000,
      // An HTTP/1.1 request without Host is refused by our hook instead (plugins/request-checks.ts):
      // Node.js would answer a bodiless 400 with no request id and no access line.
      requireHostHeader: false
    }
  }).withTypeProvider<TypeBoxTypeProvider>()
  // Past the cap Node.js closes a new connection on arrival: a flood costs a file descriptor for a
  // moment, not memory for as long as it lasts.
  app.server.maxConnections = config.MAX_CONNECTIONS

  // No route takes a body: whatever is sent (up to BODY_LIMIT_BYTES) is read and dropped unparsed, so
  // that a wrong method gets its 405 (not a 400 or 415 about the body), and an anonymous caller cannot
  // make us parse JSON. Fastify enforces the limit on Content-Length and on the bytes received.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, _body, done) => done(null))

  app.register(errors)
  app.register(openapi)
  // The first hook of every request: its id on the answer, then the checks of the request as a whole.
  app.register(requestChecks, { bodyLimit: BODY_LIMIT_BYTES })
  app.register(shutdown)
  const origins = corsOrigins(config)
  // Answers vary on Accept-Encoding, and with CORS on Origin too: the routes set Vary whole.
  const vary = origins.length > 0 ? 'Origin, Accept-Encoding' : 'Accept-Encoding'
  // The member pages kept as they are sent: the routes answer from it, the metrics say how full it is.
  const pages = new PageCache(vary)
  // First of the hooks that measure, so that the time of the others counts.
  app.register(metrics, { enabled: config.METRICS, snapshots, maxStalenessMs: config.MAX_STALENESS_MS, pages })
  if (origins.length > 0) app.register(cors, { origins })

  // Outside /v1, so outside its authentication (and its rate limits).
  app.register(indexRoutes, { metrics: config.METRICS })
  // Not ready while the data cannot be confirmed current past MAX_STALENESS_MS: the balancer sends elsewhere.
  const maxStalenessMs = config.MAX_STALENESS_MS
  app.register(healthRoutes, { stale: () => maxStalenessMs !== undefined && clock() - snapshots.confirmedAt() > maxStalenessMs })
  if (config.METRICS) app.register(metricsRoutes)

  app.register(async (v1) => {
    // The error answers every operation may give, documented once for all of them.
    v1.addHook('onRoute', (route) => {
      route.schema = { ...route.schema, response: { ...SharedErrorResponses, ...route.schema?.response as object } }
    })
    // One counter a request: a valid key counts against its own limit, a request without one against
    // its address's (rate-limit.ts).
    const { limitRefusals, limitKey } = await createRateLimits(v1, {
      perMinute: config.RATE_LIMIT_PER_MINUTE,
      anonymousPerMinute: config.RATE_LIMIT_ANONYMOUS_PER_MINUTE,
      redisUrl: config.REDIS_URL
    })
    // Pins the snapshot and authenticates; a request without a valid key is counted by its address,
    // then refused.
    await v1.register(auth, { snapshots, limitRefusals, clock, maxStalenessMs })
    // After auth in the scope's order: the key is known.
    v1.addHook('onRequest', limitKey)
    const send = createSenders(vary, pages)
    await v1.register(listRoutes, { send })
    await v1.register(organizationRoutes, { send })
  }, { prefix: '/v1' })

  // The contract is public: a reader needs no key to learn how to call us. Its routes get a scope of
  // their own beside the authenticated one (same /v1 prefix, no auth hook) rather than a list of
  // URLs for the auth hook to skip, so adding an operation can never make it public by accident.
  app.register(openapiDocumentRoutes, { prefix: '/v1' })
  app.register(docsPage)
  app.register(runbookRoutes)

  return app
}
