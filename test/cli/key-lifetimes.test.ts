import { execFile } from 'node:child_process'
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import pg from 'pg'
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest'
import { loadDataFolder } from '../../src/repositories/sources/files.js'
import { replaceDirectory } from '../../src/repositories/sources/postgres-write.js'
import { KEY_SELECT, keyOfRow } from '../../src/repositories/sources/postgres.js'
import type { ApiKey } from '../../src/schemas/keys-and-organizations.js'
import { BUNDLED_MANAGEMENT_KEY } from '../process.js'
import { bearer, build, sha256 } from '../helper.js'
import { sharedPostgres } from '../postgres.js'
import { PATIENCE_MS } from '../patience.js'

const run = promisify(execFile)
const HOUR = 3_600_000

/** npm run key with these arguments, in a store: a folder (--data-dir) or a database (DATABASE_URL). */
type Store = {
  args: string[]
  env: Record<string, string>
  keys: () => Promise<ApiKey[]>
  /** Records a key as it is given, as a writer other than npm run key would (one expired already, say). */
  insert: (key: ApiKey) => Promise<void>
  /** Holds the key of that name as another command changing it would (the row's lock, the folder's lock file); answers the release. */
  busy: (name: string) => Promise<() => Promise<void>>
}
// A command that waits on a lock it should have refused is ended within the patience, not the test's timeout.
const key = (store: Store, ...args: string[]) => run(process.execPath, ['dist/cli/mint-key.js', ...args, ...store.args], { env: { PATH: process.env.PATH ?? '', ...store.env }, timeout: PATIENCE_MS })

const server = sharedPostgres()
afterAll(() => server.close())

let dir: string
let client: pg.Client | undefined
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'key-lifetimes-'))
  await cp('fixtures', dir, { recursive: true })
})
afterEach(async () => {
  await client?.end()
  client = undefined
  await rm(dir, { recursive: true, force: true })
})

const stores: Array<[string, () => Promise<Store>]> = [
  ['a folder', async () => ({
    args: ['--data-dir', dir],
    env: {},
    keys: async () => JSON.parse(await readFile(join(dir, 'keys.json'), 'utf8')),
    insert: async (record) => {
      const keys = JSON.parse(await readFile(join(dir, 'keys.json'), 'utf8')) as ApiKey[]
      await writeFile(join(dir, 'keys.json'), JSON.stringify([...keys, record]))
    },
    // A command under way: this process, alive, holds the lock.
    busy: async () => {
      await writeFile(join(dir, 'keys.json.lock'), String(process.pid))
      return () => rm(join(dir, 'keys.json.lock'))
    }
  })],
  ['PostgreSQL', async () => {
    const url = await server.createMigratedDatabase()
    client = new pg.Client({ connectionString: url })
    await client.connect()
    await replaceDirectory(client, await loadDataFolder('fixtures'))
    const db = client
    return {
      args: [],
      env: { DATABASE_URL: url },
      insert: async (record) => {
        await db.query('INSERT INTO keys (name, sha256, kind, organization_id, expires_at) VALUES ($1, $2, $3, $4, $5)',
          [record.name, record.sha256, record.kind, record.organization_id, record.expires_at ?? null])
      },
      busy: async (name: string) => {
        const other = new pg.Client({ connectionString: url })
        await other.connect()
        await other.query('BEGIN')
        await other.query('SELECT FROM keys WHERE name = $1 FOR UPDATE', [name])
        return async () => { await other.query('ROLLBACK'); await other.end() }
      },
      // As a replica reads them, in UTC (this session's TimeZone), to the second as the commands write them.
      keys: async () => {
        await db.query("SET TimeZone = 'UTC'")
        const { rows } = await db.query<string[]>({ text: `${KEY_SELECT} ORDER BY name`, rowMode: 'array' })
        return rows.map((row) => keyOfRow(row).key)
      }
    }
  }]
]

