import type { FastifyPluginAsync } from 'fastify'
import swaggerUi from '@fastify/swagger-ui'

/**
 * The interactive reference at /docs: Swagger UI, whose scripts, styles and images are served from
 * the package's own files (nothing from a CDN), reading the document that @fastify/swagger generates.
 */
const docsPage: FastifyPluginAsync = async (app) => {
  await app.register(swaggerUi, {
    routePrefix: '/docs',
    theme: { title: 'Model-gateway directory API' },
    // The operation ids are the names SDK users know (listProviders...): show them.
    uiConfig: { displayOperationId: true }
  })
}

export default docsPage
