import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest'
import { KEYS, bearer, build, captureLogs, makeData } from '../helper.js'
import { Redis } from 'ioredis'
import { startRedis, type RedisServer } from '../redis.js'
import { PATIENCE_MS } from '../patience.js'

/**
 * The commands clients make Redis run (those a script runs aside, and the test's own), as MONITOR
 * sees them run: `seen()` answers them once everything sent before it has run.
 */
async function monitorCommands (admin: Redis) {
  const monitor = await admin.duplicate().monitor()
  const run: string[] = []
  let sentinel = () => {}
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    const name = args[0]!.toLowerCase()
    if (name === 'ping' && args[1] === 'sentinel') sentinel()
    else if (source !== 'lua' && !/^(client|config|flushall|info|ping)$/.test(name)) run.push(name)
  })
  return {
    async seen () {
      const reached = new Promise<void>((resolve) => { sentinel = resolve })
      await admin.ping('sentinel')
      await reached
      return run.splice(0)
    },
    stop: () => monitor.disconnect()
  }
}

/** The value of one series in the Prometheus text, or undefined. */
function metric (text: string, series: string): number | undefined {
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${series} `))
  return line === undefined ? undefined : Number(line.slice(series.length + 1))
}

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

  it('counts missing, malformed and unknown keys, then refuses them from that address with 429', async () => {
    app = build({ settings: { RATE_LIMIT_ANONYMOUS_PER_MINUTE: 3 } })
    const failures = [{}, { authorization: 'Basic abc' }, bearer('not-a-key')]
    for (const [i, headers] of failures.entries()) {
      const res = await app.inject({ url: '/v1/providers', headers })
      expect(res.statusCode).toBe(401)
      expectWindow(res.headers, 3, 2 - i)
    }
    for (const headers of [bearer('not-a-key'), {}]) {
      const refused = await app.inject({ url: '/v1/providers', headers })
      expect(refused.statusCode).toBe(429)
      expect(refused.json()).toEqual(RATE_LIMITED)
      expectWindow(refused.headers, 3, 0)
      expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0)
    }
    // Another address is not concerned.
    expect((await app.inject({ url: '/v1/providers', headers: bearer('not-a-key'), remoteAddress: '10.1.2.3' })).statusCode).toBe(401)
  })

  it('never refuses a valid key because its address spent its anonymous budget (clients behind one NAT)', async () => {
    app = build({ settings: { RATE_LIMIT_ANONYMOUS_PER_MINUTE: 3 } })
    for (let i = 0; i < 3; i++) expect((await app.inject({ url: '/v1/providers', headers: bearer('made-up') })).statusCode).toBe(401)
    expect((await app.inject({ url: '/v1/providers', headers: bearer('made-up') })).statusCode).toBe(429)
    for (const key of [KEYS.alphaStandard, KEYS.betaManagement]) {
      const res = await app.inject({ url: '/v1/providers', headers: bearer(key) })
      expect(res.statusCode).toBe(200)
      // Its own window, not the address's.
      expectWindow(res.headers, 6000, 5999)
    }
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

  it.each(['1', '127.0.0.1', '127.0.0.0/8'])('counts a forwarded value that is not an IP address as the connection (TRUST_PROXY=%s)', async (trustProxy) => {
    app = build({ settings: { RATE_LIMIT_ANONYMOUS_PER_MINUTE: 1, TRUST_PROXY: trustProxy } })
    const from = (client: string) => app.inject({ url: '/v1/providers', headers: { 'x-forwarded-for': client } })
    expect((await from('garbage-1')).statusCode).toBe(401)
    // Rotating values buys no new budget, and frames no other address.
    for (const value of ['garbage-2', `203.0.113.1, ${'x'.repeat(15_000)}`, '203.0.113.7:80', '999.1.1.1', '']) {
      expect((await from(value)).statusCode, value.slice(0, 30)).toBe(429)
    }
    // A valid address from the trusted hop is a client of its own.
    expect((await from('203.0.113.9')).statusCode).toBe(401)
    expect((await from('2001:db8::1')).statusCode).toBe(401)
  })

  it('counts an IPv6 client by its /64 however its address is written, and an IPv4 address mapped into IPv6 as that address', async () => {
    app = build({ settings: { RATE_LIMIT_ANONYMOUS_PER_MINUTE: 1 } })
    const from = (remoteAddress: string) => app.inject({ url: '/v1/providers', remoteAddress })
    expect((await from('2001:db8:1:2::1')).statusCode).toBe(401)
    // Another host of the same /64, and the first written in full and in capitals: one client.
    for (const address of ['2001:db8:1:2:ffff:ffff:ffff:ffff', '2001:0DB8:0001:0002:0000:0000:0000:0001']) {
      expect((await from(address)).statusCode, address).toBe(429)
    }
    expect((await from('2001:db8:1:3::1')).statusCode).toBe(401)
    expect((await from('::')).statusCode).toBe(401)
    expect((await from('::1')).statusCode).toBe(429)

    expect((await from('203.0.113.5')).statusCode).toBe(401)
    for (const address of ['::ffff:203.0.113.5', '::FFFF:cb00:7105', '0:0:0:0:0:ffff:203.0.113.5']) {
      expect((await from(address)).statusCode, address).toBe(429)
    }
    // Other IPv6 addresses that end with an IPv4 address (NAT64 here) are IPv6 clients.
    expect((await from('64:ff9b::203.0.113.5')).statusCode).toBe(401)
  })

  it('counts a client that reaches the server around the listed proxies by its own address', async () => {
    app = build({ settings: { RATE_LIMIT_ANONYMOUS_PER_MINUTE: 1, TRUST_PROXY: '10.0.0.1' } })
    const direct = (client: string) => app.inject({ url: '/v1/providers', remoteAddress: '198.51.100.1', headers: { 'x-forwarded-for': client } })
    expect((await direct('203.0.113.1')).statusCode).toBe(401)
    expect((await direct('203.0.113.2')).statusCode).toBe(429)
  })
})

describe('rate limits shared in Redis', () => {
  let redis: RedisServer
  let admin: Redis
  beforeAll(async () => {
    redis = await startRedis()
    admin = new Redis(redis.url)
  })
  afterAll(async () => {
    admin.disconnect()
    await redis.close()
  })
  // Each test counts from an empty Redis.
  beforeEach(() => admin.flushall())

  it('asks Redis once per request, whatever the key', async () => {
    const app = build({ settings: { REDIS_URL: redis.url } })
    // The first request loads the counting script into Redis.
    await app.inject({ url: '/v1/providers', headers: bearer(KEYS.betaManagement) })
    const commands = await monitorCommands(admin)
    await commands.seen()
    const requests = [bearer(KEYS.alphaStandard), bearer(KEYS.alphaManagement), bearer('made-up'), {}, { authorization: 'Basic x' }]
    for (const headers of requests) expect((await app.inject({ url: '/v1/providers', headers })).headers['x-ratelimit-limit']).toBeDefined()
    expect(await commands.seen()).toHaveLength(requests.length)
    commands.stop()
  })

  it('keeps one counter per connection, of bounded size, under a flood of distinct forwarded values', async () => {
    const app = build({ settings: { REDIS_URL: redis.url, TRUST_PROXY: '1', RATE_LIMIT_ANONYMOUS_PER_MINUTE: 1_000_000 } })
    for (let i = 0; i < 300; i++) {
      const res = await app.inject({ url: '/v1/providers', headers: { ...bearer('made-up'), 'x-forwarded-for': `${i}-${'g'.repeat(2000)}` } })
      expect(res.statusCode).toBe(401)
    }
    const keys = await admin.keys('*')
    expect(keys).toHaveLength(1)
    expect(keys[0]!.length).toBeLessThan(100)
  })

  it('stops asking a stalled Redis after a timeout, serves unchecked meanwhile, then asks again', async () => {
    const app = build({ settings: { RATE_LIMIT_PER_MINUTE: 100, REDIS_URL: redis.url } })
    const get = () => app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })
    expect((await get()).headers['x-ratelimit-limit']).toBe('100')
    const commands = await monitorCommands(admin)
    await commands.seen()
    // Redis holds every client's commands for 2 s: as stalled as a Redis gets.
    await admin.call('CLIENT', 'PAUSE', '2000', 'ALL')
    for (let i = 0; i < 5; i++) {
      const res = await get()
      expect(res.statusCode).toBe(200)
      expect(res.headers['x-ratelimit-limit']).toBeUndefined()
    }
    // Answered once Redis resumes: the first request asked, the four after it did not.
    expect(await commands.seen()).toHaveLength(1)
    commands.stop()
    const stalled = (await app.inject({ url: '/metrics' })).body
    expect(metric(stalled, 'rate_limit_store_errors_total')).toBe(5)
    expect(metric(stalled, 'rate_limit_store_available')).toBe(0)

    // After its back-off a request probes Redis again, and counting resumes.
    const res = await vi.waitFor(async () => {
      const next = await get()
      if (next.headers['x-ratelimit-limit'] === undefined) throw new Error('requests still not counted in Redis after its back-off')
      return next
    }, { timeout: PATIENCE_MS, interval: 100 })
    expect(res.headers['x-ratelimit-limit']).toBe('100')
    expect(metric((await app.inject({ url: '/metrics' })).body, 'rate_limit_store_available')).toBe(1)
  })

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

  it('gives a key of its own limit N a minute in total across three replicas, the other keys the setting\'s', async () => {
    const data = makeData()
    const limited = { ...data, keys: data.keys.map((key) => key.name === 'alpha-standard' ? { ...key, rate_limit_per_minute: 3 } : key) }
    const replicas = [1, 2, 3].map(() => build({ data: limited, settings: { RATE_LIMIT_PER_MINUTE: 100, REDIS_URL: redis.url } }))
    const urls = await Promise.all(replicas.map((app) => app.listen({ host: '127.0.0.1', port: 0 })))
    const answers: Array<[number, string | null]> = []
    for (let i = 0; i < 5; i++) {
      const res = await fetch(`${urls[i % 3]}/v1/providers`, { headers: bearer(KEYS.alphaStandard) })
      await res.arrayBuffer()
      answers.push([res.status, res.headers.get('x-ratelimit-limit')])
    }
    expect(answers).toEqual([[200, '3'], [200, '3'], [200, '3'], [429, '3'], [429, '3']])
    const other = await fetch(`${urls[0]}/v1/providers`, { headers: bearer(KEYS.betaManagement) })
    await other.arrayBuffer()
    expect([other.status, other.headers.get('x-ratelimit-limit')]).toEqual([200, '100'])
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
