import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { KEYS, bearer, build, captureLogs } from '../helper.js'
import { startRedis, type RedisServer } from '../redis.js'

const RATE_LIMITED = { error: { code: 429, message: 'Rate limit exceeded', metadata: { error_type: 'rate_limit_exceeded' } } }

function expectWindow (headers: Record<string, unknown>, limit: number, remaining: number) {
  expect(headers['x-ratelimit-limit']).toBe(String(limit))
  expect(headers['x-ratelimit-remaining']).toBe(String(remaining))
  const reset = Number(headers['x-ratelimit-reset'])
  expect(reset).toBeGreaterThan(0)
  expect(reset).toBeLessThanOrEqual(60)
}

describe('rate limit per key', () => {
  let app: ReturnType<typeof build>

  it('counts every answer of a key across the operations, then answers 429 with Retry-After', async () => {
    app = build({ settings: { RATE_LIMIT_PER_MINUTE: 3 } })
    const urls = ['/v1/providers', '/v1/endpoints/zdr', '/v1/organization/members']
    for (const [i, url] of urls.entries()) {
      const res = await app.inject({ url, headers: bearer(KEYS.alphaManagement) })
      expect(res.statusCode).toBe(200)
      expectWindow(res.headers, 3, 2 - i)
    }
    const refused = await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaManagement) })
    expect(refused.statusCode).toBe(429)
    expect(refused.json()).toEqual(RATE_LIMITED)
    expect(refused.headers['content-type']).toBe('application/json; charset=utf-8')
    expectWindow(refused.headers, 3, 0)
    expect(refused.headers['retry-after']).toBe(refused.headers['x-ratelimit-reset'])
    // Another key has its own budget.
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.betaManagement) })).statusCode).toBe(200)
  })

  it('counts answers that are errors too (a standard key on the member listing)', async () => {
    app = build({ settings: { RATE_LIMIT_PER_MINUTE: 1 } })
    const forbidden = await app.inject({ url: '/v1/organization/members', headers: bearer(KEYS.alphaStandard) })
    expect(forbidden.statusCode).toBe(403)
    expectWindow(forbidden.headers, 1, 0)
    expect((await app.inject({ url: '/v1/organization/members', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(429)
  })

  it('leaves the probes, the contract and the reference page unlimited and without the headers', async () => {
    app = build({ settings: { RATE_LIMIT_PER_MINUTE: 1, RATE_LIMIT_ANONYMOUS_PER_MINUTE: 1 } })
    for (let i = 0; i < 3; i++) {
      for (const url of ['/health', '/ready', '/v1/openapi.json', '/docs']) {
        const res = await app.inject({ url })
        expect(res.statusCode, url).toBe(200)
        expect(res.headers['x-ratelimit-limit'], url).toBeUndefined()
      }
    }
  })

  it('is off with RATE_LIMIT_PER_MINUTE=0: no headers, never 429', async () => {
    app = build({ settings: { RATE_LIMIT_PER_MINUTE: 0, RATE_LIMIT_ANONYMOUS_PER_MINUTE: 0 } })
    for (let i = 0; i < 20; i++) {
      const res = await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })
      expect(res.statusCode).toBe(200)
      expect(res.headers['x-ratelimit-limit']).toBeUndefined()
      expect((await app.inject({ url: '/v1/providers' })).statusCode).toBe(401)
    }
  })

  it('allows the default, 6,000 a minute, as the headers say', async () => {
    app = build()
    expectWindow((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).headers, 6000, 5999)
    expectWindow((await app.inject({ url: '/v1/providers' })).headers, 600, 599)
  })
})

