import { execFile, execFileSync } from 'node:child_process'
import { existsSync, readdirSync } from 'node:fs'
import { chown, mkdtemp, rm } from 'node:fs/promises'
import net from 'node:net'
import { tmpdir, userInfo } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import pg from 'pg'
import { freePort } from './process.js'

const run = promisify(execFile)

/** A real PostgreSQL server of the tests' own: a cluster in a temporary folder, on a free port. */
export interface PostgresServer {
  /** A new, empty database on this server; its URL (no password: the cluster trusts local connections). */
  createDatabase(): Promise<string>
  /** Stops the server (fast shutdown: connections are cut), keeping its data. */
  stop(): Promise<void>
  /** Starts it again on the same port and data. */
  start(): Promise<void>
  /** Stops it and removes its folder. */
  close(): Promise<void>
}

/**
 * The folder of initdb and pg_ctl: the newest /usr/lib/postgresql/N/bin (Debian's layout), else
 * what `pg_config --bindir` says. `.ci/run` installs Debian's postgresql package when neither has them.
 */
function findBinaries () {
  const root = '/usr/lib/postgresql'
  const versions = existsSync(root) ? readdirSync(root).filter((name) => /^\d+$/.test(name)).sort((a, b) => Number(b) - Number(a)) : []
  for (const version of versions) {
    const dir = join(root, version, 'bin')
    if (existsSync(join(dir, 'initdb'))) return dir
  }
  try {
    const dir = execFileSync('pg_config', ['--bindir'], { encoding: 'utf8' }).trim()
    if (existsSync(join(dir, 'initdb'))) return dir
  } catch {}
  throw new Error('no PostgreSQL server binaries (initdb): install them, e.g. apt-get install -y postgresql')
}

// The server refuses to run as root: then it runs as the postgres user, which owns the folder.
const asRoot = userInfo().uid === 0

export async function startPostgres (): Promise<PostgresServer> {
  const bin = findBinaries()
  const dir = await mkdtemp(join(tmpdir(), 'pg-'))
  const data = join(dir, 'data')
  const exec = (program: string, args: string[]) => asRoot
    ? run('runuser', ['-u', 'postgres', '--', join(bin, program), ...args])
    : run(join(bin, program), args)
  if (asRoot) {
    const { stdout } = await run('id', ['-u', 'postgres'])
    const { stdout: gid } = await run('id', ['-g', 'postgres'])
    await chown(dir, Number(stdout), Number(gid))
  }
  const port = await freePort()
  let databases = 0
  let running = false

  const start = async () => {
    // Durability is of no use to a test cluster, and costs time at every commit.
    const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200`
    await exec('pg_ctl', ['-D', data, '-o', options, '-l', join(dir, 'log'), '-w', '-t', '60', 'start'])
    running = true
  }
  const stop = async () => {
    if (!running) return
    running = false
    await exec('pg_ctl', ['-D', data, '-m', 'fast', '-w', 'stop'])
  }
  // Should the test process end without afterAll (a crash), the server must not outlive it.
  const stopAtExit = () => {
    if (!running) return
    const args = ['-D', data, '-m', 'immediate', 'stop']
    try {
      if (asRoot) execFileSync('runuser', ['-u', 'postgres', '--', join(bin, 'pg_ctl'), ...args], { stdio: 'ignore' })
      else execFileSync(join(bin, 'pg_ctl'), args, { stdio: 'ignore' })
    } catch {}
  }

  try {
    await exec('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--locale=C', '--no-sync'])
    await start()
  } catch (error) {
    stopAtExit()
    await rm(dir, { recursive: true, force: true })
    throw error
  }
  process.once('exit', stopAtExit)

  return {
    async createDatabase () {
      const name = `test_${++databases}`
      const client = new pg.Client({ connectionString: `postgresql://postgres@127.0.0.1:${port}/postgres` })
      await client.connect()
      try {
        await client.query(`CREATE DATABASE ${name}`)
      } finally {
        await client.end()
      }
      return `postgresql://postgres@127.0.0.1:${port}/${name}`
    },
    stop,
    start,
    async close () {
      process.off('exit', stopAtExit)
      try {
        await stop()
      } finally {
        stopAtExit()
        await rm(dir, { recursive: true, force: true })
      }
    }
  }
}

/**
 * A TCP proxy to the server at `url` that holds every chunk `delayMs` in each direction, as a
 * database far away does: what a replica does between its queries is spread out in time.
 * `freeze()` makes the connections open at that moment silent forever, both ways, without closing
 * them, as a NAT or load balancer does when it drops a flow; connections made after it pass.
 */
export async function latencyProxy (url: string, delayMs: number) {
  const target = new URL(url)
  const sockets = new Set<net.Socket>()
  const frozen = new WeakSet<net.Socket>()
  const proxy = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname)
    const pipe = (from: net.Socket, to: net.Socket) => {
      sockets.add(from)
      from.on('data', (chunk) => { setTimeout(() => { if (!to.destroyed && !frozen.has(from)) to.write(chunk) }, delayMs) })
      from.on('close', () => setTimeout(() => { if (!frozen.has(from)) to.destroy() }, delayMs + 1))
      from.on('error', () => {})
    }
    pipe(client, upstream)
    pipe(upstream, client)
  })
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve))
  const proxied = new URL(url)
  proxied.port = String((proxy.address() as net.AddressInfo).port)
  return {
    url: proxied.toString(),
    freeze () {
      for (const socket of sockets) frozen.add(socket)
    },
    async close () {
      for (const socket of sockets) socket.destroy()
      await new Promise((resolve) => proxy.close(resolve))
    }
  }
}
