import { execFile } from 'node:child_process'
import { once } from 'node:events'
import { createServer, type AddressInfo } from 'node:net'
import { describe, expect, it } from 'vitest'
import { startServer } from '../process.js'

/** Runs dist/cli/healthcheck.js as the image's HEALTHCHECK does; answers its exit code and stderr. */
function healthcheck (env: Record<string, string>) {
  return new Promise<{ code: number | null, stderr: string }>((resolve) => {
    execFile(process.execPath, ['dist/cli/healthcheck.js'], { env: { PATH: process.env.PATH ?? '', ...env } }, (error, _stdout, stderr) => {
      resolve({ code: error ? (error.code as number) : 0, stderr })
    })
  })
}

describe('the container health check', () => {
  it('exits 0 when the server answers /health, on the HOST and PORT the server uses', async () => {
    const server = await startServer()
    try {
      const port = new URL(server.url).port
      expect(await healthcheck({ PORT: port })).toEqual({ code: 0, stderr: '' })
      // In the image HOST is the wildcard 0.0.0.0: the check then asks the loopback address.
      expect(await healthcheck({ HOST: '0.0.0.0', PORT: port })).toEqual({ code: 0, stderr: '' })
    } finally {
      server.process.kill('SIGTERM')
      await server.exited
    }
  })

  it('exits 1 and says why when nothing answers', async () => {
    // A port that no other process can take while the check runs: ours on 127.0.0.1 (which also
    // keeps anyone from the wildcard address), asked on 127.0.0.2, where nothing listens.
    const holder = createServer().listen(0, '127.0.0.1')
    await once(holder, 'listening')
    const { port } = holder.address() as AddressInfo
    try {
      const { code, stderr } = await healthcheck({ HOST: '127.0.0.2', PORT: String(port) })
      expect(code).toBe(1)
      expect(stderr).toBe(`unhealthy: fetch failed (connect ECONNREFUSED 127.0.0.2:${port})\n`)
    } finally {
      holder.close()
    }
  })
})
