import { once } from 'node:events'
import { isIP, isIPv6 } from 'node:net'
import { Gauge } from './prometheus.js'
import type { Redis } from 'ioredis'
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'
import { apiKeyOf, type RefusalLimit } from './auth.js'
import { memoize } from '../memoize.js'

interface RateLimitOptions {
  /** Requests a minute per key without a limit of its own; 0: no limit. */
  perMinute: number
  /** Requests without a valid key a minute per client address; 0: no limit. */
  anonymousPerMinute: number
  /** Counters in this Redis, shared by every replica that names it; in memory otherwise. */
  redisUrl?: string | undefined
}

const WINDOW_MS = 60_000
// Counters kept at once per replica in memory, the oldest dropped first: a few MB.
const LOCAL_ENTRIES = 10_000
// A request waits at most this long for Redis before it is served unlimited.
const REDIS_TIMEOUT_MS = 250
// After a timeout or an error Redis is left alone this long, doubling at each failed probe up to
// the maximum: a stalled Redis costs a few requests its timeout, not every request.
const BACKOFF_MIN_MS = 1000
const BACKOFF_MAX_MS = 30_000
const REDIS_NAMESPACE = 'model-gateway-directory:rate-limit:'

// OpenRouter's own answer, byte for byte.
const RATE_LIMITED_BODY = JSON.stringify({ error: { code: 429, message: 'Rate limit exceeded', metadata: { error_type: 'rate_limit_exceeded' } } })

/** A counter's window: hits so far, and when it starts again (ms since the epoch). */
interface Count {
  current: number
  resetAt: number
}

/** Counts one more hit: at once in memory, after a round trip in Redis; undefined when not counted. */
type Counter = (id: string) => Count | Promise<Count | undefined> | undefined

/** Fixed windows of a minute in a Map, which keeps its keys in insertion order: the oldest go first. */
function memoryCounter (): Counter {
  const windows = new Map<string, Count>()
  return (id) => {
    const now = Date.now()
    let count = windows.get(id)
    if (count === undefined || count.resetAt <= now) {
      if (count !== undefined) windows.delete(id)
      else if (windows.size >= LOCAL_ENTRIES) windows.delete(windows.keys().next().value!)
      count = { current: 0, resetAt: now + WINDOW_MS }
      windows.set(id, count)
    }
    count.current++
    return count
  }
}

// One round trip: the count, and the window's end (set with the first hit).
const INCREMENT_SCRIPT = `
local current = redis.call('INCR', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  ttl = tonumber(ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return { current, ttl }`

type CountingRedis = Redis & { countHit(key: string, windowMs: number): Promise<[number, number]> }

/**
 * Redis behind a circuit breaker. Closed: every hit is a round trip. After a timeout or an error it
 * opens: hits are not counted (the request is served, fail open) for a back-off period; then one
 * hit probes, and its answer closes the breaker or opens it again for twice as long. A reconnection
 * closes it at once.
 */
function redisCounter (app: FastifyInstance, redis: CountingRedis): Counter {
  let openUntil = 0
  let backoff = BACKOFF_MIN_MS
  let probing = false
  let announced = false
  const available = new Gauge({
    name: 'rate_limit_store_available',
    help: 'Whether the rate limits ask Redis (1), or serve without it while its circuit breaker is open after a timeout or an error (0)',
    registers: [app.metrics.registry]
  })
  available.set(1)

  const close = () => {
    openUntil = 0
    backoff = BACKOFF_MIN_MS
    probing = false
    available.set(1)
    if (!announced) return
    announced = false
    app.log.info('rate-limit store (Redis) reachable again: limits shared again')
  }
  const open = (err: unknown) => {
    // The hits already in flight when it opened fail too: only the first, or a probe, counts.
    if (openUntil !== 0 && !probing) return
    if (probing) backoff = Math.min(backoff * 2, BACKOFF_MAX_MS)
    openUntil = Date.now() + backoff
    probing = false
    available.set(0)
    if (announced) return
    announced = true
    app.log.warn({ err }, 'rate-limit store (Redis) unavailable: serving without limits until it returns')
  }
  redis.on('error', open)
  redis.on('ready', close)

  const answered = ([current, ttl]: [number, number]): Count => {
    if (probing) close()
    return { current, resetAt: Date.now() + ttl }
  }
  const failed = (err: unknown) => {
    app.metrics.rateLimitStoreErrors.inc()
    open(err)
    return undefined
  }
  return (id) => {
    if (openUntil !== 0) {
      if (probing || Date.now() < openUntil) {
        app.metrics.rateLimitStoreErrors.inc()
        return undefined
      }
      probing = true
    }
    return redis.countHit(`${REDIS_NAMESPACE}${id}`, WINDOW_MS).then(answered, failed)
  }
}

async function connectRedis (app: FastifyInstance, url: string): Promise<CountingRedis> {
  // Loaded only when asked for: ioredis costs its start-up time to every server that has no Redis.
  const { Redis } = await import('ioredis')
  const redis = new Redis(url, {
    // Fail fast instead of queueing while disconnected: the request is served (fail open), and
    // ioredis keeps reconnecting in the background.
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: REDIS_TIMEOUT_MS,
    // The commands of the requests of one tick go out in one round trip.
    enableAutoPipelining: true
  })
  redis.defineCommand('countHit', { numberOfKeys: 1, lua: INCREMENT_SCRIPT })
  // Start counting with the first request when Redis is there; start anyway (unlimited) when not.
  app.addHook('onReady', async () => {
    if (redis.status !== 'ready') await Promise.race([once(redis, 'ready'), once(redis, 'error')]).catch(() => {})
  })
  app.addHook('onClose', async () => { redis.disconnect() })
  return redis as CountingRedis
}

