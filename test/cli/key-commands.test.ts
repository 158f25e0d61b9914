import { execFile } from 'node:child_process'
import { hash, randomBytes } from 'node:crypto'
import { cp, mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import pg from 'pg'
import { afterAll, afterEach, describe, expect, it } from 'vitest'
import { loadDataFolder } from '../../src/repositories/sources/files.js'
import { replaceDirectory } from '../../src/repositories/sources/postgres-write.js'
import { migrate } from '../../src/repositories/sources/postgres-schema.js'
import type { ApiKey } from '../../src/schemas/keys-and-organizations.js'
import { BUNDLED_MANAGEMENT_KEY, startServer, type RunningServer } from '../process.js'
import { sharedPostgres } from '../postgres.js'
import { PATIENCE_MS } from '../patience.js'

// Each key command against a running replica, on both stores, as an operator runs them: the change is
// seen there within a second (PostgreSQL notifies the replica; a folder is watched).

const run = promisify(execFile)

/** How soon a running replica must show a key command's change. */
const SEEN_WITHIN_MS = 1000

const server = sharedPostgres()
afterAll(() => server.close())

interface Store {
  args: string[]
  env: Record<string, string>
}

let replica: RunningServer | undefined
let dir: string | undefined
let client: pg.Client | undefined
afterEach(async () => {
  replica?.process.kill('SIGTERM')
  await replica?.exited
  replica = undefined
  await client?.end()
  client = undefined
  if (dir !== undefined) await rm(dir, { recursive: true, force: true })
  dir = undefined
})

const stores: Array<[string, () => Promise<Store>]> = [
  ['a folder', async () => {
    dir = await mkdtemp(join(tmpdir(), 'key-commands-'))
    await cp('fixtures', dir, { recursive: true })
    return { args: ['--data-dir', dir], env: { DATA_DIR: dir } }
  }],
  ['PostgreSQL', async () => {
    const url = await server.createMigratedDatabase()
    client = new pg.Client({ connectionString: url, application_name: 'psql' })
    await client.connect()
    await replaceDirectory(client, await loadDataFolder('fixtures'))
    return { args: [], env: { DATABASE_URL: url } }
  }]
]

/** npm run key (the built command) with these arguments, in the store; answers stdout and stderr. */
const key = (store: Store, ...args: string[]) =>
  run(process.execPath, ['dist/cli/mint-key.js', ...args, ...store.args], { env: { PATH: process.env.PATH ?? '', ...store.env }, timeout: PATIENCE_MS })

/** What the running replica answers a key on GET /v1/providers: status, error message, rate-limit header. */
async function ask (secret: string) {
  const response = await fetch(`${replica!.url}/v1/providers`, { headers: { authorization: `Bearer ${secret}` } })
  const body = await response.json() as { error?: { message: string } }
  return { status: response.status, message: body.error?.message, limit: response.headers.get('x-ratelimit-limit') }
}

/**
 * Waits until the replica answers `secret` as `expected` says, from the moment the command returned;
 * fails naming what it answered when that takes longer than SEEN_WITHIN_MS.
 */
async function seen (secret: string, expected: (answer: Awaited<ReturnType<typeof ask>>) => boolean, within = SEEN_WITHIN_MS) {
  const start = Date.now()
  let answer = await ask(secret)
  while (!expected(answer)) {
    if (Date.now() - start > within) throw new Error(`not seen within ${within} ms; the replica answers ${JSON.stringify(answer)}; it said:\n${replica!.output().split('\n').filter((line) => !line.includes('request completed')).slice(-6).join('\n')}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
    answer = await ask(secret)
  }
  return answer
}

describe.each(stores)('npm run key in %s, against a running replica', (_name, open) => {
  it('mints, rotates under one name, expires, disables, enables, limits, revokes and prunes; each seen within a second, each in the history', async () => {
    const store = await open()
    replica = await startServer({ ...store.env, RATE_LIMIT_PER_MINUTE: '6000' })

    // Mint: the key works at once, with its own limit in its headers.
    const minted = (await key(store, '--kind', 'standard', '--org', 'org_2vQmAcme0001', '--name', 'job', '--rate-limit', '1000')).stdout.trim()
    expect(await seen(minted, ({ status }) => status === 200)).toMatchObject({ limit: '1000' })

    // Rotate: the name stays; the new secret works at once, the one before until the grace ends.
    const rotated = await key(store, 'rotate', '--name', 'job', '--grace', '1h')
    expect(rotated.stdout).toMatch(/^sk-or-v1-[0-9a-f]{64}\n$/)
    const secret = rotated.stdout.trim()
    await seen(secret, ({ status }) => status === 200)
    expect((await ask(minted)).status).toBe(200)
    const listed = (await key(store, 'list')).stdout
    expect(listed.split('\n').filter((line) => line.startsWith('job '))).toHaveLength(1)
    expect(listed).toMatch(/\n {2}previous secret of job +\S+Z +grace\n/)
    // Rotating with --grace 0 ends that secret at once.
    const again = (await key(store, 'rotate', '--name', 'job', '--grace', '0')).stdout.trim()
    expect(await seen(secret, ({ status }) => status === 401)).toMatchObject({ message: 'This API key was rotated and its grace period has ended: use its successor' })
    expect((await ask(minted)).message).toBe('Invalid API key')
    await seen(again, ({ status }) => status === 200)

    // Disable and enable.
    await key(store, 'disable', '--name', 'job')
    expect(await seen(again, ({ status }) => status === 401)).toMatchObject({ message: 'This API key is disabled' })
    await key(store, 'enable', '--name', 'job')
    await seen(again, ({ status }) => status === 200)

    // Its own limit, then the setting's again.
    await key(store, 'limit', '--name', 'job', '--per-minute', '500')
    await seen(again, ({ limit }) => limit === '500')
    await key(store, 'limit', '--name', 'job', '--per-minute', 'default')
    await seen(again, ({ limit }) => limit === '6000')

    // Expire: from two seconds on (the instant passes; nothing needs to reach the replica then).
    const { stderr } = await key(store, 'expire', '--name', 'job', '--in', '2s')
    expect(stderr).toMatch(/^key "job" expires at \S+Z \(was never\) in /)
    expect(await seen(again, ({ status }) => status === 401, 2000 + SEEN_WITHIN_MS)).toMatchObject({ message: 'This API key has expired' })

    // Prune: the expired key goes.
    expect((await key(store, 'prune')).stderr).toMatch(/^pruned 1 key and 0 previous secrets that ended before \S+Z in /)
    expect((await key(store, 'list')).stdout).not.toMatch(/^job /m)
    expect(await seen(again, ({ message }) => message === 'Invalid API key')).toMatchObject({ status: 401 })

    // Revoke: another key, gone at once.
    expect(await seen(BUNDLED_MANAGEMENT_KEY, ({ status }) => status === 200)).toBeTruthy()
    await key(store, 'revoke', '--name', 'acme-management')
    expect(await seen(BUNDLED_MANAGEMENT_KEY, ({ status }) => status === 401)).toMatchObject({ message: 'Invalid API key' })

    // Every change, in order, with who made it; never a secret nor its hash.
    const history = (await key(store, 'history')).stdout
    const actions = history.trimEnd().split('\n').slice(1).map((line) => line.split(/ {2,}/).slice(1, 3))
    // After the import of the bundled keys, in PostgreSQL.
    expect(actions.filter(([name, action]) => (name === 'job' || name === 'acme-management') && action !== 'imported')).toEqual([
      ['job', 'minted'], ['job', 'rotated'], ['job', 'rotated'], ['job', 'disabled'], ['job', 'enabled'], ['job', 'limit set'],
      ['job', 'limit set'], ['job', 'expiry set'], ['job', 'pruned'], ['acme-management', 'revoked']
    ])
    expect(history).toMatch(/^\S+Z +job +minted +\S.* +kind standard, organization_id org_2vQmAcme0001, rate_limit_per_minute 1000$/m)
    expect(history).toMatch(/ +job +limit set +.* +rate_limit_per_minute 1000 -> 500$/m)
    for (const shown of [minted, secret, again]) {
      expect(history).not.toContain(shown)
      expect(history).not.toContain(hash('sha256', shown))
    }
    const own = (await key(store, 'history', '--name', 'acme-management')).stdout.trimEnd().split('\n').slice(1)
    expect(own.every((line) => / acme-management +(imported|revoked) /.test(line)) && own.at(-1)!.includes(' revoked ')).toBe(true)
  })

  it('gives a key of --rate-limit 3 a 429 on its fourth request in a minute, while the default is higher', async () => {
    const store = await open()
    replica = await startServer({ ...store.env, RATE_LIMIT_PER_MINUTE: '6000' })
    const secret = (await key(store, '--kind', 'standard', '--org', 'org_2vQmAcme0001', '--name', 'slow', '--rate-limit', '3')).stdout.trim()
    await seen(secret, ({ status }) => status === 200)
    const statuses = [(await ask(secret)).status, (await ask(secret)).status, (await ask(secret)).status]
    // The wait counted one request already: the fourth is the third here.
    expect(statuses).toEqual([200, 200, 429])
    expect((await ask(BUNDLED_MANAGEMENT_KEY)).limit).toBe('6000')
  })
})

describe('the keys\' history in PostgreSQL', () => {
  it('shows a plain UPDATE typed in psql, with its role and client, and an import', async () => {
    const store = await stores[1]![1]()
    await client!.query("UPDATE keys SET kind = 'management' WHERE name = 'acme-standard'")
    await client!.query("UPDATE keys SET expires_at = '2999-01-01T00:00:00Z', rate_limit_per_minute = 5 WHERE name = 'globex-standard'")
    const { stdout } = await key(store, 'history')
    const lines = stdout.trimEnd().split('\n')
    expect(lines.find((line) => / acme-management +imported +postgres \(psql\) +kind management, organization_id org_2vQmAcme0001$/.test(line))).toBeDefined()
    expect(lines.at(-2)).toMatch(/^\S+Z +acme-standard +changed +postgres \(psql\) +kind standard -> management$/)
    expect(lines.at(-1)).toMatch(/^\S+Z +globex-standard +expiry set +postgres \(psql\) +expires_at never -> 2999-01-01T00:00:00Z, rate_limit_per_minute none -> 5$/)
  })

  it('exports a key disabled, limited and rotated as a folder holds it, and imports it back the same', async () => {
    const store = await stores[1]![1]()
    await key(store, '--kind', 'standard', '--org', 'org_2vQmAcme0001', '--name', 'every-state', '--rate-limit', '7', '--expires-in', '30d')
    await key(store, 'rotate', '--name', 'every-state')
    await key(store, 'disable', '--name', 'every-state')
    const db = (...args: string[]) => run(process.execPath, ['dist/cli/db.js', ...args], { env: { PATH: process.env.PATH ?? '', ...store.env }, timeout: PATIENCE_MS })
    const [first, second] = [await mkdtemp(join(tmpdir(), 'export-')), await mkdtemp(join(tmpdir(), 'export-'))]
    try {
      await db('export', '--data-dir', first)
      const exported = (JSON.parse(await readFile(join(first, 'keys.json'), 'utf8')) as ApiKey[]).find((record) => record.name === 'every-state')
      expect(exported).toEqual({
        name: 'every-state', sha256: expect.stringMatching(/^[0-9a-f]{64}$/), kind: 'standard', organization_id: 'org_2vQmAcme0001',
        expires_at: expect.stringMatching(/Z$/), disabled: true, rate_limit_per_minute: 7, previous: { sha256: expect.stringMatching(/^[0-9a-f]{64}$/), expires_at: expect.stringMatching(/Z$/) }
      })
      await db('import', '--data-dir', first)
      await db('export', '--data-dir', second)
      expect(await readFile(join(second, 'keys.json'), 'utf8')).toBe(await readFile(join(first, 'keys.json'), 'utf8'))
    } finally {
      await Promise.all([first, second].map((folder) => rm(folder, { recursive: true, force: true })))
    }
  })

  it('takes no entry and loses none but the database\'s, even from a role granted every right on the tables; records that role\'s changes', async () => {
    const store = await stores[1]![1]()
    const role = `key_writer_${randomBytes(4).toString('hex')}`
    await client!.query(`CREATE ROLE ${role} LOGIN; GRANT ALL ON ALL TABLES IN SCHEMA public TO ${role}; GRANT ALL ON SCHEMA public TO ${role}`)
    const writer = new pg.Client({ connectionString: store.env.DATABASE_URL!.replace('postgres@', `${role}@`), application_name: 'a script' })
    await writer.connect()
    try {
      const refusal = 'the entries of key_history are written by the database alone (the trigger on keys), and removed by npm run db -- trim'
      await expect(writer.query("INSERT INTO key_history (name, action, role) VALUES ('acme-standard', 'revoked', 'alice')")).rejects.toThrow(refusal)
      await expect(writer.query('DELETE FROM key_history')).rejects.toThrow(refusal)
      await expect(writer.query('TRUNCATE key_history')).rejects.toThrow(refusal)
      await writer.query("UPDATE keys SET disabled = true WHERE name = 'acme-standard'")
      const { rows } = await client!.query('SELECT name, action, role, client FROM key_history ORDER BY id DESC LIMIT 1')
      expect(rows).toEqual([{ name: 'acme-standard', action: 'disabled', role, client: 'a script' }])
    } finally {
      await writer.end()
      await client!.query(`DROP OWNED BY ${role}; DROP ROLE ${role}`)
    }
  })

  it('refuses to rename a key, which the history and the rate limit go by', async () => {
    await stores[1]![1]()
    await expect(client!.query("UPDATE keys SET name = 'acme-renamed', disabled = true WHERE name = 'acme-standard'"))
      .rejects.toThrow('key \'acme-standard\' cannot be renamed to \'acme-renamed\': a key keeps its name; mint a key of the new name and revoke this one')
  })

  it('refuses to change an entry, even to its owner', async () => {
    await stores[1]![1]()
    await expect(client!.query("UPDATE key_history SET action = 'minted'")).rejects.toThrow('the entries of key_history are never changed')
  })
})

describe('the upgrade to schema 11', () => {
  it('leaves the reads and writes of the release before working: they see one key a name, as they did', async () => {
    const url = await server.createDatabase()
    client = new pg.Client({ connectionString: url })
    await client.connect()
    await migrate(client, 10)
    // The release before wrote and read keys with these statements (postgres-write.ts, postgres.ts at c465726).
    const writeBefore = (name: string, sha256: string) => client!.query('INSERT INTO keys (name, sha256, kind, organization_id, expires_at) VALUES ($1, $2, $3, $4, $5)', [name, sha256, 'standard', 'org_2vQmAcme0001', null])
    const readBefore = async () => (await client!.query("SELECT name, sha256, kind, organization_id, to_json(expires_at) #>> '{}' AS expires_at FROM keys ORDER BY name")).rows
    await writeBefore('old', 'a'.repeat(64))
    const before = await readBefore()
    await migrate(client)
    expect(await readBefore()).toEqual(before)
    await writeBefore('older', 'b'.repeat(64))
    // A rotation of this release: the row keeps its name, and the release before reads its new secret.
    await client.query(`UPDATE keys SET sha256 = $1, previous_sha256 = $2, previous_expires_at = now() + interval '1 hour' WHERE name = 'old'`, ['c'.repeat(64), 'a'.repeat(64)])
    expect((await readBefore()).map(({ name, sha256 }) => [name, sha256[0]])).toEqual([['old', 'c'], ['older', 'b']])
    expect((await client.query('SELECT name, action FROM key_history ORDER BY id')).rows).toEqual([{ name: 'older', action: 'minted' }, { name: 'old', action: 'rotated' }])
  })
})
