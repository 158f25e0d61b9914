import fp from 'fastify-plugin'
import cors from '@fastify/cors'
import type { FastifyInstance } from 'fastify'

/**
 * CORS for browser dashboards on the origins listed (or any, with `*`): preflights answered before
 * authentication (a browser sends no Authorization on a preflight), `Authorization` and the official
 * SDK's attribution headers allowed, and the headers a dashboard needs to read exposed. An origin not
 * listed gets no Access-Control-* header at all (a list given to @fastify/cors as such would still
 * expose and advertise to it), and its preflight is answered as any OPTIONS request (405).
 */
async function corsPlugin (app: FastifyInstance, { origins }: { origins: string[] }) {
  const allowed = new Set(origins)
  const any = allowed.has('*')
  await app.register(cors, {
    origin: (origin, callback) => callback(null, origin !== undefined && (any || allowed.has(origin))),
    methods: ['GET', 'HEAD'],
    // The last three are those the official @openrouter/sdk sends on every operation once an app names
    // itself (httpReferer, appTitle, appCategories); a preflight that lacked them failed the SDK's call.
    allowedHeaders: ['Authorization', 'If-None-Match', 'X-Request-Id', 'HTTP-Referer', 'X-OpenRouter-Title', 'X-OpenRouter-Categories'],
    exposedHeaders: ['ETag', 'Retry-After', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'X-Request-Id'],
    // Browsers keep a preflight's answer this long (Chromium caps it at 2 hours).
    maxAge: 7200,
    // Without it, an OPTIONS lacking Access-Control-Request-Method would get a text/plain 400.
    strictPreflight: false
  })
}

export default fp(corsPlugin, { name: 'cors' })