/**
 * Answers with the window's three headers, and with a 429 once it is over `max`; true when the
 * request may go on.
 */
function enforce (reply: FastifyReply, limit: string, max: number, { current, resetAt }: Count): boolean {
  const reset = Math.max(1, Math.ceil((resetAt - Date.now()) / 1000))
  reply.header('x-ratelimit-limit', limit)
  reply.header('x-ratelimit-remaining', Math.max(0, max - current))
  reply.header('x-ratelimit-reset', reset)
  if (current <= max) return true
  reply.code(429).header('retry-after', reset).type('application/json; charset=utf-8').send(RATE_LIMITED_BODY)
  return false
}

/** The eight 16-bit groups of an IPv6 address that isIPv6() accepts (its zone, if any, left out). */
function ipv6Groups (address: string): number[] {
  const groupsOf = (part: string) => part === ''
    ? []
    : part.split(':').flatMap((group) => {
      if (!group.includes('.')) return [parseInt(group, 16)]
      // An IPv4 address in the last 32 bits (::ffff:192.0.2.1).
      const [a, b, c, d] = group.split('.').map(Number) as [number, number, number, number]
      return [a << 8 | b, c << 8 | d]
    })
  const [head = '', tail] = address.split('%', 1)[0]!.split('::')
  const start = groupsOf(head)
  const end = tail === undefined ? [] : groupsOf(tail)
  return [...start, ...new Array<number>(8 - start.length - end.length).fill(0), ...end]
}

/**
 * The name a client address is counted by. An IPv6 client usually holds a whole /64 and could use a
 * new address for each request: it is counted by its /64, written as RFC 5952 writes it, so that every
 * spelling of it is one counter. An IPv4 address mapped into IPv6 (::ffff:192.0.2.1, as a dual-stack
 * socket gives it) is that IPv4 address.
 */
function addressName (ip: string): string {
  if (!isIPv6(ip)) return ip
  const groups = ipv6Groups(ip)
  if (groups.slice(0, 5).every((group) => group === 0) && groups[5] === 0xffff) {
    return [groups[6]! >> 8, groups[6]! & 255, groups[7]! >> 8, groups[7]! & 255].join('.')
  }
  // The /64 keeps the first four groups: the four zeros after them are the longest run of zeros,
  // which "::" stands for, with any zeros just before them.
  const prefix = groups.slice(0, 4)
  while (prefix.at(-1) === 0) prefix.pop()
  return `${prefix.map((group) => group.toString(16)).join(':')}::`
}

// Each address named once: this runs for every request without a valid key.
const addressNameOf = memoize(addressName, LOCAL_ENTRIES)

/**
 * The address a request without a valid key is counted by: the client's address as TRUST_PROXY's
 * proxies give it (request.ip), when it is an IP address; the connection's otherwise. A value of
 * X-Forwarded-For that is not an address (garbage, a port, a 15 KB string) neither frames another
 * client nor buys a new budget, and a counter's name is never longer than an address.
 */
function clientAddressOf (request: FastifyRequest): string {
  const ip = request.ip
  return addressNameOf(isIP(ip) !== 0 ? ip : request.socket.remoteAddress ?? '')
}

/**
 * Rate limits, fixed windows of a minute, one counter a request, so at most one round trip to Redis:
 * - a valid key counts against its own limit only (its name is the counter, never the key or its
 *   hash): `limitKey`, a hook the scope registers after auth;
 * - a request without a valid key counts against its client address: `limitRefusals`, which auth
 *   calls before its 401, and which answers 429 instead once the address has spent its budget.
 *   Clients with valid keys behind the same address (a NAT) are never refused for it.
 * Counters live in memory (per replica) or in Redis (shared); Redis unreachable or slow: requests
 * are served without a limit (fail open) behind a circuit breaker, counted and logged once per outage.
 */
export async function createRateLimits (app: FastifyInstance, { perMinute, anonymousPerMinute, redisUrl }: RateLimitOptions) {
  const count = redisUrl ? redisCounter(app, await connectRedis(app, redisUrl)) : memoryCounter()
  const { rateLimitRefusals } = app.metrics

  let limitRefusals: RefusalLimit | undefined
  if (anonymousPerMinute > 0) {
    const limit = String(anonymousPerMinute)
    const answer = (reply: FastifyReply, refusal: Error, refuse: (error: Error) => void, counted: Count | undefined) => {
      if (counted === undefined || enforce(reply, limit, anonymousPerMinute, counted)) refuse(refusal)
      else rateLimitRefusals.inc({ bucket: 'address' })
    }
    limitRefusals = (request, reply, refusal, refuse) => {
      const counted = count(`address:${clientAddressOf(request)}`)
      if (counted instanceof Promise) void counted.then((settled) => answer(reply, refusal, refuse, settled))
      else answer(reply, refusal, refuse, counted)
    }
  }

  // A key's own limit (rate_limit_per_minute) replaces perMinute for it, even where perMinute is 0.
  const defaultLimit = String(perMinute)
  const answer = (reply: FastifyReply, done: () => void, max: number, counted: Count | undefined) => {
    if (counted === undefined || enforce(reply, max === perMinute ? defaultLimit : String(max), max, counted)) done()
    else rateLimitRefusals.inc({ bucket: 'key' })
  }
  const limitKey: onRequestHookHandler = (request, reply, done) => {
    const key = apiKeyOf(request)
    const max = key.rate_limit_per_minute ?? perMinute
    if (max === 0) return done()
    const counted = count(`key:${key.name}`)
    if (counted instanceof Promise) void counted.then((settled) => answer(reply, done, max, settled))
    else answer(reply, done, max, counted)
  }
  return { limitRefusals, limitKey }
}
