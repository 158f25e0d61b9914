import { once } from 'node:events'
import fp from 'fastify-plugin'
import rateLimit, { normalizeIP } from '@fastify/rate-limit'
import { Redis } from 'ioredis'
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

// OpenRouter's own answer, byte for byte.
const RATE_LIMITED_BODY = JSON.stringify({ error: { code: 429, message: 'Rate limit exceeded', metadata: { error_type: 'rate_limit_exceeded' } } })

interface Window {
  max: number
  remaining: number
  ttlInSeconds: number
  /** This request went over the limit. */
  exceeded: boolean
}

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

  await app.register(rateLimit, {
    global: false,
    ...(redis ? { redis, nameSpace: 'model-gateway-directory:rate-limit:' } : {})
  })

  /** A limiter of `max` a minute; undefined when the store failed (counted, logged). */
  function limiter (max: number, keyOf: (request: FastifyRequest) => string) {
    const check = app.createRateLimit({ max, timeWindow: WINDOW_MS, keyGenerator: keyOf, cache: LOCAL_ENTRIES } as Parameters<typeof app.createRateLimit>[0])
    return async (request: FastifyRequest, increment: boolean): Promise<Window | undefined> => {
      try {
        const result = await check(request, { increment })
        if (result.isAllowed) return undefined
        // A read before the first request of a window reports no window: the whole minute is ahead.
        return { max: result.max, remaining: result.remaining, ttlInSeconds: result.ttlInSeconds || WINDOW_MS / 1000, exceeded: result.isExceeded }
      } catch (err) {
        app.metrics.rateLimitStoreErrors.inc()
        reportStoreDown(err)
        return undefined
      }
    }
  }

  if (anonymousPerMinute > 0) {
    const byAddress = limiter(anonymousPerMinute, (request) => `address:${normalizeIP(request.ip)}`)
    app.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
      const window = await byAddress(request, false)
      // Read, not counted: the budget is spent once `max` requests have failed.
      if (window !== undefined && window.remaining === 0) {
        app.metrics.rateLimitRefusals.inc({ bucket: 'address' })
        return refuse(reply, window)
      }
    })
    // Every failed authentication (401) counts against the address.
    app.addHook('onError', async (request: FastifyRequest, reply: FastifyReply, error: FastifyError) => {
      if (error.statusCode !== 401) return
      const window = await byAddress(request, true)
      if (window !== undefined) setLimitHeaders(reply, window)
    })
  }

  if (perMinute > 0) {
    const byKey = limiter(perMinute, (request) => `key:${request.apiKey!.name}`)
    const limitKey: onRequestHookHandler = async (request, reply) => {
      const window = await byKey(request, true)
      if (window === undefined) return
      if (window.exceeded) {
        app.metrics.rateLimitRefusals.inc({ bucket: 'key' })
        return refuse(reply, window)
      }
      setLimitHeaders(reply, window)
    }
    app.addHook('onRoute', (route) => {
      const own = route.onRequest === undefined ? [] : Array.isArray(route.onRequest) ? route.onRequest : [route.onRequest]
      route.onRequest = [limitKey, ...own]
    })
  }
}

export default fp(rateLimitPlugin, { name: 'rate-limit', dependencies: ['metrics'] })
