import { execFile, execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { existsSync, readdirSync } from 'node:fs'
import { chown, mkdtemp, readFile, rm } from 'node:fs/promises'
import net from 'node:net'
import { tmpdir, userInfo } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { promisify } from 'node:util'
import pg from 'pg'
import { afterAll, afterEach, beforeEach, inject } from 'vitest'
import type { TObject, TSchema } from '@sinclair/typebox'
import { freePort } from './process.js'
import type { Lifecycle } from '../src/repositories/lifecycle.js'
import type { DirectoryData } from '../src/repositories/records.js'
import { migrate } from '../src/repositories/sources/postgres-schema.js'
import { replaceDirectory } from '../src/repositories/sources/postgres-write.js'
import { PATIENCE_MS } from './patience.js'

const run = promisify(execFile)

/** Databases of a test file on a real PostgreSQL server, its own or the one the run shares. */
export interface Databases {
  /** The server's port on 127.0.0.1. */
  readonly port: number
  /** A new, empty database on the server, named `name` or the next of this file; its URL (no password: the cluster trusts local connections). */
  createDatabase(name?: string): Promise<string>
  /** A new database at this build's schema, copied from a template migrated once per cluster (CREATE DATABASE … TEMPLATE); its URL. */
  createMigratedDatabase(): Promise<string>
  /** Drops this file's databases, or stops its own server and removes its folder. */
  close(): Promise<void>
}

/** A real PostgreSQL server of the tests' own: a cluster in a temporary folder, on a free port. */
export interface PostgresServer extends Databases {
  /** Its folder: the cluster in `data`, the server's log in `log`, its socket. */
  readonly dir: string
  /** Makes the template of createMigratedDatabase now rather than on first use. */
  prepareTemplate(): Promise<void>
  /** A hot standby of this server (a physical streaming replica), running, with these settings; close it before this server. */
  startStandby(settings?: Record<string, string>): Promise<Standby>
  /** Stops the server (fast shutdown: connections are cut), keeping its data. */
  stop(): Promise<void>
  /** Starts it again on the same port and data. */
  start(): Promise<void>
}

/** A hot standby of a server of the tests': read-only, it replays what its primary writes. */
export interface Standby {
  /** Its port on 127.0.0.1. */
  readonly port: number
  /** The URL of the database `database` on the standby (its databases are its primary's). */
  url(database: string): string
  /** Resolves once the standby has replayed everything its primary had committed when this was called. */
  caughtUp(timeoutMs?: number): Promise<void>
  /** Stops the standby (fast shutdown), keeping its data. */
  stop(): Promise<void>
  /** Starts it again on the same port and data; it streams again from its primary. */
  start(): Promise<void>
  /** Promotes it to a primary of a new timeline (a failover), once it has replayed what it has. */
  promote(): Promise<void>
  /** Stops it and removes its folder. */
  close(): Promise<void>
}

/** The path of a PostgreSQL program of the server's version (pg_dump, pg_restore). */
export const serverProgram = (name: string) => join(findBinaries(), name)

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

/** Runs one of the server's programs, as the postgres user when root. */
function exec (bin: string, program: string, args: string[]) {
  return asRoot
    ? run('runuser', ['-u', 'postgres', '--', join(bin, program), ...args])
    : run(join(bin, program), args)
}

/** A new temporary folder, the postgres user's when root: the server writes into it. */
async function serverFolder (prefix: string) {
  const dir = await mkdtemp(join(tmpdir(), prefix))
  if (asRoot) {
    const { stdout } = await run('id', ['-u', 'postgres'])
    const { stdout: gid } = await run('id', ['-g', 'postgres'])
    await chown(dir, Number(stdout), Number(gid))
  }
  return dir
}

/**
 * Starts and stops the cluster in `dir`/data, on `port`, its socket in `dir`, a primary's or a
 * standby's alike: `open` makes it (`create`) and starts it, `close` stops it and removes `dir`.
 */
function control (bin: string, dir: string, port: number, settings: Record<string, string> = {}) {
  const data = join(dir, 'data')
  let running = false
  const start = async () => {
    // Durability is of no use to a test cluster, and costs time at every commit.
    const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200${Object.entries(settings).map(([name, value]) => ` -c ${name}=${value}`).join('')}`
    // -w waits until it accepts connections: a standby's, once it has replayed up to a consistent state.
    try {
      await exec(bin, 'pg_ctl', ['-D', data, '-o', options, '-l', join(dir, 'log'), '-w', '-t', '60', 'start'])
    } catch (error) {
      // pg_ctl says "Examine the log output": the log goes with the folder, so it is told here.
      const log = await readFile(join(dir, 'log'), 'utf8').catch(() => '')
      throw new Error(`${(error as Error).message}\n${log}`)
    }
    running = true
  }
  const stop = async () => {
    if (!running) return
    running = false
    await exec(bin, 'pg_ctl', ['-D', data, '-m', 'fast', '-w', 'stop'])
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
  /** Starts the cluster, then stops it at the process' exit; on failure, nothing is left behind. */
  const open = async (create: () => Promise<unknown>) => {
    try {
      await create()
      await start()
    } catch (error) {
      stopAtExit()
      await rm(dir, { recursive: true, force: true })
      throw error
    }
    process.once('exit', stopAtExit)
  }
  const close = async () => {
    process.off('exit', stopAtExit)
    try {
      await stop()
    } finally {
      stopAtExit()
      await rm(dir, { recursive: true, force: true })
    }
  }
  return { data, open, start, stop, close }
}

/** Runs `use` on a connection of its own to `url`, closed after. */
async function withClient<T> (url: string, use: (client: pg.Client) => Promise<T>) {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return await use(client)
  } finally {
    await client.end()
  }
}

/**
 * A cluster that `create` makes in a new folder, started on a free port. The port is free when chosen,
 * but another process (a second test run on the machine) may bind it before PostgreSQL does: then the
 * cluster is made again on another.
 */
async function openOnFreePort (bin: string, prefix: string, create: (data: string) => Promise<unknown>, settings?: Record<string, string>) {
  for (let attempt = 1; ; attempt++) {
    const dir = await serverFolder(prefix)
    const port = await freePort()
    const cluster = control(bin, dir, port, settings)
    try {
      await cluster.open(() => create(cluster.data))
      return { dir, port, cluster }
    } catch (error) {
      if (attempt === 3 || !(error as Error).message.includes('Address already in use')) throw error
    }
  }
}

/** The database every migrated database of a cluster is copied from: nobody connects to it once made. */
const TEMPLATE = 'directory_template'

/**
 * Databases on the cluster on `port`: `prefix` keeps the names of test files that share a cluster
 * apart. Migrating takes longer than copying a database that holds the schema (CREATE DATABASE …
 * TEMPLATE), so the schema is migrated once, into TEMPLATE, on first use.
 */
function databasesOn (port: number, prefix: string) {
  const url = (database: string) => `postgresql://postgres@127.0.0.1:${port}/${database}`
  let databases = 0
  let template: Promise<unknown> | undefined
  const create = async (name: string, from?: string) => {
    await withClient(url('postgres'), (client) => client.query(`CREATE DATABASE ${name}${from === undefined ? '' : ` TEMPLATE ${from}`}`))
    return url(name)
  }
  const prepareTemplate = async () => {
    template ??= (async () => {
      const exists = await withClient(url('postgres'), (client) => client.query('SELECT 1 FROM pg_database WHERE datname = $1', [TEMPLATE]))
      if (exists.rowCount === 0) await withClient(await create(TEMPLATE), (client) => migrate(client))
    })()
    await template
  }
  return {
    prepareTemplate,
    createDatabase: (name = `${prefix}${++databases}`) => create(name),
    async createMigratedDatabase () {
      await prepareTemplate()
      return create(`${prefix}${++databases}`, TEMPLATE)
    },
    /** Drops every database this file made. */
    async dropAll () {
      await withClient(url('postgres'), async (client) => {
        const { rows } = await client.query<{ datname: string }>("SELECT datname FROM pg_database WHERE starts_with(datname, $1)", [prefix])
        for (const { datname } of rows) await client.query(`DROP DATABASE ${datname} WITH (FORCE)`)
      })
    }
  }
}

declare module 'vitest' {
  export interface ProvidedContext {
    /** The port of the PostgreSQL server the run's test files share (test/shared-postgres.ts). */
    sharedPostgresPort: number
  }
}

/**
 * Databases on the PostgreSQL server every test file of the run shares, started once by
 * test/shared-postgres.ts: a file makes databases of its own there, and drops them at `close`. A
 * file that stops the server, starts a standby of it, cuts every session or holds a transaction
 * open does that to every file: it starts a server of its own (startPostgres).
 */
export function sharedPostgres (): Databases {
  const port = inject('sharedPostgresPort')
  if (port === undefined) throw new Error('no shared PostgreSQL server: this file runs in the vitest project "programs" (vitest.config.ts), whose globalSetup starts it')
  // Names apart from those of the files that run at the same time, in this worker or another.
  const { createDatabase, createMigratedDatabase, dropAll } = databasesOn(port, `f${randomBytes(4).toString('hex')}_`)
  return { port, createDatabase, createMigratedDatabase, close: dropAll }
}

export async function startPostgres (): Promise<PostgresServer> {
  const bin = findBinaries()
  // --auth=trust trusts replication connections from 127.0.0.1 too (pg_hba's `host replication all
  // 127.0.0.1/32 trust`), and the defaults let a standby stream: wal_level=replica, max_wal_senders=10.
  const { dir, port, cluster } = await openOnFreePort(bin, 'pg-', (data) =>
    exec(bin, 'initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--locale=C', '--no-sync']))
  const { createDatabase, createMigratedDatabase, prepareTemplate } = databasesOn(port, 'test_')

  return {
    port,
    dir,
    createDatabase,
    createMigratedDatabase,
    prepareTemplate,
    startStandby: (settings) => startStandby(bin, port, settings),
    stop: cluster.stop,
    start: cluster.start,
    close: cluster.close
  }
}

/** A hot standby of the server on `primaryPort`, from a base backup of it, on a port of its own. */
async function startStandby (bin: string, primaryPort: number, settings: Record<string, string> = {}): Promise<Standby> {
  // -R writes standby.signal and primary_conninfo (the address given here), -X stream copies the WAL
  // written during the backup alongside it, -c fast checkpoints at once rather than at the next one.
  const { port, cluster } = await openOnFreePort(bin, 'pg-standby-', (data) =>
    exec(bin, 'pg_basebackup', ['-D', data, '-h', '127.0.0.1', '-p', String(primaryPort), '-U', 'postgres', '-R', '-X', 'stream', '-c', 'fast', '--no-sync']), settings)
  const url = (database: string) => `postgresql://postgres@127.0.0.1:${port}/${database}`
  const primary = `postgresql://postgres@127.0.0.1:${primaryPort}/postgres`

  return {
    port,
    url,
    async caughtUp (timeoutMs = PATIENCE_MS) {
      // The primary commits asynchronously (synchronous_commit=off): its last commits may lie in WAL
      // not yet written, so neither sent nor counted by pg_current_wal_lsn(). A transaction of our own
      // that writes WAL (a message for logical decoding, which no one reads here), committed
      // synchronously, flushes all WAL before it: the standby must replay that far. (txid_current()
      // alone would not do: a transaction that wrote no WAL but its commit record commits asynchronously.)
      const lsn = await withClient(primary, async (client) => {
        await client.query('SET synchronous_commit = on')
        await client.query("SELECT pg_logical_emit_message(true, 'caught-up', '')")
        return (await client.query<{ lsn: string }>('SELECT pg_current_wal_flush_lsn()::text AS lsn')).rows[0]!.lsn
      })
      await withClient(url('postgres'), async (client) => {
        const deadline = Date.now() + timeoutMs
        for (;;) {
          const { rows } = await client.query<{ replayed: boolean }>('SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn AS replayed', [lsn])
          if (rows[0]!.replayed) return
          if (Date.now() > deadline) throw new Error(`the standby did not replay up to ${lsn} within ${timeoutMs} ms`)
          await sleep(20)
        }
      })
    },
    stop: cluster.stop,
    start: cluster.start,
    promote: async () => { await exec(bin, 'pg_ctl', ['-D', cluster.data, '-w', '-t', '60', 'promote']) },
    close: cluster.close
  }
}

/**
 * A TCP proxy to the server at `url` that holds every chunk `delayMs` in each direction, as a
 * database far away does: what a replica does between its queries is spread out in time.
 * `freeze()` makes the connections open at that moment silent forever, both ways, without closing
 * them, as a NAT or load balancer does when it drops a flow; connections made after it pass.
 */
export async function latencyProxy (url: string, delayMs: number) {
  let target = new URL(url)
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
    /** Sends new connections to the server at `next` and cuts those open, as a virtual IP moved to another server does. */
    retarget (next: string) {
      target = new URL(next)
      for (const socket of sockets) socket.destroy()
      sockets.clear()
    },
    async close () {
      for (const socket of sockets) socket.destroy()
      await new Promise((resolve) => proxy.close(resolve))
    }
  }
}

