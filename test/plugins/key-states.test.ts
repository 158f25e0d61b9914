import { describe, expect, it } from 'vitest'
import { KEYS, bearer, build, makeData, sha256, snapshotsOf } from '../helper.js'
import { createSnapshot, withRecords, type Snapshot } from '../../src/repositories/snapshot.js'
import type { ApiKey } from '../../src/schemas/keys-and-organizations.js'

// A key disabled, with a previous secret, with its own limit: answered alike whether the key came in a
// whole read (a key table) or in a change applied to the snapshot (its overlay).

const END = '2026-12-31T23:59:59Z'
const AT = Date.parse(END)
const OLD_SECRET = 'test-alpha-management-before-rotation'

/** The test data with these keys changed (by name), and these added. */
function dataWith (changes: Record<string, Partial<ApiKey>>, added: ApiKey[] = []) {
  const data = makeData()
  return { ...data, keys: [...data.keys.map((key) => ({ ...key, ...changes[key.name] })), ...added] }
}

/** The snapshot of the plain test data with `data`'s keys applied as a change (upserts by name). */
async function changedTo (data: ReturnType<typeof dataWith>): Promise<Snapshot> {
  const plain = await createSnapshot(makeData())
  return plain.withIndex('keys', withRecords(plain.indexes.keys, data.keys, []), 2)
}

/** Two apps serving `data` at `now()`: its keys read whole (a key table), and applied as a change to a snapshot that had the plain test keys. */
async function bothWays (data: ReturnType<typeof dataWith>, now: () => number) {
  const whole = build({ data, clock: now })
  const changed = await changedTo(data)
  const snapshots = { current: () => changed, confirmedAt: () => Date.now(), clockOffsetMs: () => 0, info: snapshotsOf(data).info }
  return [['read whole', whole], ['applied as a change', build({ snapshots, clock: now })]] as const
}

const ask = (app: ReturnType<typeof build>, secret: string, url = '/v1/organization/members') =>
  app.inject({ url, headers: bearer(secret) }).then((res) => ({ status: res.statusCode, body: res.json(), challenge: res.headers['www-authenticate'], limit: res.headers['x-ratelimit-limit'] }))

describe('a disabled key', () => {
  it('answers 401 with a message of its own, on every operation, until enabled', async () => {
    for (const [, app] of await bothWays(dataWith({ 'alpha-management': { disabled: true } }), Date.now)) {
      for (const url of ['/v1/providers', '/v1/endpoints/zdr', '/v1/organization/members']) {
        expect(await ask(app, KEYS.alphaManagement, url)).toMatchObject({
          status: 401,
          body: { error: { code: 401, message: 'This API key is disabled' } },
          challenge: 'Bearer error="invalid_token", error_description="The key is disabled"'
        })
      }
      expect((await ask(app, KEYS.betaManagement)).status).toBe(200)
    }
    for (const [, app] of await bothWays(dataWith({ 'alpha-management': { disabled: false } }), Date.now)) {
      expect((await ask(app, KEYS.alphaManagement)).status).toBe(200)
    }
  })
})

