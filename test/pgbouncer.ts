import { execFileSync, spawn } from 'node:child_process'
import { chown, mkdtemp, rm, writeFile } from 'node:fs/promises'
import net from 'node:net'
import { tmpdir, userInfo } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { freePort } from './process.js'

export interface PgBouncer {
  /** The URL given, through the bouncer: its host and port swapped. */
  url: string
  /** Kills the bouncer and removes its folder. */
  close(): Promise<void>
}

/**
 * A real PgBouncer (Debian's package, .ci/run installs it) in front of the server at `url`, on a free
 * port, in transaction pooling unless told otherwise, and otherwise with PgBouncer's defaults, as a
 * fleet runs it: in particular no `ignore_startup_parameters`, so that a client sending a startup
 * parameter PgBouncer does not track is refused, as it would be there. Resolves once it accepts
 * connections.
 */
export async function startPgBouncer (url: string, { poolMode = 'transaction' }: { poolMode?: 'transaction' | 'session' } = {}): Promise<PgBouncer> {
  const server = new URL(url)
  const user = decodeURIComponent(server.username) || 'postgres'
  const dir = await mkdtemp(join(tmpdir(), 'pgbouncer-'))
  const port = await freePort()
  // auth_type=trust checks no password, but the user must still be listed in auth_file.
  await writeFile(join(dir, 'userlist.txt'), `"${user}" ""\n`)
  await writeFile(join(dir, 'pgbouncer.ini'), [
    '[databases]',
    // Any database name, on the server, as the client's user.
    `* = host=${server.hostname} port=${server.port || 5432}`,
    '',
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    // No Unix socket: the default folder (/tmp) would be shared by every bouncer on the machine.
    'unix_socket_dir =',
    `pool_mode = ${poolMode}`,
    'auth_type = trust',
    `auth_file = ${join(dir, 'userlist.txt')}`,
    `logfile = ${join(dir, 'pgbouncer.log')}`,
    `pidfile = ${join(dir, 'pgbouncer.pid')}`,
    ''
  ].join('\n'))

  // PgBouncer refuses to run as root: then it runs as the postgres user, which owns the folder (its
  // log and pid file go there). Started by uid rather than through runuser, so that the child is
  // pgbouncer itself and a signal to it reaches pgbouncer, not a runuser that would die alone.
  let ids: { uid: number, gid: number } | undefined
  if (userInfo().uid === 0) {
    ids = { uid: Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' })), gid: Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' })) }
    await chown(dir, ids.uid, ids.gid)
  }
  const child = spawn('pgbouncer', [join(dir, 'pgbouncer.ini')], { ...ids, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, PATH: `${process.env.PATH ?? ''}:/usr/sbin` } })
  let output = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { output += chunk })
  const ended = new Promise<void>((resolve) => child.once('close', () => resolve()))
  const failed = new Promise<never>((_resolve, reject) => {
    child.once('error', (error) => reject(new Error(`cannot run pgbouncer (apt-get install pgbouncer): ${error.message}`)))
    child.once('close', () => reject(new Error(`pgbouncer exited:\n${output}`)))
  })
  // Should the test process end without afterAll (a crash), the bouncer must not outlive it.
  const killAtExit = () => { child.kill('SIGKILL') }
  process.once('exit', killAtExit)

  const close = async () => {
    process.off('exit', killAtExit)
    // SIGKILL: nothing of a test bouncer is worth a shutdown, and SIGTERM waits for the clients to
    // leave since PgBouncer 1.23 (it was an immediate shutdown before).
    if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL')
      await ended
    }
    await rm(dir, { recursive: true, force: true })
  }

  try {
    await Promise.race([listening(port), failed])
  } catch (error) {
    await close()
    throw error
  }
  const through = new URL(url)
  through.hostname = '127.0.0.1'
  through.port = String(port)
  return { url: through.toString(), close }
}

/** Resolves once something accepts TCP connections on 127.0.0.1:`port`. */
async function listening (port: number) {
  const deadline = Date.now() + 10000
  for (;;) {
    const socket = net.connect(port, '127.0.0.1')
    const connected = await new Promise<boolean>((resolve) => {
      socket.once('connect', () => resolve(true))
      socket.once('error', () => resolve(false))
    })
    socket.destroy()
    if (connected) return
    if (Date.now() > deadline) throw new Error(`pgbouncer does not listen on port ${port} after 10 s`)
    await sleep(20)
  }
}
