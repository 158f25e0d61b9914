import Fastify, { type FastifyInstance, type FastifyPluginAsync, type FastifyReply, type FastifyRequest } from 'fastify'
import errors from '../plugins/errors.js'
import { compilersFactory } from '../schema-compilers.js'
import { packageInfo } from '../package-info.js'

/**
 * What the page may load: everything from this server, nothing from anywhere else (it works offline),
 * no inline script, no eval. Swagger UI's own default policy allows fonts and styles from any https: origin,
 * images from validator.swagger.io, and upgrades http: requests, which would break "Try it out" on a
 * server reached over plain http.
 */
const CONTENT_SECURITY_POLICY = {
  'default-src': "'self'",
  'base-uri': "'self'",
  'connect-src': "'self'",
  'font-src': "'self' data:",
  'form-action': "'self'",
  'frame-ancestors': "'self'",
  'img-src': "'self' data:",
  'object-src': "'none'",
  'script-src': "'self'",
  'script-src-attr': "'none'",
  // Swagger UI adds <style> elements as it renders (its code highlighter): inline styles only, never scripts.
  'style-src': "'self' 'unsafe-inline'"
}

const PREFIX = '/docs'

/**
 * The routes @fastify/swagger-ui registers under PREFIX with our options (`/` is also `/docs`), each
 * answered here by the page's app. test/docs-page.test.ts holds this list equal to Swagger UI's.
 */
const DOCS_ROUTES = ['/', '/static/index.html', '/static/swagger-initializer.js', '/json', '/yaml', '/static/*']

/** Headers of a message that belong to its connection or its framing, not to what it says: each side sets its own. */
const CONNECTION_HEADERS = new Set(['connection', 'keep-alive', 'transfer-encoding', 'date', 'content-length'])

const withoutConnectionHeaders = (headers: Record<string, string | string[] | number | undefined>) =>
  Object.fromEntries(Object.entries(headers).filter(([name, value]) => !CONNECTION_HEADERS.has(name) && value !== undefined)) as Record<string, string | string[]>

/** An OpenAPI document, as far as the page reads it. */
interface OpenapiObject {
  info: { title: string, [field: string]: unknown }
  [field: string]: unknown
}

/**
 * The page's own app: Swagger UI (its scripts, styles and images served from the package's own files,
 * nothing from a CDN), reading the document of the main app (plugins/openapi.ts), with our error answers.
 */
export async function buildDocsApp (document: OpenapiObject): Promise<FastifyInstance> {
  const [{ default: swagger }, { default: swaggerUi }, { version }] = await Promise.all([import('@fastify/swagger'), import('@fastify/swagger-ui'), packageInfo()])
  const docs = Fastify({ schemaController: { compilersFactory } })
  docs.register(errors)
  // The main app's document as it is (@fastify/swagger's static mode serves a document it is given).
  docs.register(swagger, { mode: 'static', specification: { document: document as never } })
  docs.register(swaggerUi, {
    routePrefix: PREFIX,
    theme: { title: `${document.info.title} ${version}: API reference` },
    uiConfig: {
      // The operation ids are the names SDK users know (listProviders...): show them.
      displayOperationId: true,
      // Without Swagger UI's top bar (the Fastify logo, and an Explore bar that loads any document by its
      // URL, which is not ours to offer): the page opens on the service's name and version.
      layout: 'BaseLayout'
    },
    staticCSP: CONTENT_SECURITY_POLICY
  })
  await docs.ready()
  return docs
}

/**
 * The interactive reference at /docs. Swagger UI and @fastify/static cost some 30 ms of every start
 * to load and register, for a page few ever open: they are loaded by the first request for the page,
 * into an app of their own, which answers each request for /docs through `inject`; the answer (status,
 * headers, body) is sent as it is, with our request id and access line. The routes here are Swagger
 * UI's own, so that a wrong method on one gets its 405 as before, and the page app's 404s are ours.
 */
const docsPage: FastifyPluginAsync = async (app) => {
  let docsApp: Promise<FastifyInstance> | undefined
  app.addHook('onClose', async () => { await (await docsApp?.catch(() => undefined))?.close() })

  async function answer (request: FastifyRequest, reply: FastifyReply) {
    // Built once, by whichever request comes first; built again if that failed.
    docsApp ??= app.openapi.object().then((document) => buildDocsApp(document as OpenapiObject)).catch((error: unknown) => { docsApp = undefined; throw error })
    // HEAD is answered as GET: Fastify's HEAD route sends the headers of the GET answer without its body.
    // (A body sent with the request was read and dropped: none goes on.)
    const answer = await (await docsApp).inject({ method: 'GET', url: request.url, headers: withoutConnectionHeaders(request.headers) })
    reply.code(answer.statusCode).headers(withoutConnectionHeaders(answer.headers))
    // An empty answer (a redirect, a 304) is sent as one, without a content type.
    return answer.rawPayload.length > 0 ? reply.send(answer.rawPayload) : reply.send()
  }

  await app.register(async (scope) => {
    for (const url of DOCS_ROUTES) scope.get(url, { schema: { hide: true } }, answer)
  }, { prefix: PREFIX })
}

export default docsPage