describe('a key\'s previous secret', () => {
  const rotated = { sha256: sha256('test-alpha-management-after-rotation'), previous: { sha256: sha256(OLD_SECRET), expires_at: END } }

  it('authenticates as the key until its end, then answers 401 saying the key was rotated; the current secret works on', async () => {
    let now = AT - 1
    for (const [, app] of await bothWays(dataWith({ 'alpha-management': rotated }), () => now)) {
      now = AT - 1
      expect(await ask(app, OLD_SECRET)).toMatchObject({ status: 200, body: { total_count: expect.any(Number) } })
      expect((await ask(app, 'test-alpha-management-after-rotation')).status).toBe(200)
      // The secret before the rotation is no key of its own: its old value is gone.
      expect((await ask(app, KEYS.alphaManagement)).status).toBe(401)
      now = AT
      expect(await ask(app, OLD_SECRET)).toMatchObject({
        status: 401,
        body: { error: { code: 401, message: 'This API key was rotated and its grace period has ended: use its successor' } },
        challenge: 'Bearer error="invalid_token", error_description="The key was rotated"'
      })
      expect((await ask(app, 'test-alpha-management-after-rotation')).status).toBe(200)
    }
  })

  it('ends no later than the key itself, and shares the key\'s state: disabled, both secrets stop', async () => {
    let now = AT - 2000
    const early = new Date(AT - 1000).toISOString()
    for (const [, app] of await bothWays(dataWith({ 'alpha-management': { ...rotated, expires_at: early } }), () => now)) {
      now = AT - 2000
      expect((await ask(app, OLD_SECRET)).status).toBe(200)
      now = AT - 1000
      expect((await ask(app, OLD_SECRET)).status).toBe(401)
      expect((await ask(app, 'test-alpha-management-after-rotation')).body).toEqual({ error: { code: 401, message: 'This API key has expired' } })
    }
    now = AT - 2000
    for (const [, app] of await bothWays(dataWith({ 'alpha-management': { ...rotated, disabled: true } }), () => now)) {
      expect((await ask(app, OLD_SECRET)).body).toEqual({ error: { code: 401, message: 'This API key is disabled' } })
    }
  })

  it('never takes the place of another key\'s current secret: that key answers for it, before and after a change of the first', async () => {
    // alpha-management names beta-management's secret as its previous one (written by hand, say).
    const data = dataWith({ 'alpha-management': { previous: { sha256: sha256(KEYS.betaManagement), expires_at: END } } })
    const beta = (await build().inject({ url: '/v1/organization/members', headers: bearer(KEYS.betaManagement) })).json()
    for (const [, app] of await bothWays(data, () => AT - 1)) {
      expect((await app.inject({ url: '/v1/organization/members', headers: bearer(KEYS.betaManagement) })).json()).toEqual(beta)
    }
    // Then alpha-management changes (disabled) as a change: beta-management's secret is still its own.
    const snapshot = await changedTo(data)
    const changed = snapshot.withIndex('keys', withRecords(snapshot.indexes.keys, dataWith({ 'alpha-management': { previous: { sha256: sha256(KEYS.betaManagement), expires_at: END }, disabled: true } }).keys, []), 3)
    expect(changed.findKey(sha256(KEYS.betaManagement))?.name).toBe('beta-management')
    // And revoked: still.
    const revoked = changed.withIndex('keys', withRecords(changed.indexes.keys, [], ['alpha-management']), 4)
    expect(revoked.findKey(sha256(KEYS.betaManagement))?.name).toBe('beta-management')
  })

  it('answers as an expired key, not a rotated one, where the key\'s own expiry ended it first', async () => {
    const early = new Date(AT - 1000).toISOString()
    for (const [, app] of await bothWays(dataWith({ 'alpha-management': { ...rotated, expires_at: early } }), () => AT - 500)) {
      expect((await ask(app, OLD_SECRET)).body).toEqual({ error: { code: 401, message: 'This API key has expired' } })
    }
  })
})

describe('the fingerprint', () => {
  it('changes with each of a key\'s states, and is the same whether its keys came whole or as a change', async () => {
    const variants: Array<Record<string, Partial<ApiKey>>> = [
      {},
      { 'alpha-standard': { disabled: true } },
      { 'alpha-standard': { rate_limit_per_minute: 3 } },
      { 'alpha-standard': { rate_limit_per_minute: 4 } },
      { 'alpha-standard': { previous: { sha256: sha256(OLD_SECRET), expires_at: END } } },
      { 'alpha-standard': { previous: { sha256: sha256(OLD_SECRET), expires_at: '2027-01-01T00:00:00Z' } } }
    ]
    const prints: string[] = []
    for (const changes of variants) {
      const data = dataWith(changes)
      const print = (await createSnapshot(data)).fingerprint
      expect((await changedTo(data)).fingerprint).toBe(print)
      prints.push(print)
    }
    expect(new Set(prints).size).toBe(variants.length)
  })
})

describe('a key\'s own rate limit', () => {
  it('replaces RATE_LIMIT_PER_MINUTE for that key, in its headers too, and applies where the setting turns the others off', async () => {
    const data = dataWith({ 'alpha-standard': { rate_limit_per_minute: 2 } })
    for (const setting of [100, 0]) {
      const app = build({ data, settings: { RATE_LIMIT_PER_MINUTE: setting } })
      const statuses = []
      for (let i = 0; i < 3; i++) statuses.push(await ask(app, KEYS.alphaStandard, '/v1/providers'))
      expect(statuses.map(({ status, limit }) => [status, limit])).toEqual([[200, '2'], [200, '2'], [429, '2']])
      expect((await ask(app, KEYS.betaManagement, '/v1/providers')).limit).toBe(setting === 0 ? undefined : '100')
    }
  })
})