describe('rate limit per client address, for requests without a valid key', () => {
  let app: ReturnType<typeof build>

  it('counts missing, malformed and unknown keys, then refuses the address, even with a valid key, before looking at it', async () => {
    app = build({ settings: { RATE_LIMIT_ANONYMOUS_PER_MINUTE: 3 } })
    const failures = [{}, { authorization: 'Basic abc' }, bearer('not-a-key')]
    for (const [i, headers] of failures.entries()) {
      const res = await app.inject({ url: '/v1/providers', headers })
      expect(res.statusCode).toBe(401)
      expectWindow(res.headers, 3, 2 - i)
    }
    for (const headers of [bearer('not-a-key'), bearer(KEYS.alphaStandard)]) {
      const refused = await app.inject({ url: '/v1/providers', headers })
      expect(refused.statusCode).toBe(429)
      expect(refused.json()).toEqual(RATE_LIMITED)
      expectWindow(refused.headers, 3, 0)
      expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0)
    }
    // Another address is not concerned.
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard), remoteAddress: '10.1.2.3' })).statusCode).toBe(200)
  })

  it('does not count requests with a valid key against the address', async () => {
    app = build({ settings: { RATE_LIMIT_ANONYMOUS_PER_MINUTE: 1 } })
    for (let i = 0; i < 5; i++) expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(200)
    expect((await app.inject({ url: '/v1/providers' })).statusCode).toBe(401)
    expect((await app.inject({ url: '/v1/providers' })).statusCode).toBe(429)
  })

  it('takes the address from X-Forwarded-For only from trusted proxies (TRUST_PROXY)', async () => {
    app = build({ settings: { RATE_LIMIT_ANONYMOUS_PER_MINUTE: 1, TRUST_PROXY: '1' } })
    const from = (client: string) => app.inject({ url: '/v1/providers', headers: { 'x-forwarded-for': client } })
    expect((await from('203.0.113.1')).statusCode).toBe(401)
    expect((await from('203.0.113.1')).statusCode).toBe(429)
    expect((await from('203.0.113.2')).statusCode).toBe(401)
    await app.close()

    app = build({ settings: { RATE_LIMIT_ANONYMOUS_PER_MINUTE: 1 } })
    expect((await from('203.0.113.1')).statusCode).toBe(401)
    // Not trusted: a forged header does not buy a new budget.
    expect((await from('203.0.113.2')).statusCode).toBe(429)
  })
})

describe('rate limits shared in Redis', () => {
  let redis: RedisServer
  beforeAll(async () => { redis = await startRedis() })
  afterAll(() => redis.close())

  it('gives a key N a minute in total across three replicas, not 3N', async () => {
    const replicas = [1, 2, 3].map(() => build({ settings: { RATE_LIMIT_PER_MINUTE: 5, REDIS_URL: redis.url } }))
    const urls = await Promise.all(replicas.map((app) => app.listen({ host: '127.0.0.1', port: 0 })))
    const statuses: number[] = []
    for (let i = 0; i < 12; i++) {
      const res = await fetch(`${urls[i % 3]}/v1/providers`, { headers: bearer(KEYS.alphaStandard) })
      await res.arrayBuffer()
      statuses.push(res.status)
      if (i < 5) expect(res.headers.get('x-ratelimit-remaining')).toBe(String(4 - i))
    }
    expect(statuses).toEqual([...Array(5).fill(200), ...Array(7).fill(429)])
  })

  it('serves without limits while Redis is down (logged once, counted), and shares the count again when it returns', async () => {
    const { lines, log } = captureLogs()
    const app = build({ log, settings: { RATE_LIMIT_PER_MINUTE: 2, REDIS_URL: redis.url } })
    const url = `${await app.listen({ host: '127.0.0.1', port: 0 })}/v1/providers`
    const get = async () => {
      const res = await fetch(url, { headers: bearer(KEYS.betaManagement) })
      await res.arrayBuffer()
      return res
    }
    expect((await get()).status).toBe(200)
    expect((await get()).status).toBe(200)
    expect((await get()).status).toBe(429)

    await redis.stop()
    for (let i = 0; i < 5; i++) {
      const res = await get()
      expect(res.status).toBe(200)
      expect(res.headers.get('x-ratelimit-limit')).toBeNull()
    }
    const down = lines.filter((line) => String(line.msg).startsWith('rate-limit store (Redis) unavailable'))
    expect(down).toHaveLength(1)
    expect(down[0]!.level).toBe(40)
    const metrics = await (await fetch(url.replace('/v1/providers', '/metrics'))).text()
    expect(Number(/^rate_limit_store_errors_total (\d+)$/m.exec(metrics)?.[1])).toBeGreaterThanOrEqual(5)

    const back = new Promise<void>((resolve) => {
      const timer = setInterval(() => {
        if (lines.some((line) => String(line.msg).startsWith('rate-limit store (Redis) reachable again'))) {
          clearInterval(timer)
          resolve()
        }
      }, 10)
    })
    await redis.start()
    await back
    // A new, empty Redis: the window starts again, shared again.
    expect((await get()).headers.get('x-ratelimit-remaining')).toBe('1')
    expect((await get()).status).toBe(200)
    expect((await get()).status).toBe(429)
  })
})
