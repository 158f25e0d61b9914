import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freePort } from './process.js'

export interface RedisServer {
  url: string
  /** Stops the server (SIGTERM) and waits for it to exit; its port stays free for `start()`. */
  stop(): Promise<void>
  /** Starts it again on the same port, empty. */
  start(): Promise<void>
  /** Stops it and removes its folder. */
  close(): Promise<void>
}

/**
 * A real redis-server (Debian's package, .ci/run installs it) on a free port, in a temporary folder,
 * persisting nothing, asking for `password` when given; resolves once it accepts connections.
 */
export async function startRedis ({ password }: { password?: string } = {}): Promise<RedisServer> {
  const dir = await mkdtemp(join(tmpdir(), 'redis-'))
  const port = await freePort()
  let child: ChildProcess | undefined

  async function start () {
    const server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', ...(password ? ['--requirepass', password] : [])], { stdio: ['ignore', 'pipe', 'pipe'] })
    child = server
    let output = ''
    await new Promise<void>((resolve, reject) => {
      server.on('error', (error) => reject(new Error(`cannot run redis-server (apt-get install redis-server): ${error.message}`)))
      server.on('exit', () => reject(new Error(`redis-server exited:\n${output}`)))
      server.stdout!.on('data', (chunk) => {
        output += chunk
        if (output.includes('Ready to accept connections')) resolve()
      })
    })
  }

  async function stop () {
    if (child === undefined || child.exitCode !== null) return
    const exited = once(child, 'exit')
    child.kill('SIGTERM')
    await exited
  }

  await start()
  return {
    url: `redis://127.0.0.1:${port}`,
    stop,
    start,
    async close () {
      await stop()
      await rm(dir, { recursive: true, force: true })
    }
  }
}
