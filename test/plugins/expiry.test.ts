import { describe, expect, it } from 'vitest'
import { KEYS, bearer, build, makeData, sha256, snapshotsOf } from '../helper.js'
import { createSnapshot } from '../../src/repositories/snapshot.js'
import { KeyTable } from '../../src/repositories/key-table.js'
import type { ApiKey } from '../../src/schemas/keys-and-organizations.js'

const EXPIRY = '2026-12-31T23:59:59Z'
const AT = Date.parse(EXPIRY)

/** The test data with the alpha keys expiring at EXPIRY (the standard one with an offset), read as files give them. */
function expiringData () {
  const data = makeData()
  return {
    ...data,
    keys: data.keys.map((key): ApiKey => key.name === 'alpha-standard' ? { ...key, expires_at: '2027-01-01T00:59:59+01:00' }
      : key.name === 'alpha-management' ? { ...key, expires_at: EXPIRY }
        : key.name === 'beta-management' ? { ...key, expires_at: null } : key)
  }
}

describe('keys that expire', () => {
  for (const url of ['/v1/providers', '/v1/endpoints/zdr', '/v1/organization/members']) {
    it(`${url}: answers until the instant of expires_at, and 401 from that instant on, with no change to the data`, async () => {
      let now = AT - 1
      const app = build({ data: expiringData(), clock: () => now })
      expect((await app.inject({ url, headers: bearer(KEYS.alphaManagement) })).statusCode).toBe(200)
      now = AT
      const res = await app.inject({ url, headers: bearer(KEYS.alphaManagement) })
      expect(res.statusCode).toBe(401)
      expect(res.json()).toEqual({ error: { code: 401, message: 'This API key has expired' } })
      expect(res.headers['www-authenticate']).toBe('Bearer error="invalid_token", error_description="The key has expired"')
      // A key with a null expiry never expires.
      now = AT + 10 * 365 * 86_400_000
      expect((await app.inject({ url, headers: bearer(KEYS.betaManagement) })).statusCode).toBe(200)
    })
  }

  it('compares the instant, whatever the offset it is written with', async () => {
    let now = AT - 1
    const app = build({ data: expiringData(), clock: () => now })
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(200)
    now = AT
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(401)
  })

  it('stops a key held in a key table as one held as a record, at the same instant', async () => {
    const data = expiringData()
    const snapshot = await createSnapshot({ ...data, keys: KeyTable.of(data.keys, 'keys') })
    const snapshots = { current: () => snapshot, confirmedAt: () => Date.now(), clockOffsetMs: () => 0, info: snapshotsOf(data).info }
    let now = AT - 1
    const app = build({ snapshots, clock: () => now })
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(200)
    now = AT
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(401)
    // The table gives the instant back in UTC.
    expect(snapshot.findKey(sha256(KEYS.alphaStandard))!.expires_at).toBe(EXPIRY)
  })

  it('serves the same bytes with expiring keys as without: no answer shows an expiry', async () => {
    const plain = build()
    const expiring = build({ data: expiringData(), clock: () => AT - 1 })
    for (const url of ['/v1/providers', '/v1/endpoints/zdr', '/v1/organization/members']) {
      const [a, b] = await Promise.all([plain, expiring].map((app) => app.inject({ url, headers: bearer(KEYS.alphaManagement) })))
      expect(b!.body).toBe(a!.body)
    }
  })
})

describe('a bound on stale data (MAX_STALENESS_MS)', () => {
  it('answers every keyed request 503 with Retry-After once the data has gone unconfirmed past the bound, and fails /ready; /health and /metrics answer', async () => {
    const snapshots = snapshotsOf(makeData())
    let now = 1_000_000
    const app = build({ snapshots, clock: () => now, settings: { MAX_STALENESS_MS: 3000 } })
    snapshots.confirmed(now)
    now += 3000
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(200)
    expect((await app.inject({ url: '/ready' })).statusCode).toBe(200)
    now += 1
    for (const url of ['/v1/providers', '/v1/endpoints/zdr', '/v1/organization/members']) {
      const res = await app.inject({ url, headers: bearer(KEYS.alphaManagement) })
      expect(res.statusCode).toBe(503)
      expect(res.headers['retry-after']).toBe('5')
      expect(res.json()).toEqual({ error: { code: 503, message: 'The data served cannot be confirmed current; try again later' } })
    }
    expect((await app.inject({ url: '/ready' })).statusCode).toBe(503)
    expect((await app.inject({ url: '/health' })).statusCode).toBe(200)
    const metrics = await app.inject({ url: '/metrics' })
    expect(metrics.statusCode).toBe(200)
    expect(metrics.body).toContain('directory_data_max_staleness_seconds 3')
    // Caught up: answered again at once.
    snapshots.confirmed(now)
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(200)
    expect((await app.inject({ url: '/ready' })).statusCode).toBe(200)
  })

  it('is off unless set: data unconfirmed for a day still serves', async () => {
    const snapshots = snapshotsOf(makeData())
    const app = build({ snapshots })
    snapshots.confirmed(Date.now() - 86_400_000)
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(200)
    const metrics = await app.inject({ url: '/metrics' })
    expect(metrics.body).not.toContain('directory_data_max_staleness_seconds')
    expect(Number(/directory_data_unconfirmed_seconds ([0-9.]+)/.exec(metrics.body)![1])).toBeGreaterThanOrEqual(86_400)
  })
})
