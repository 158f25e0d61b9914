// The container's HEALTHCHECK: exits 0 when the server on this host answers GET /health.
// Slim images have no curl, and node is there anyway; reading HOST and PORT like the server
// keeps the check right when an operator moves the port.
import { isIPv6 } from 'node:net'
import { loadConfig } from '../config.js'

function probeUrl (host: string, port: number) {
  // A wildcard address is where the server listens, not an address to connect to.
  const target = host === '0.0.0.0' ? '127.0.0.1' : host === '::' ? '::1' : host
  return `http://${isIPv6(target) ? `[${target}]` : target}:${port}/health`
}

try {
  const { HOST, PORT } = loadConfig()
  const url = probeUrl(HOST, PORT)
  const response = await fetch(url)
  if (!response.ok) throw new Error(`${url} answered ${response.status}`)
} catch (error) {
  // Docker keeps this output with the health status (docker inspect).
  const { message, cause } = error as Error & { cause?: Error }
  process.stderr.write(`unhealthy: ${message}${cause ? ` (${cause.message})` : ''}\n`)
  process.exit(1)
}