/** A new database on `server`, migrated and holding `data` when given, and a client connected to it, which the caller ends. */
export async function databaseWith (server: Databases, data?: DirectoryData): Promise<{ url: string, client: pg.Client }> {
  const url = await server.createMigratedDatabase()
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    if (data !== undefined) await replaceDirectory(client, data)
  } catch (error) {
    await client.end()
    throw error
  }
  return { url, client }
}

/**
 * The shared server for a file, and for each of its tests a new database on it (databaseWith), which
 * `use` is handed; the lifecycles a test pushes onto `lifecycles` are closed after it, then the client.
 */
export function databasePerTest (use: (database: { url: string, client: pg.Client }) => void, data?: () => DirectoryData) {
  const server = sharedPostgres()
  afterAll(() => server.close())
  const lifecycles: Lifecycle[] = []
  let client: pg.Client | undefined
  beforeEach(async () => {
    const database = await databaseWith(server, data?.())
    client = database.client
    use(database)
  })
  afterEach(async () => {
    await Promise.all(lifecycles.splice(0).map((lifecycle) => lifecycle.close()))
    await client?.end()
  })
  return { server, lifecycles }
}

/** Drops every CHECK of the keys table: what an operator who wants to write an invalid key row runs first. */
export const DROP_KEY_CHECKS = `DO $$ DECLARE c record; BEGIN
  FOR c IN SELECT conname FROM pg_constraint WHERE conrelid = 'keys'::regclass AND contype = 'c' LOOP
    EXECUTE format('ALTER TABLE keys DROP CONSTRAINT %I', c.conname);
  END LOOP; END $$`

