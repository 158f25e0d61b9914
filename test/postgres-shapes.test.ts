import pg from 'pg'
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest'
import { startPgBouncer, type PgBouncer } from './pgbouncer.js'
import { startPostgres, type PostgresServer, type Standby } from './postgres.js'
import { PATIENCE_MS } from './patience.js'

// The shapes a fleet runs PostgreSQL in, on real components: the helpers that make them work.

let server: PostgresServer
beforeAll(async () => { server = await startPostgres() })
afterAll(() => server?.close())

/** A client connected to `url`, ended after the test (before a server it is connected to restarts). */
const clients: pg.Client[] = []
async function connect (url: string) {
  const client = new pg.Client({ connectionString: url })
  clients.push(client)
  await client.connect()
  return client
}
afterEach(() => Promise.all(clients.splice(0).map((client) => client.end().catch(() => {}))))

describe('a hot standby', () => {
  let standby: Standby
  let url: string
  beforeAll(async () => {
    url = await server.createDatabase()
    standby = await server.startStandby()
  })
  afterAll(() => standby?.close())

  it('is in recovery, and has the databases created on its primary after it started', async () => {
    // The database was created before the standby; this one after it.
    const later = new URL(await server.createDatabase()).pathname.slice(1)
    await standby.caughtUp()
    const client = await connect(standby.url(later))
    expect((await client.query('SELECT pg_is_in_recovery() AS recovery')).rows).toStrictEqual([{ recovery: true }])
  })

  it('reads a row written on its primary once caught up, and refuses a write', async () => {
    const primary = await connect(url)
    await primary.query('CREATE TABLE notes (id int PRIMARY KEY, text text)')
    await primary.query("INSERT INTO notes VALUES (1, 'written on the primary')")
    await standby.caughtUp()
    const client = await connect(standby.url(new URL(url).pathname.slice(1)))
    expect((await client.query('SELECT * FROM notes')).rows).toStrictEqual([{ id: 1, text: 'written on the primary' }])
    await expect(client.query("INSERT INTO notes VALUES (2, 'written on the standby')")).rejects.toThrow('cannot execute INSERT in a read-only transaction')
  })

  it('follows its primary again after a restart', async () => {
    await standby.stop()
    const primary = await connect(url)
    await primary.query("INSERT INTO notes VALUES (3, 'written while the standby was down')")
    await standby.start()
    await standby.caughtUp()
    const client = await connect(standby.url(new URL(url).pathname.slice(1)))
    expect((await client.query('SELECT text FROM notes WHERE id = 3')).rows).toStrictEqual([{ text: 'written while the standby was down' }])
  })
})

describe('PgBouncer in transaction mode, with its defaults', () => {
  let bouncer: PgBouncer
  let url: string
  beforeAll(async () => {
    url = await server.createDatabase()
    bouncer = await startPgBouncer(url)
  })
  afterAll(() => bouncer?.close())

  it('answers a query, as the server would', async () => {
    expect(bouncer.url).not.toBe(url)
    const client = await connect(bouncer.url)
    expect((await client.query('SELECT current_database() AS name')).rows).toStrictEqual([{ name: new URL(url).pathname.slice(1) }])
  })

  it('refuses a startup parameter it does not track (no ignore_startup_parameters)', async () => {
    const client = new pg.Client({ connectionString: bouncer.url, statement_timeout: 1000 })
    await expect(client.connect()).rejects.toThrow('unsupported startup parameter: statement_timeout')
  })

  it('does not deliver a NOTIFY to the session that LISTENs (pgbouncer issue #655)', async () => {
    const listener = await connect(bouncer.url)
    const heard: string[] = []
    listener.on('notification', (message) => heard.push(message.payload ?? ''))
    await listener.query('LISTEN shapes')
    // The LISTEN was a transaction of its own: its server connection went back to the pool, still
    // listening, and the next client is given it (the pool is LIFO). The notice is delivered there,
    // to whichever client holds that connection then: here, the one that sent it. (Had no client held
    // it, PgBouncer would have dropped the notice: "got packet 'A' from server when not linked".)
    const notifier = await connect(bouncer.url)
    const misdelivered: string[] = []
    notifier.on('notification', (message) => misdelivered.push(message.payload ?? ''))
    await notifier.query("NOTIFY shapes, 'hello'")
    // Delivered once, to the one client: once the notifier has it, the listener never will.
    await vi.waitFor(() => expect(misdelivered).toStrictEqual(['hello']), { timeout: PATIENCE_MS })
    expect(heard).toStrictEqual([])
  })

  it('in session mode, does deliver it', async () => {
    const session = await startPgBouncer(url, { poolMode: 'session' })
    const listener = new pg.Client({ connectionString: session.url })
    const notifier = new pg.Client({ connectionString: session.url })
    try {
      await listener.connect()
      const heard = new Promise((resolve) => listener.on('notification', (message) => resolve(message.payload)))
      await listener.query('LISTEN shapes')
      await notifier.connect()
      await notifier.query("NOTIFY shapes, 'hello'")
      expect(await heard).toBe('hello')
    } finally {
      // Before the bouncer goes: a client cut by it would throw its error unheard.
      await Promise.all([listener.end().catch(() => {}), notifier.end().catch(() => {})])
      await session.close()
    }
  })
})
