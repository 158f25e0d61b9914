import { once } from 'node:events'
import fp from 'fastify-plugin'
import { normalizeIP } from '@fastify/rate-limit'
import { memoize } from '../memoize.js'
import LocalStore from '@fastify/rate-limit/store/LocalStore.js'
import RedisStore from '@fastify/rate-limit/store/RedisStore.js'
import type { Redis } from 'ioredis'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'

interface RateLimitOptions {
  /** Requests a minute per key; 0: no limit. */
  perMinute: number
  /** Requests without a valid key a minute per client address; 0: no limit. */
  anonymousPerMinute: number
  /** Counters in this Redis, shared by every replica that names it; in memory otherwise. */
  redisUrl?: string | undefined
}

const WINDOW_MS = 60_000
// Keys (or addresses) counted at once per replica with the in-memory store, least recently seen
// dropped first: 10,000 entries are a few MB.
const LOCAL_ENTRIES = 10_000
// A request waits at most this long for Redis before it is served unlimited.
const REDIS_TIMEOUT_MS = 250
const REDIS_NAMESPACE = 'model-gateway-directory:rate-limit:'

// OpenRouter's own answer, byte for byte.
const RATE_LIMITED_BODY = JSON.stringify({ error: { code: 429, message: 'Rate limit exceeded', metadata: { error_type: 'rate_limit_exceeded' } } })

interface Window {
  max: number
  remaining: number
  ttlInSeconds: number
  /** This request went over the limit. */
  exceeded: boolean
}

// Client addresses normalized (an IPv6 address to its /64, as @fastify/rate-limit counts them), each
// once: normalizeIP runs an IPv6 regular expression, and this check runs on every request.
const addressOf = memoize((ip) => normalizeIP(ip), 10_000)

function setLimitHeaders (reply: FastifyReply, { max, remaining, ttlInSeconds }: Window) {
  reply.header('x-ratelimit-limit', max)
  reply.header('x-ratelimit-remaining', remaining)
  reply.header('x-ratelimit-reset', ttlInSeconds)
}

function refuse (reply: FastifyReply, window: Window) {
  setLimitHeaders(reply, { ...window, remaining: 0 })
  return reply.code(429).header('retry-after', window.ttlInSeconds).type('application/json; charset=utf-8').send(RATE_LIMITED_BODY)
}

/**
 * Rate limits with @fastify/rate-limit's counters (in memory, or in Redis shared by the replicas),
 * in two buckets, fixed windows of a minute:
 * - per key, after authentication (a hook at the front of each route's own onRequest hooks, which
 *   run after the scope's: auth has resolved the key by then); the key's name is the counter, never
 *   the key or its hash;
 * - per client address, for requests without a valid key. Its check runs before the key is hashed
 *   (this plugin is registered before auth), so that a flood of made-up keys is refused without a
 *   SHA-256 each; a request is counted there once authentication has failed, so that clients behind
 *   one address (a NAT) with valid keys do not share an anonymous budget.
 * Redis unreachable: requests are served without a limit (fail open), the failure is counted and
 * logged once per outage, and shared counting resumes when the connection returns.
 */
async function rateLimitPlugin (app: FastifyInstance, { perMinute, anonymousPerMinute, redisUrl }: RateLimitOptions) {
  if (perMinute === 0 && anonymousPerMinute === 0) return

  let redis: Redis | undefined
  let storeDown = false
  const reportStoreDown = (err: unknown) => {
    if (storeDown) return
    storeDown = true
    app.log.warn({ err }, 'rate-limit store (Redis) unavailable: serving without limits until it returns')
  }
  if (redisUrl) {
    // Loaded only when asked for: ioredis costs its start-up time to every server that has no Redis.
    const { Redis } = await import('ioredis')
    redis = new Redis(redisUrl, {
      // Fail fast instead of queueing while disconnected: the request is served (fail open), and
      // ioredis keeps reconnecting in the background.
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout: REDIS_TIMEOUT_MS,
      // The commands of the requests of one tick go out in one round trip.
      enableAutoPipelining: true
    })
    redis.on('error', reportStoreDown)
    redis.on('ready', () => {
      if (!storeDown) return
      storeDown = false
      app.log.info('rate-limit store (Redis) reachable again: limits shared again')
    })
    // Start counting with the first request when Redis is there; start anyway (unlimited) when not.
    app.addHook('onReady', async () => {
      if (redis!.status !== 'ready') await Promise.race([once(redis!, 'ready'), once(redis!, 'error')]).catch(() => {})
    })
    app.addHook('onClose', async () => { redis!.disconnect() })
  }

  // One store per bucket, created as @fastify/rate-limit's plugin creates them, but called from
  // callback hooks: in memory the count is answered at once, where the plugin's createRateLimit puts
  // a chain of promises (and a turn of the microtask queue) on every request.
  const storeOf = (bucket: string): LocalStore | RedisStore => redis
    ? new RedisStore(false, false, redis, `${REDIS_NAMESPACE}${bucket}:`)
    : new LocalStore(false, false, LOCAL_ENTRIES)

  /** A limiter of `max` a minute: answers the window, or undefined when the store failed (counted, logged). */
  function limiter (max: number, bucket: string, keyOf: (request: FastifyRequest) => string) {
    const store = storeOf(bucket)
    return (request: FastifyRequest, increment: boolean, done: (window: Window | undefined) => void) => {
      const answer = (err: Error | null, count: { current: number, ttl: number }) => {
        if (err) {
          app.metrics.rateLimitStoreErrors.inc()
          reportStoreDown(err)
          return done(undefined)
        }
        // A read before the first request of a window reports no window: the whole minute is ahead.
        done({ max, remaining: Math.max(0, max - count.current), ttlInSeconds: Math.ceil(count.ttl / 1000) || WINDOW_MS / 1000, exceeded: count.current > max })
      }
      if (increment) store.incr(keyOf(request), answer, WINDOW_MS, max)
      else store.read(keyOf(request), answer, WINDOW_MS, max)
    }
  }

  if (anonymousPerMinute > 0) {
    const byAddress = limiter(anonymousPerMinute, 'address', (request) => addressOf(request.ip))
    app.addHook('onRequest', (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
      byAddress(request, false, (window) => {
        // Read, not counted: the budget is spent once `max` requests have failed.
        if (window === undefined || window.remaining > 0) return done()
        app.metrics.rateLimitRefusals.inc({ bucket: 'address' })
        refuse(reply, window)
      })
    })
    // Every failed authentication (401) counts against the address.
    app.addHook('onError', (request: FastifyRequest, reply: FastifyReply, error: FastifyError, done: () => void) => {
      if (error.statusCode !== 401) return done()
      byAddress(request, true, (window) => {
        if (window !== undefined) setLimitHeaders(reply, window)
        done()
      })
    })
  }

  if (perMinute > 0) {
    const byKey = limiter(perMinute, 'key', (request) => request.apiKey!.name)
    const limitKey: onRequestHookHandler = (request, reply, done) => {
      byKey(request, true, (window) => {
        if (window === undefined) return done()
        if (window.exceeded) {
          app.metrics.rateLimitRefusals.inc({ bucket: 'key' })
          return refuse(reply, window)
        }
        setLimitHeaders(reply, window)
        done()
      })
    }
    app.addHook('onRoute', (route) => {
      const own = route.onRequest === undefined ? [] : Array.isArray(route.onRequest) ? route.onRequest : [route.onRequest]
      route.onRequest = [limitKey, ...own]
    })
  }
}

export default fp(rateLimitPlugin, { name: 'rate-limit', dependencies: ['metrics'] })
