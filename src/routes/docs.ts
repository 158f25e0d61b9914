import type { FastifyPluginAsync } from 'fastify'
import swaggerUi from '@fastify/swagger-ui'

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

/**
 * The interactive reference at /docs: Swagger UI, whose scripts, styles and images are served from
 * the package's own files (nothing from a CDN), reading the document that @fastify/swagger generates.
 */
const docsPage: FastifyPluginAsync = async (app) => {
  await app.register(swaggerUi, {
    routePrefix: '/docs',
    theme: { title: 'Model-gateway directory API' },
    // The operation ids are the names SDK users know (listProviders...): show them.
    uiConfig: { displayOperationId: true },
    staticCSP: CONTENT_SECURITY_POLICY
  })
}

export default docsPage
