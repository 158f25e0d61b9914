// A reference of `npm run bench`: no framework, and the work that every request of the service does
// whatever its operation, written inline as cheaply as we know how: a request id, the check for a
// repeated Host or Authorization header, the SHA-256 of the bearer key and its lookup among the
// bundled keys, a per-key counter and its three rate-limit headers, the duration counted into a
// histogram bucket, and one access line in pino's format, batched as the service batches them
// (its dist/log-stream.js). The body is the precomputed one, as the baseline's: no routing, no
// query, no page assembled. Against the raw baseline it shows the least those features cost; the
// service's ratio could not exceed it, even outside Fastify.
// Usage: node scripts/bench-floor.mjs <response.json> <port>
import { createServer } from 'node:http'
import { hash, randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { hostname } from 'node:os'
import { createLogStream } from '../dist/log-stream.js'

const [file, port] = process.argv.slice(2)
const response = JSON.parse(readFileSync(file, 'utf8'))
const body = Buffer.from(response.body, 'base64')
const headers = response.headers
const keys = new Map(JSON.parse(readFileSync(new URL('../fixtures/keys.json', import.meta.url), 'utf8')).map((key) => [key.sha256, key]))
const PER_MINUTE = 1_000_000_000
const BUCKETS = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1]
const counts = new Map()
const histogram = new Array(BUCKETS.length + 1).fill(0)
const log = createLogStream()
const prefix = `{"level":30,"time":`
const bindings = `,"pid":${process.pid},"hostname":${JSON.stringify(hostname())},"reqId":`
const idPrefix = randomBytes(9).toString('base64url')
let sequence = 0

createServer((req, res) => {
  const started = performance.now()
  const id = `${idPrefix}-${(++sequence).toString(36)}`
  const raw = req.rawHeaders
  let hosts = 0
  let authorizations = 0
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]
    if (name.length === 4 && name.toLowerCase() === 'host') hosts++
    else if (name.length === 13 && name.toLowerCase() === 'authorization') authorizations++
  }
  const key = hosts === 1 && authorizations === 1 ? keys.get(hash('sha256', req.headers.authorization.slice(7).trim())) : undefined
  let status = 401
  if (key !== undefined) {
    const count = (counts.get(key.name) ?? 0) + 1
    counts.set(key.name, count)
    status = response.status
    res.writeHead(status, { ...headers, 'x-request-id': id, 'x-ratelimit-remaining': PER_MINUTE - count })
    res.end(status === 304 ? undefined : body)
  } else {
    res.writeHead(status, { 'x-request-id': id }).end()
  }
  const seconds = (performance.now() - started) / 1000
  let bucket = 0
  while (bucket < BUCKETS.length && seconds > BUCKETS[bucket]) bucket++
  histogram[bucket]++
  log.write(`${prefix}${Date.now()}${bindings}${JSON.stringify(id)},"method":${JSON.stringify(req.method)},"url":${JSON.stringify(req.url)},"statusCode":${status},"responseTime":${Math.round(seconds * 1e6) / 1000},"msg":"request completed"}\n`)
}).listen(Number(port), '127.0.0.1', () => process.stdout.write('listening\n'))