describe.each(stores)('npm run key in %s', (_store, open) => {
  it('mints a key that expires (--expires-in), lists it, and the server stops it at that instant', async () => {
    const store = await open()
    const before = Date.now()
    const { stdout, stderr } = await key(store, '--kind', 'standard', '--org', 'org_2vQmAcme0001', '--name', 'ci-short', '--expires-in', '12h')
    const secret = stdout.trim()
    const minted = (await store.keys()).find((record) => record.name === 'ci-short')!
    const expiry = Date.parse(minted.expires_at!)
    expect(expiry).toBeGreaterThanOrEqual(before + 12 * HOUR - 1000)
    expect(expiry).toBeLessThanOrEqual(Date.now() + 12 * HOUR + 1000)
    expect(Date.parse(/expiring at (\S+) in /.exec(stderr)![1]!)).toBe(expiry)
    // Served from the store's own data, the clock moved rather than waited for.
    let now = expiry - 1
    const app = build({ data: { ...await loadDataFolder('fixtures'), keys: await store.keys() }, clock: () => now })
    expect((await app.inject({ url: '/v1/providers', headers: bearer(secret) })).statusCode).toBe(200)
    now = expiry
    expect((await app.inject({ url: '/v1/providers', headers: bearer(secret) })).statusCode).toBe(401)
  })

  it('rotates a key with a grace: the name stays, its new secret works at once, the one before until the grace ends', async () => {
    const store = await open()
    const old = (await store.keys()).find((record) => record.kind === 'management')!
    const count = (await store.keys()).length
    const before = Date.now()
    const { stdout, stderr } = await key(store, 'rotate', '--name', old.name, '--grace', '15m')
    // Nothing but the secret on stdout: KEY=$(npm run -s key -- rotate ...) needs no parsing.
    expect(stdout).toMatch(/^sk-or-v1-[0-9a-f]{64}\n$/)
    const secret = stdout.trim()
    const keys = await store.keys()
    expect(keys).toHaveLength(count)
    const rotated = keys.find((record) => record.name === old.name)!
    expect(rotated).toEqual({ name: old.name, sha256: sha256(secret), kind: 'management', organization_id: old.organization_id, previous: { sha256: old.sha256, expires_at: expect.any(String) } })
    const end = Date.parse(rotated.previous!.expires_at)
    expect(end).toBeGreaterThanOrEqual(before + 15 * 60_000 - 1000)
    expect(end).toBeLessThanOrEqual(Date.now() + 15 * 60_000 + 1000)
    // The instant written, as the commands print every expiry: UTC, to the second.
    expect(stderr).toContain(`its secret before works until ${new Date(end).toISOString().replace('.000Z', 'Z')} (grace 15m)`)
    expect(rotated.previous!.expires_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/)
    const list = (await key(store, 'list')).stdout
    expect(list).toMatch(new RegExp(`\\n  previous secret of ${old.name} +${rotated.previous!.expires_at} +grace\\n`))
    expect(list).not.toContain(old.sha256)
    let now = end - 1
    const app = build({ data: { ...await loadDataFolder('fixtures'), keys }, clock: () => now })
    const members = (presented: string) => app.inject({ url: '/v1/organization/members', headers: bearer(presented) }).then((res) => [res.statusCode, res.json().error?.message])
    expect(old.sha256).toBe(sha256(BUNDLED_MANAGEMENT_KEY))
    expect([await members(BUNDLED_MANAGEMENT_KEY), await members(secret)]).toEqual([[200, undefined], [200, undefined]])
    now = end
    expect([await members(BUNDLED_MANAGEMENT_KEY), await members(secret)]).toEqual([[401, 'This API key was rotated and its grace period has ended: use its successor'], [200, undefined]])
  })

  it('refuses a rotation while another command changes the key, in one line, writing nothing; then rotates', async () => {
    const store = await open()
    const old = (await store.keys()).find((record) => record.kind === 'management')!
    const before = await store.keys()
    const release = await store.busy(old.name)
    let refused: { code: number | string, stderr: string }
    try {
      refused = await key(store, 'rotate', '--name', old.name).then(
        () => ({ code: 0, stderr: '' }),
        (error: { code: number | null, signal: string | null, stderr: string }) => ({ code: error.code ?? `${error.signal} after waiting ${PATIENCE_MS} ms`, stderr: error.stderr }))
    } finally {
      await release()
    }
    expect(refused).toEqual({ code: 1, stderr: expect.stringMatching(/^another (key )?command .* nothing was written: try again once it ends\n$/) })
    expect(await store.keys()).toEqual(before)
    const { stdout } = await key(store, 'rotate', '--name', old.name)
    expect((await store.keys()).find((record) => record.name === old.name)!.sha256).toBe(sha256(stdout.trim()))
  })

  it('ends the secret before at the key\'s own expiry when that comes first, and at once with --grace 0', async () => {
    const store = await open()
    await key(store, '--kind', 'standard', '--org', 'org_2vQmAcme0001', '--name', 'soon', '--expires-in', '10m')
    const soon = (await store.keys()).find((record) => record.name === 'soon')!.expires_at
    const { stderr } = await key(store, 'rotate', '--name', 'soon', '--grace', '1h')
    const rotated = (await store.keys()).find((record) => record.name === 'soon')!
    expect([rotated.expires_at, rotated.previous?.expires_at]).toEqual([soon, soon])
    expect(stderr).toContain(`its secret before works until ${soon} (grace 1h)`)
    await key(store, '--kind', 'standard', '--org', 'org_2vQmAcme0001', '--name', 'now', '--expires-in', '90d')
    const before = Date.now()
    await key(store, 'rotate', '--name', 'now', '--grace', '0')
    const end = Date.parse((await store.keys()).find((record) => record.name === 'now')!.previous!.expires_at)
    expect(end).toBeGreaterThanOrEqual(before - 1000)
    expect(end).toBeLessThanOrEqual(Date.now() + 1000)
  })

  it('rotates a key that expired already only with a new expiry, saying the grace cannot extend it rather than promising a time past', async () => {
    const store = await open()
    await store.insert({ name: 'expired', sha256: sha256('expired-secret'), kind: 'standard', organization_id: 'org_2vQmAcme0001', expires_at: '2020-01-01T00:00:00Z' })
    const before = await store.keys()
    // Without one, the new secret would be born expired, or a temporary key would live for ever.
    const refused = await key(store, 'rotate', '--name', 'expired').catch((failure: { code: number, stdout: string, stderr: string }) => failure)
    expect(refused).toMatchObject({ code: 1, stdout: '', stderr: 'key "expired" expired at 2020-01-01T00:00:00Z: give its new secret an expiry with --expires-in or --expires-at; nothing was written\n' })
    expect(await store.keys()).toEqual(before)
    const { stdout, stderr } = await key(store, 'rotate', '--name', 'expired', '--grace', '1h', '--expires-in', '30d')
    expect(stderr.split('\n')[0]).toMatch(/^rotated key "expired" \(standard, org_2vQmAcme0001, expiring at \S+Z\) in .+; running servers follow within a second, without a restart: it expired already at 2020-01-01T00:00:00Z, so the grace \(1h\) cannot extend its secret before\.$/)
    expect((await store.keys()).find((record) => record.name === 'expired')).toEqual({
      name: 'expired', sha256: sha256(stdout.trim()), kind: 'standard', organization_id: 'org_2vQmAcme0001', expires_at: expect.stringMatching(/Z$/),
      previous: { sha256: sha256('expired-secret'), expires_at: '2020-01-01T00:00:00Z' }
    })
  })

  it('removes an expiry with expire --never, and refuses to prune from an instant to come, writing nothing', async () => {
    const store = await open()
    await key(store, '--kind', 'standard', '--org', 'org_2vQmAcme0001', '--name', 'temp', '--expires-in', '1h')
    expect((await key(store, 'expire', '--name', 'temp', '--never')).stderr).toMatch(/^key "temp" expires at never \(was \S+Z\) in /)
    expect((await store.keys()).find((record) => record.name === 'temp')!.expires_at).toBeUndefined()
    await key(store, 'expire', '--name', 'temp', '--in', '90d')
    const before = await store.keys()
    const refused = await key(store, 'prune', '--expired-before', '2999-01-01T00:00:00Z').catch((failure: { code: number, stderr: string }) => failure)
    expect(refused).toMatchObject({ code: 1, stderr: expect.stringMatching(/^--expired-before "2999-01-01T00:00:00Z" is in the future: it is \S+Z now, and prune removes only what has ended; nothing was written\n$/) })
    expect(await store.keys()).toEqual(before)
  })

  it('writes nothing for a change the key holds already, and says there is no history of a key it never had', async () => {
    const store = await open()
    await key(store, 'disable', '--name', 'acme-standard')
    const entries = async () => (await key(store, 'history', '--name', 'acme-standard')).stdout.trimEnd().split('\n').length
    const count = await entries()
    expect((await key(store, 'disable', '--name', 'acme-standard')).stderr).toMatch(/^key "acme-standard" disabled \(it was already\) in /)
    expect(await entries()).toBe(count)
    const error = await key(store, 'history', '--name', 'nobody').catch((failure: { code: number, stderr: string }) => failure)
    expect(error).toMatchObject({ code: 1, stderr: expect.stringMatching(/^no entry of a key named "nobody" in the history of \S/) })
  })

  it('refuses to mint for an organization the directory does not have, in one line naming it, writing nothing', async () => {
    const store = await open()
    const before = await store.keys()
    for (const kind of ['standard', 'management']) {
      const error = await key(store, '--kind', kind, '--org', 'org_nope', '--name', 'early').catch((failure: { code: number, stdout: string, stderr: string }) => failure)
      expect(error).toMatchObject({ code: 1, stdout: '', stderr: expect.stringMatching(/^no organization "org_nope" in (\S*organizations\.json|table organizations of \S+); nothing was written\n$/) })
    }
    expect(await store.keys()).toEqual(before)
  })

  it('refuses an expiry already past, in one line naming it and the time now, writing nothing', async () => {
    const store = await open()
    const old = (await store.keys()).find((record) => record.kind === 'management')!
    const before = await store.keys()
    for (const args of [
      ['--kind', 'standard', '--org', 'org_2vQmAcme0001', '--name', 'late', '--expires-at', '2020-01-01T00:00:00Z'],
      ['rotate', '--name', old.name, '--expires-at', '2020-01-01T00:00:00Z']
    ]) {
      const error = await key(store, ...args).catch((failure: { code: number, stdout: string, stderr: string }) => failure)
      expect(error).toMatchObject({ code: 1, stdout: '' })
      const [, now] = /^--expires-at "2020-01-01T00:00:00Z" is not in the future: it is (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) now; nothing was written\n$/.exec(error.stderr) ?? []
      expect(Math.abs(Date.parse(now!) - Date.now())).toBeLessThan(PATIENCE_MS)
    }
    const error = await key(store, '--kind', 'standard', '--org', 'org_2vQmAcme0001', '--name', 'late', '--expires-in', '0').catch((failure: { code: number, stderr: string }) => failure)
    expect(error).toMatchObject({ code: 1, stderr: expect.stringMatching(/^--expires-in "0" is not in the future: it is \S+Z now; nothing was written\n$/) })
    expect(await store.keys()).toEqual(before)
  })

  it('prints the expiry it mints with in UTC, to the second, whatever offset or fraction it was given with', async () => {
    const store = await open()
    const { stderr } = await key(store, '--kind', 'management', '--org', 'org_2vQmAcme0001', '--name', 'later', '--expires-at', '2999-01-01T02:00:00.250+02:00')
    expect(stderr).toContain(', expiring at 2999-01-01T00:00:00Z in ')
  })

  it('lists expiries in UTC, to the second, whatever offset or fraction they are held with', async () => {
    const store = await open()
    await store.insert({ name: 'later', sha256: sha256('later-secret'), kind: 'management', organization_id: 'org_2vQmAcme0001', expires_at: '2999-01-01T02:00:00.250+02:00' })
    await store.insert({ name: 'gone', sha256: sha256('gone-secret'), kind: 'standard', organization_id: 'org_2vQmAcme0001', expires_at: '2020-01-01T00:00:00.5+01:00' })
    const lines = (await key(store, 'list')).stdout.trimEnd().split('\n')
    expect(lines.find((line) => line.startsWith('gone '))).toMatch(/^gone +standard +org_2vQmAcme0001 +2019-12-31T23:00:00Z +expired +default$/)
    expect(lines.find((line) => line.startsWith('later '))).toMatch(/^later +management +org_2vQmAcme0001 +2999-01-01T00:00:00Z +active +default$/)
  })

  it('lists names, kinds, organizations and expiries, the expired marked, never a hash', async () => {
    const store = await open()
    await store.insert({ name: 'gone', sha256: sha256('gone-secret'), kind: 'standard', organization_id: 'org_2vQmAcme0001', expires_at: '2020-01-01T00:00:00Z' })
    await key(store, '--kind', 'management', '--org', 'org_2vQmAcme0001', '--name', 'later', '--expires-at', '2999-01-01T00:00:00Z')
    const { stdout } = await key(store, 'list')
    const lines = stdout.trimEnd().split('\n')
    expect(lines[0]).toMatch(/^NAME +KIND +ORGANIZATION +EXPIRES +STATUS +LIMIT$/)
    expect(lines.find((line) => line.startsWith('gone '))).toMatch(/^gone +standard +org_2vQmAcme0001 +2020-01-01T00:00:00Z +expired +default$/)
    expect(lines.find((line) => line.startsWith('later '))).toMatch(/^later +management +org_2vQmAcme0001 +2999-01-01T00:00:00Z +active +default$/)
    expect(lines.filter((line) => / never +active +default$/.test(line)).length).toBeGreaterThan(0)
    for (const record of await store.keys()) expect(stdout).not.toContain(record.sha256)
  })

  it('refuses an expiry that is not a duration or an RFC 3339 timestamp with a time zone, in one line', async () => {
    const store = await open()
    for (const [args, message] of [
      [['--expires-in', '1 week'], '--expires-in "1 week" is not a duration such as 30s, 15m, 12h or 90d, ending before the year 10000'],
      [['--expires-in', '999999999d'], '--expires-in "999999999d" is not a duration such as 30s, 15m, 12h or 90d, ending before the year 10000'],
      [['--expires-at', '2026-12-31T23:59:59'], '--expires-at "2026-12-31T23:59:59" is not an RFC 3339 timestamp with a time zone (2026-12-31T23:59:59Z)'],
      [['--expires-at', '10000-01-01T00:00:00Z'], '--expires-at "10000-01-01T00:00:00Z" is not an RFC 3339 timestamp with a time zone (2026-12-31T23:59:59Z)']
    ] as const) {
      const error = await key(store, '--kind', 'standard', '--org', 'o', '--name', 'x', ...args).catch((failure: { code: number, stderr: string }) => failure)
      expect(error).toMatchObject({ code: 2, stderr: `${message}; see npm run key -- --help\n` })
    }
  })
})