/** A pattern of so many characters of one class (`^[0-9a-f]{64}$`): a hash, a hex id. */
const FIXED_CLASS = /^\^\[([0-9A-Za-z-]+)\]\{(\d+)\}\$$/

/**
 * A CHECK on a column, made from its field's schema where the database checks it cheaply and as the
 * schema does: one of its literals, or a pattern of FIXED_CLASS, checked as a length and a class no
 * character is outside of. PostgreSQL's regular expressions run a counted repetition slowly:
 * `sha256 ~ '^[0-9a-f]{64}$'` took 8.9 s to check a million keys, and inserting them 24 s, where this
 * form takes 0.7 s and 3.9 to 5.5 s (2 to 2.7 s without any check; measured by hand on this project's
 * 2-core machine, 2026-11-28). Migration 7 holds the checks it made of the key's schema then
 * (KEY_CHECKS); a change of the schema's literals or pattern needs a migration of its own that
 * replaces the check.
 */
export function checkOf (table: string, schema: TSchema, column: string) {
  const field = (schema as TObject).properties[column]!
  const branches = (field.anyOf ?? []) as TSchema[]
  const fixed = typeof field.pattern === 'string' ? FIXED_CLASS.exec(field.pattern) : null
  const sqlString = (value: string) => `'${value.replaceAll("'", "''")}'`
  let check: string
  if (branches.length > 0 && branches.every((branch) => typeof branch.const === 'string')) {
    check = `${column} IN (${branches.map((branch) => sqlString(branch.const as string)).join(', ')})`
  } else if (field.type === 'string' && fixed !== null) {
    check = `char_length(${column}) = ${fixed[2]} AND ${column} !~ '[^${fixed[1]}]'`
  } else {
    throw new Error(`${table}.${column}: its schema has no check the database can make as it does`)
  }
  return { table, name: `${table}_${column}_check`, check }
}
