import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { createServer } from 'node:net'
import { PATIENCE_MS } from './patience.js'

export interface RunningServer {
  process: ChildProcess
  url: string
  output: () => string
  /** Resolves with the exit code (or signal) once the process has ended. */
  exited: Promise<number | string>
}

/** Starts the built server (dist/server.js) as `npm start` does, on a free port, through `wrapper` when given. */
export function startServer (env: Record<string, string> = {}, { wrapper = [], onSpawn }: { wrapper?: string[], onSpawn?: (child: ChildProcess) => void } = {}): Promise<RunningServer> {
  // A wrapper runs it (faketime, for a replica whose clock is off).
  const [command, ...args] = [...wrapper, process.execPath, 'dist/server.js']
  const child = spawn(command!, args, {
    env: { PATH: process.env.PATH ?? '', PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  onSpawn?.(child)
  let output = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { output += chunk })
  const exited = once(child, 'exit').then(([code, signal]) => (code ?? signal) as number | string)
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      // A server that never said it listens must not outlive the test run.
      child.kill('SIGKILL')
      reject(new Error(`server did not start:\n${output}`))
    }, PATIENCE_MS)
    const onData = () => {
      const match = /Server listening at (http:\/\/[^"\s]+)/.exec(output)
      if (match) {
        clearTimeout(timer)
        child.stdout.off('data', onData)
        resolve({ process: child, url: match[1]!, output: () => output, exited })
      }
    }
    child.stdout.on('data', onData)
    exited.then(() => { clearTimeout(timer); reject(new Error(`server exited before listening:\n${output}`)) })
  })
}

/**
 * Runs the server expecting it to refuse to start; answers its exit code and output. One that starts
 * after all is killed after PATIENCE_MS (code SIGKILL), not left serving past the test.
 */
export async function failToStart (env: Record<string, string>) {
  const child = spawn(process.execPath, ['dist/server.js'], { env: { PATH: process.env.PATH ?? '', PORT: '0', ...env } })
  let output = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { output += chunk })
  const timer = setTimeout(() => child.kill('SIGKILL'), PATIENCE_MS)
  const [code, signal] = await once(child, 'exit')
  clearTimeout(timer)
  return { code: (code ?? signal) as number | string, output }
}

// Ports for servers that must be told their port before they start (a HEALTHCHECK reads PORT; Redis
// and PostgreSQL restart on theirs). Taken below the kernel's range for listen(0) (32768 and up on
// Linux), where no other test's server can be given the same port between our check and our
// server's bind, and split between vitest's workers, which run test files at the same time.
const PORTS_PER_WORKER = 200
const FIRST_PORT = 20000 + (Number(process.env.VITEST_POOL_ID ?? 0) % 60) * PORTS_PER_WORKER
let nextPort = 0

/** A port of this worker's share that nobody listens on right now. */
export async function freePort () {
  for (let tries = 0; tries < PORTS_PER_WORKER; tries++) {
    const port = FIRST_PORT + (nextPort++ % PORTS_PER_WORKER)
    const server = createServer()
    const free = await new Promise<boolean>((resolve) => {
      server.once('error', () => resolve(false))
      server.listen(port, '127.0.0.1', () => resolve(true))
    })
    if (free) {
      server.close()
      await once(server, 'close')
      return port
    }
  }
  throw new Error(`no free port from ${FIRST_PORT} to ${FIRST_PORT + PORTS_PER_WORKER - 1}`)
}

/** The management key of Acme AI in the bundled fixtures (README, "Development keys"). */
export const BUNDLED_MANAGEMENT_KEY = 'sk-or-v1-dev-acme-mgmt-6f1d0c7a9b2e4f8c8d3a1b5e7c9f0a2d'
