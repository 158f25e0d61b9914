import Fastify, { type FastifyServerOptions } from 'fastify'
import type { DestinationStream } from 'pino'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { AccessLogController } from './access-log.js'
import type { Directory } from './repositories/directory.js'
import errors, { clientErrorHandler, frameworkErrors } from './plugins/errors.js'
import snapshot from './plugins/snapshot.js'
import auth from './plugins/auth.js'
import openapi from './plugins/openapi.js'
import requestId, { requestIdOf } from './plugins/request-id.js'
import shutdown from './plugins/shutdown.js'
import healthRoutes from './routes/health.js'
import providerRoutes from './routes/v1/providers.js'
import endpointRoutes from './routes/v1/endpoints.js'
import organizationRoutes from './routes/v1/organization.js'
import openapiDocumentRoutes from './routes/v1/openapi.js'
import docsPage from './routes/docs.js'

export interface LogOptions {
  level: string
  /** Where JSON lines go; stdout when absent. */
  stream?: DestinationStream
  /** Human-readable lines, for a person watching a terminal. */
  pretty?: boolean
}

interface AppOptions {
  /** The data served; its current view is pinned on each request. */
  directory: Directory
  /** No logging unless the caller (server.ts, a test) asks for it. */
  log?: LogOptions
}

function loggerOptions (log: LogOptions | undefined): FastifyServerOptions['logger'] {
  if (log === undefined) return false
  return {
    level: log.level,
    // Keys are secrets: whatever logs a request's headers, the key stays out of the log.
    redact: { paths: ['req.headers.authorization', 'headers.authorization'], censor: '[redacted]' },
    ...(log.stream ? { stream: log.stream } : {}),
    ...(log.pretty && !log.stream ? { transport: { target: 'pino-pretty', options: { translateTime: 'SYS:HH:MM:ss.l' } } } : {})
  }
}

/** Builds the application; never listens (server.ts does, tests inject). */
export function buildApp ({ directory, log }: AppOptions) {
  const app = Fastify({
    logger: loggerOptions(log),
    logController: new AccessLogController(),
    frameworkErrors,
    clientErrorHandler,
    genReqId: requestIdOf,
    // While closing, Fastify would answer requests on open connections with a 503 of its own shape;
    // they are served as usual instead (with `Connection: close`), and /ready tells the balancer.
    return503OnClosing: false
  }).withTypeProvider<TypeBoxTypeProvider>()

  // Lists and member pages are serialized once per data snapshot, and the rest (errors, probes) are a few
  // bytes: JSON.stringify serves those, and start-up compiles no serializer per response schema
  // (70 ms); the response schemas still document every answer.
  app.setSerializerCompiler(() => (data) => JSON.stringify(data))

  // No route takes a body: whatever is sent is read and dropped unparsed, so that a wrong method gets
  // its 405 (not a 400 or 415 about the body), and an anonymous caller cannot make us parse a MiB of JSON.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', (_request, payload, done) => {
    payload.on('end', () => done(null))
    payload.on('error', done)
    payload.resume()
  })

  app.register(errors)
  app.register(openapi)
  app.register(requestId)
  app.register(shutdown)

  // Outside /v1, so outside its authentication.
  app.register(healthRoutes)

  app.register(async (v1) => {
    await v1.register(snapshot, { directory })
    await v1.register(auth)
    await v1.register(providerRoutes)
    await v1.register(endpointRoutes)
    await v1.register(organizationRoutes)
  }, { prefix: '/v1' })

  // The contract is public: a reader needs no key to learn how to call us. Its routes get a scope of
  // their own beside the authenticated one (same /v1 prefix, no auth hook) rather than a list of
  // URLs for the auth hook to skip, so adding an operation can never make it public by accident.
  app.register(openapiDocumentRoutes, { prefix: '/v1' })
  app.register(docsPage)

  return app
}
