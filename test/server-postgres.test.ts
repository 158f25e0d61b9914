import { execFile, spawn } from 'node:child_process'
import { once } from 'node:events'
import { createServer } from 'node:net'
import { promisify } from 'node:util'
import pg from 'pg'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { migrate } from '../src/repositories/sources/postgres-schema.js'
import { replaceDirectory } from '../src/repositories/sources/postgres-write.js'
import { KEYS, makeData, sha256 } from './helper.js'
import { startPostgres, type PostgresServer } from './postgres.js'
import { failToStart, freePort, startServer, type RunningServer } from './process.js'
import { generation, storm } from './storm.js'
import { PATIENCE_MS } from './patience.js'

const run = promisify(execFile)

let database: PostgresServer
let url: string
// The password is ignored by the test cluster (it trusts local connections), and must never be logged.
const withPassword = (plain: string) => plain.replace('postgres@', 'postgres:s3cret-pw@')

beforeAll(async () => {
  database = await startPostgres()
  url = await database.createDatabase()
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  await migrate(client)
  await replaceDirectory(client, makeData())
  await client.end()
})
afterAll(() => database?.close())

async function sql (text: string) {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    await client.query(text)
  } finally {
    await client.end()
  }
}

const servers: RunningServer[] = []
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.process.kill('SIGTERM')
    await server.exited
  }
})

async function startReplicas (count: number) {
  const started = await Promise.all(Array.from({ length: count }, () => startServer({ DATABASE_URL: withPassword(url), LOG_LEVEL: 'info' })))
  servers.push(...started)
  return started
}

type LogLine = Record<string, unknown>

/**
 * Resolves with the first log line after the `seen`-th one that `match` accepts; answers how many lines
 * it read. Not within PATIENCE_MS, or the server gone: an error that names `what` and shows the lines.
 */
function waitForLog (server: RunningServer, seen: number, match: (line: LogLine) => boolean, what = 'a log line'): Promise<{ line: LogLine, seen: number }> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      server.process.stdout!.off('data', look)
      reject(new Error(`no ${what} within ${PATIENCE_MS} ms; the server said, from line ${seen + 1}:\n${server.output().split('\n').filter((text) => text.startsWith('{')).slice(seen).join('\n')}`))
    }, PATIENCE_MS)
    const look = () => {
      const lines = server.output().split('\n').filter((text) => text.startsWith('{'))
      for (let index = seen; index < lines.length; index++) {
        const line = JSON.parse(lines[index]!) as LogLine
        if (match(line)) {
          clearTimeout(timer)
          server.process.stdout!.off('data', look)
          resolve({ line, seen: index + 1 })
          return
        }
      }
    }
    server.process.stdout!.on('data', look)
    server.exited.then((code) => { clearTimeout(timer); reject(new Error(`server exited (${code}) while waiting for ${what}:\n${server.output()}`)) })
    look()
  })
}

const logLines = (server: RunningServer) => server.output().split('\n').filter((text) => text.startsWith('{')).length
const installedWith = (change: string) => (line: LogLine) => line.msg === 'change installed' && String(line.change).includes(change)

async function status (server: RunningServer, path: string, key: string) {
  const res = await fetch(`${server.url}${path}`, { headers: { authorization: `Bearer ${key}` } })
  await res.arrayBuffer()
  return res.status
}

