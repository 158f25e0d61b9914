// A preload of `npm run bench` (node --import): the service with one request-path feature taken
// out, so that the bench measures what the feature costs against the service as it is. Features
// that a setting turns off (metrics, rate limits, the access line) are measured with that setting;
// these two have none, and must have none in production. Never loaded outside the bench.
//
//   BENCH_WITHOUT=auth        no Authorization header read, no SHA-256: every request is the key
//                             whose hash is BENCH_KEY_SHA256 (still one map lookup in the snapshot)
//   BENCH_WITHOUT=validation  the member query read as numbers: no Ajv, no integer check, no defaults
import { subscribe } from 'node:diagnostics_channel'
import { registerHooks } from 'node:module'

const without = process.env.BENCH_WITHOUT

// The module of the auth plugin, replaced by one that only pins the snapshot and the bench key on
// the request, with the same exports (src/plugins/auth.ts).
const AUTH_STUB = `
import fp from 'fastify-plugin'
const keyHash = ${JSON.stringify(process.env.BENCH_KEY_SHA256)}
const API_KEY = Symbol('apiKey')
export function apiKeyOf (request) {
  if (!request[API_KEY]) throw new Error('no authenticated key')
  return request[API_KEY]
}
export function requireManagementKey (request, _reply, done) {
  done(apiKeyOf(request).kind === 'management' ? undefined : new Error('not a management key'))
}
export default fp(async (app, { snapshots }) => {
  app.decorateRequest('snapshot', null)
  app.decorateRequest(API_KEY, null)
  app.addHook('onRequest', (request, _reply, done) => {
    request.snapshot = snapshots.current()
    request[API_KEY] = request.snapshot.findKey(keyHash) ?? null
    done()
  })
}, { name: 'auth' })
`

if (without === 'auth') {
  registerHooks({
    load (url, context, nextLoad) {
      // The unbundled build of the bench (bench.mjs, MODULES): in the bundle, auth is no module of its own.
      if (url.endsWith('/bench-modules/plugins/auth.js')) return { format: 'module', source: AUTH_STUB, shortCircuit: true }
      return nextLoad(url, context)
    }
  })
} else if (without === 'validation') {
  subscribe('fastify.initialization', ({ fastify }) => {
    fastify.setValidatorCompiler(() => (query) => ({ value: { offset: Number(query.offset), limit: Number(query.limit) } }))
    fastify.addHook('onRoute', (route) => { route.preValidation = undefined })
  })
} else {
  throw new Error(`BENCH_WITHOUT: auth or validation, not ${without}`)
}
