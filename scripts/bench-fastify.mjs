// A reference of `npm run bench`: Fastify itself, with one route and no hook, plugin or logger,
// answering every request with the very bytes the service sends for one operation (status,
// headers, body), precomputed. Against the raw baseline it shows what the framework alone costs;
// the service's ratio cannot exceed this one.
// Usage: node scripts/bench-fastify.mjs <response.json> <port>
import { readFileSync } from 'node:fs'
import Fastify from 'fastify'

const [file, port] = process.argv.slice(2)
const response = JSON.parse(readFileSync(file, 'utf8'))
const body = Buffer.from(response.body, 'base64')
const { 'content-length': _length, ...headers } = response.headers

const app = Fastify()
app.get('/*', (_request, reply) => {
  reply.code(response.status).headers(headers).send(response.status === 304 ? undefined : body)
})
await app.listen({ port: Number(port), host: '127.0.0.1' })
process.stdout.write('listening\n')
