// The baseline of `npm run bench`: a raw node:http server that answers every request with
// the very bytes the service sends for one operation (status, headers, body), precomputed.
// It is the most a Node.js process can do for that response: no routing, no auth, no log.
// Usage: node scripts/bench-baseline.mjs <response.json> <port>
import { createServer } from 'node:http'
import { readFileSync } from 'node:fs'

const [file, port] = process.argv.slice(2)
const response = JSON.parse(readFileSync(file, 'utf8'))
const body = Buffer.from(response.body, 'base64')
const headers = response.headers

createServer((_req, res) => {
  res.writeHead(response.status, headers)
  res.end(body)
}).listen(Number(port), '127.0.0.1', () => process.stdout.write('listening\n'))