describe('npm run key in a folder, commands at once', () => {
  it('records the key of every command that says so, and refuses the others in one line, writing nothing', async () => {
    const store = await stores[0]![1]()
    for (let round = 0; round < 3; round++) {
      const outcomes = await Promise.all(Array.from({ length: 16 }, (_, i) => key(store, '--kind', 'standard', '--org', 'org_2vQmAcme0001', '--name', `at-once-${round}-${i}`).then(
        ({ stdout }) => ({ name: `at-once-${round}-${i}`, secret: stdout.trim() }),
        (error: { code: number, stderr: string }) => ({ name: `at-once-${round}-${i}`, code: error.code, stderr: error.stderr }))))
      const keys = await store.keys()
      for (const outcome of outcomes) {
        if ('secret' in outcome) expect(keys.find((record) => record.name === outcome.name)?.sha256, outcome.name).toBe(sha256(outcome.secret))
        else expect(outcome, outcome.name).toEqual({ name: outcome.name, code: 1, stderr: expect.stringMatching(/^another key command .* nothing was written: try again once it ends[^\n]*\n$/) })
      }
      expect(outcomes.some((outcome) => 'secret' in outcome)).toBe(true)
      await expect(readFile(join(dir, 'keys.json.lock'))).rejects.toThrow(/ENOENT/)
    }
  })
})

