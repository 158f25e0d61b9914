import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { createServer, type AddressInfo } from 'node:net'

export interface RunningServer {
  process: ChildProcess
  url: string
  output: () => string
  /** Resolves with the exit code (or signal) once the process has ended. */
  exited: Promise<number | string>
}

/** Starts the built server (dist/server.js) as `npm start` does, on a free port. */
export function startServer (env: Record<string, string> = {}): Promise<RunningServer> {
  const child = spawn(process.execPath, ['dist/server.js'], {
    env: { PATH: process.env.PATH ?? '', PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let output = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { output += chunk })
  const exited = once(child, 'exit').then(([code, signal]) => (code ?? signal) as number | string)
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      // A server that never said it listens must not outlive the test run.
      child.kill('SIGKILL')
      reject(new Error(`server did not start:\n${output}`))
    }, 15000)
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

/** Runs the server expecting it to refuse to start; answers its exit code and output. */
export async function failToStart (env: Record<string, string>) {
  const child = spawn(process.execPath, ['dist/server.js'], { env: { PATH: process.env.PATH ?? '', PORT: '0', ...env } })
  let output = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { output += chunk })
  const [code] = await once(child, 'exit')
  return { code: code as number, output }
}

/** A port nobody listens on right now. */
export async function freePort () {
  const server = createServer().listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as AddressInfo
  server.close()
  await once(server, 'close')
  return port
}

/** The management key of Acme AI in the bundled fixtures (README, "Development keys"). */
export const BUNDLED_MANAGEMENT_KEY = 'sk-or-v1-dev-acme-mgmt-6f1d0c7a9b2e4f8c8d3a1b5e7c9f0a2d'