describe('replicas on one PostgreSQL database', () => {
  it('take a key minted and then revoked with npm run key on every replica, without a restart', async () => {
    const replicas = await startReplicas(3)
    const env = { PATH: process.env.PATH ?? '', DATABASE_URL: withPassword(url) }
    const marks = replicas.map(logLines)

    const { stdout, stderr } = await run(process.execPath, ['dist/cli/mint-key.js', '--kind', 'management', '--org', 'org_beta', '--name', 'replicated'], { env })
    const key = stdout.trim()
    expect(stderr).toContain('recorded management key "replicated" for org_beta in table keys of postgresql://postgres@127.0.0.1')
    for (const [index, replica] of replicas.entries()) {
      marks[index] = (await waitForLog(replica, marks[index]!, installedWith('keys: '))).seen
      expect(await status(replica, '/v1/organization/members', key)).toBe(200)
    }

    await run(process.execPath, ['dist/cli/mint-key.js', 'revoke', '--name', 'replicated'], { env })
    for (const [index, replica] of replicas.entries()) {
      await waitForLog(replica, marks[index]!, installedWith('keys: '))
      expect(await status(replica, '/v1/organization/members', key)).toBe(401)
      expect(await status(replica, '/v1/organization/members', KEYS.betaManagement)).toBe(200)
    }

    for (const replica of replicas) {
      const output = replica.output()
      expect(output).toContain('"location":"postgresql://postgres@127.0.0.1')
      expect(output).toContain(`"msg":"using PostgreSQL at ${url}; rate limits in memory (6000 a minute a key, 600 a minute an address);`)
      for (const secret of [key, sha256(key), 's3cret-pw']) expect(output).not.toContain(secret)
    }
  })

  it('refuses to revoke a key that does not exist', async () => {
    await expect(run(process.execPath, ['dist/cli/mint-key.js', 'revoke', '--name', 'nobody'], { env: { PATH: process.env.PATH ?? '', DATABASE_URL: url } }))
      .rejects.toMatchObject({ code: 1, stderr: expect.stringMatching(/^no key named "nobody" in table keys of postgresql:\/\/[^\n]+\n$/) })
  })

  it('keep serving their last data while the database is down, then resynchronize and follow changes again', async () => {
    const replicas = await startReplicas(2)
    let marks = replicas.map(logLines)
    await database.stop()
    try {
      // Lost on the listening connection, or on a read of the log where a replica polls (its probe's
      // notification did not come back in time on a busy machine): either is the database gone.
      marks = await Promise.all(replicas.map(async (replica, index) => (await waitForLog(replica, marks[index]!, (line) =>
        line.msg === 'cannot follow changes; the data read last keeps serving' && /(lost the connection to|cannot read the change log of) PostgreSQL/.test(String(line.problem)),
      'line saying the replica cannot follow changes')).seen))
      for (const replica of replicas) {
        expect(await status(replica, '/v1/providers', KEYS.alphaStandard)).toBe(200)
        expect(await status(replica, '/v1/organization/members?limit=100', KEYS.alphaManagement)).toBe(200)
      }
    } finally {
      await database.start()
    }
    const resyncs = await Promise.all(replicas.map((replica, index) => waitForLog(replica, marks[index]!, (line) => line.msg === 'following changes again; reading what changed meanwhile', 'line saying the replica follows changes again')))
    for (const { line } of resyncs) expect(line.unfollowed_ms).toBeGreaterThan(0)

    await sql("DELETE FROM keys WHERE name = 'alpha-standard'")
    for (const [index, replica] of replicas.entries()) {
      await waitForLog(replica, resyncs[index]!.seen, installedWith('keys: "alpha-standard"'), 'install of the revocation')
      expect(await status(replica, '/v1/providers', KEYS.alphaStandard)).toBe(401)
    }
  })

  it('with MAX_STALENESS_MS, refuse keyed requests (503) once the database has been unreachable past the bound, and answer again once it is back', async () => {
    const replica = await startServer({ DATABASE_URL: url, MAX_STALENESS_MS: '3000', LOG_LEVEL: 'info' })
    servers.push(replica)
    await expect.poll(() => replica.output(), { timeout: PATIENCE_MS }).toContain('staleness 3000 ms, then keyed requests answer 503')
    // A key no other test of this file revokes.
    const key = KEYS.betaManagement
    expect(await status(replica, '/v1/providers', key)).toBe(200)
    await database.stop()
    const stopped = performance.now()
    try {
      await expect.poll(() => status(replica, '/v1/providers', key), { timeout: PATIENCE_MS, interval: 50 }).toBe(503)
      // The bound, plus at most the second between two reads that confirm the data (a third of the bound).
      expect(performance.now() - stopped).toBeLessThan(3000 + 1000 + 500)
      const res = await fetch(`${replica.url}/v1/providers`, { headers: { authorization: `Bearer ${key}` } })
      expect(res.headers.get('retry-after')).toBe('5')
      expect(await res.json()).toEqual({ error: { code: 503, message: 'The data served cannot be confirmed current; try again later' } })
      expect((await fetch(`${replica.url}/ready`)).status).toBe(503)
      expect((await fetch(`${replica.url}/health`)).status).toBe(200)
      expect((await fetch(`${replica.url}/metrics`)).status).toBe(200)
    } finally {
      await database.start()
    }
    await expect.poll(() => status(replica, '/v1/providers', key), { timeout: PATIENCE_MS, interval: 100 }).toBe(200)
    expect((await fetch(`${replica.url}/ready`)).status).toBe(200)
  })

  it('answer every request of a reload storm, each from exactly one snapshot', async () => {
    // A database of its own: the storm replaces everything in it ten times a second.
    const stormUrl = await database.createDatabase()
    const client = new pg.Client({ connectionString: stormUrl })
    await client.connect()
    try {
      await migrate(client)
      await replaceDirectory(client, generation(0))
      // Thousands of requests a second with one key: no rate limit here.
      const replica = await startServer({ DATABASE_URL: stormUrl, RATE_LIMIT_PER_MINUTE: '0' })
      servers.push(replica)
      // Every change replaces the whole directory in one transaction: each kind's trigger fires.
      const { failures, answers, seen } = await storm(replica.url, (n) => replaceDirectory(client, generation(n)), { changes: 50, intervalMs: 100 })
      expect(failures.slice(0, 5)).toEqual([])
      expect(answers).toBeGreaterThan(1000)
      expect(seen.size).toBeGreaterThan(5)
    } finally {
      await client.end()
    }
  })

  it('waits at start for a database that comes up within DATABASE_CONNECT_TIMEOUT_MS', async () => {
    await database.stop()
    // Until the server has tried once, something on the database's port hangs up on it.
    const port = Number(new URL(url).port)
    let tried: () => void
    const triedOnce = new Promise<void>((resolve) => { tried = resolve })
    const hangUp = createServer((socket) => { socket.destroy(); tried() }).listen(port, '127.0.0.1')
    const starting = startServer({ DATABASE_URL: url, DATABASE_CONNECT_TIMEOUT_MS: '60000' })
    await triedOnce
    hangUp.close()
    await once(hangUp, 'close')
    await database.start()
    const server = await starting
    servers.push(server)
    expect(await status(server, '/v1/providers', KEYS.alphaManagement)).toBe(200)
  })

  it('exits 1 with one line when the database stays unreachable for DATABASE_CONNECT_TIMEOUT_MS', async () => {
    const port = await freePort()
    const { code, output } = await failToStart({ DATABASE_URL: `postgresql://directory:s3cret-pw@127.0.0.1:${port}/directory`, DATABASE_CONNECT_TIMEOUT_MS: '300' })
    expect(code).toBe(1)
    // The tries before it have a line each (the next test).
    const finalLine = /[^\n]*\n$/.exec(output)?.[0]
    expect(finalLine).toMatch(new RegExp(`^cannot start: cannot connect to PostgreSQL at postgresql://directory@127\\.0\\.0\\.1:${port}/directory within 300 ms: [^\\n]+\\n$`))
  })

  it('says each try as it retries a database that does not answer, with its URL without the password', async () => {
    const port = await freePort()
    const child = spawn(process.execPath, ['dist/server.js'], {
      env: { PATH: process.env.PATH ?? '', PORT: '0', DATABASE_URL: `postgresql://directory:s3cret-pw@127.0.0.1:${port}/directory`, DATABASE_CONNECT_TIMEOUT_MS: '3000' }
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk) => { stdout += chunk })
    child.stderr.on('data', (chunk) => { stderr += chunk })
    const exited = once(child, 'exit')
    // Told while it waits, not after.
    await expect.poll(() => stderr, { timeout: PATIENCE_MS, interval: 10 }).toContain('(try 1: ')
    expect(child.exitCode).toBe(null)

    const [code] = await exited
    expect(code).toBe(1)
    expect(stdout).toBe('')
    const lines = stderr.trimEnd().split('\n')
    const location = `postgresql://directory@127.0.0.1:${port}/directory`
    expect(lines.length).toBeGreaterThanOrEqual(3)
    for (const [index, line] of lines.slice(0, -1).entries()) {
      expect(line.replace(/ [0-9]+ ms, for [0-9]+ ms more/, ' N ms, for M ms more')).toBe(`cannot connect to PostgreSQL at ${location} (try ${index + 1}: connect ECONNREFUSED 127.0.0.1:${port}); trying again in N ms, for M ms more (DATABASE_CONNECT_TIMEOUT_MS)`)
    }
    expect(lines.at(-1)).toBe(`cannot start: cannot connect to PostgreSQL at ${location} within 3000 ms: connect ECONNREFUSED 127.0.0.1:${port}`)
    expect(stderr).not.toContain('s3cret-pw')
  })
})