describe('a folder\'s key history', () => {
  it('keeps entries for KEY_HISTORY_RETENTION_DAYS, removing older ones at the next command', async () => {
    const store = await stores[0]![1]()
    const old = { at: '2020-01-01T00:00:00Z', name: 'gone', action: 'minted', changes: null, by: 'someone' }
    const recent = { at: new Date(Date.now() - 86_400_000).toISOString().replace(/\.\d{3}Z$/, 'Z'), name: 'kept', action: 'revoked', changes: null, by: 'someone' }
    await writeFile(join(dir, 'key-history.jsonl'), `${JSON.stringify(old)}\n${JSON.stringify(recent)}\n`)
    await key({ ...store, env: { KEY_HISTORY_RETENTION_DAYS: '7' } }, 'disable', '--name', 'acme-standard')
    const lines = (await readFile(join(dir, 'key-history.jsonl'), 'utf8')).trimEnd().split('\n').map((line) => JSON.parse(line))
    expect(lines.map(({ name, action }) => [name, action])).toEqual([['kept', 'revoked'], ['acme-standard', 'disabled']])
  })

  it('makes the change and prints the key when the history cannot be written, and says so', async () => {
    const store = await stores[0]![1]()
    // A history that cannot be appended to: a folder where the file should be.
    await mkdir(join(dir, 'key-history.jsonl'))
    const { stdout, stderr } = await key(store, '--kind', 'standard', '--org', 'org_2vQmAcme0001', '--name', 'unrecorded')
    expect((await store.keys()).find((record) => record.name === 'unrecorded')?.sha256).toBe(sha256(stdout.trim()))
    expect(stderr).toMatch(/^warning: the change is made, but its history could not be written to \S+key-history\.jsonl: /m)
  })
})

describe('npm run key in a folder, after a command died', () => {
  it('takes over the lock file it left', async () => {
    const store = await stores[0]![1]()
    // A process id no process has (past the kernel's pid_max).
    await writeFile(join(dir, 'keys.json.lock'), '99999999')
    await key(store, '--kind', 'standard', '--org', 'org_2vQmAcme0001', '--name', 'after-a-crash')
    expect((await store.keys()).some((record) => record.name === 'after-a-crash')).toBe(true)
    await expect(readFile(join(dir, 'keys.json.lock'))).rejects.toThrow(/ENOENT/)
  })
})
