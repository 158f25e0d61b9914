import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'
import type pg from 'pg'
import { afterAll, afterEach, expect, it, vi } from 'vitest'
import { bearer, KEYS, makeData } from '../../helper.js'
import { databaseWith, sharedPostgres } from '../../postgres.js'
import { PATIENCE_MS } from '../../patience.js'

// A replica's reads are timed by the database's progress, not by the replica's (issue 38, part 4). A
// replica held to a share of a CPU reads a whole table slower than PostgreSQL sends it, and PostgreSQL
// waits on it. Here the share is none: the replica is stopped for longer than a read may stay silent
// (DATABASE_READ_STALL_MS), while PostgreSQL is sending it the keys. It still starts, only later. (At
// gateway scale and 20 % of a CPU, `npm run bench` gives the time a real start takes.)

// Short, so that the test takes seconds, not the default's minute; not shorter, since on a machine whose
// cores are busy PostgreSQL itself may send nothing for 2 s once the replica resumes (seen beside two
// busy loops: "no answer from PostgreSQL within 2000 ms").
const READ_STALL_MS = 5000
const STOPPED_MS = READ_STALL_MS + 3000

const server = sharedPostgres()
afterAll(() => server.close())

let admin: pg.Client | undefined
let replica: ChildProcess | undefined
// Also after a test that timed out, whose own code never goes on: a stopped process outlives its parent.
afterEach(async () => {
  if (replica !== undefined && replica.exitCode === null && replica.signalCode === null) {
    const exited = once(replica, 'exit')
    replica.kill('SIGCONT')
    replica.kill('SIGKILL')
    await exited
  }
  await admin?.end()
})

/** The replica's COPY of the keys, as PostgreSQL runs it: its state and what it waits on. */
async function copyOfKeys (client: pg.Client) {
  const { rows } = await client.query<{ state: string, wait_event: string | null }>(
    "SELECT state, wait_event FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'COPY (%FROM keys%' AND pid <> pg_backend_pid()")
  return rows[0]
}

it(`starts after getting no CPU for ${STOPPED_MS / 1000} s while PostgreSQL sends it the keys`, async () => {
  let url: string
  ({ url, client: admin } = await databaseWith(server, makeData()))
  // More keys than the sockets' buffers hold: PostgreSQL has to wait for the replica to read.
  await admin.query(`INSERT INTO keys (name, sha256, kind, organization_id)
    SELECT 'bulk-' || i, encode(sha256(i::text::bytea), 'hex'), 'standard', 'org_alpha' FROM generate_series(1, 300000) AS i`)
  const child = spawn(process.execPath, ['dist/server.js'], { env: { PATH: process.env.PATH ?? '', PORT: '0', DATABASE_URL: url, DATABASE_READ_STALL_MS: String(READ_STALL_MS) }, stdio: ['ignore', 'pipe', 'pipe'] })
  replica = child
  let output = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { output += chunk })
  const exited = once(child, 'exit')
  try {
    await expect.poll(() => copyOfKeys(admin!), { interval: 2, timeout: PATIENCE_MS }).toMatchObject({ state: 'active' })
    child.kill('SIGSTOP')
    // PostgreSQL is blocked writing to the stopped replica: what a CPU share too small does for longer.
    await expect.poll(() => copyOfKeys(admin!), { timeout: PATIENCE_MS }).toEqual({ state: 'active', wait_event: 'ClientWrite' })
    await sleep(STOPPED_MS)
    expect(await copyOfKeys(admin)).toEqual({ state: 'active', wait_event: 'ClientWrite' })
    child.kill('SIGCONT')

    // Before: "cannot start: canceling statement due to statement timeout" (a 60 s statement_timeout, on
    // 1517af5, when the replica was stopped for 65 s), then "cannot start: no answer from PostgreSQL within
    // 30000 ms" (the socket's timer fired as the process resumed, before it read what had come meanwhile).
    const address = await vi.waitFor(() => {
      const listening = /Server listening at (http:\/\/[^"\s]+)/.exec(output)?.[1]
      if (listening === undefined) throw new Error(`the replica has not started; it said:\n${output}`)
      return listening
    }, { timeout: PATIENCE_MS, interval: 50 })
    const res = await fetch(`${address}/v1/providers`, { headers: bearer(KEYS.alphaStandard) })
    expect(res.status, output).toBe(200)
    expect(output).not.toContain('timeout')
  } finally {
    child.kill('SIGTERM')
    await exited
  }
})
