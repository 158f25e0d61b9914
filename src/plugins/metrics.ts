import fp from 'fastify-plugin'
// The instruments from their own files, the process collectors from the package's index when
// /metrics is first scraped (prom-client-parts.d.ts).
import Counter from 'prom-client/lib/counter.js'
import Gauge from 'prom-client/lib/gauge.js'
import Registry from 'prom-client/lib/registry.js'
import type { Metric } from 'prom-client'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { Snapshots } from '../repositories/lifecycle.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The app's Prometheus instruments; other plugins add theirs to `registry`. */
    metrics: Metrics
  }
  interface FastifyRequest {
    /** Counted in flight by this plugin's onRequest hook (answers Fastify makes before any hook are not). */
    inFlight: boolean
  }
}

interface Metrics {
  registry: Registry
  /** The Prometheus text of the process's metrics, then the app's. */
  render(): Promise<string>
  rateLimitRefusals: Counter<'bucket'>
  rateLimitStoreErrors: Counter
}

/** The route label of a request that matched no route: never the raw URL, which anyone can vary. */
const UNMATCHED_ROUTE = 'unmatched'

// Most answers take tens to hundreds of microseconds: the buckets start at 50 µs.
const DURATION_BUCKETS = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1]

// CPU, memory, event-loop delay, garbage collection: facts of the process, not of one app. They are
// collected once per process (each collector starts a monitor that nothing stops), whatever number
// of apps a process builds (tests build hundreds). They start with the first scrape, as they did
// when prom-client was loaded at start: CPU time and memory are read from the process, garbage
// collections and event-loop delay are observed from then on.
let processRegistry: Promise<Registry> | undefined
function processMetrics () {
  processRegistry ??= import('prom-client').then(({ collectDefaultMetrics }) => {
    const registry = new Registry()
    collectDefaultMetrics({ register: registry })
    return registry
  })
  return processRegistry
}

/** The answers of one method, route and status. */
interface Series {
  labels: { method: string, route: string, status: string }
  /** Answers so far: http_requests_total, and the histogram's count. */
  count: number
  /** Seconds, summed: the histogram's sum. */
  sum: number
  /** Answers per bucket of DURATION_BUCKETS (not cumulative), the last one past the largest bound. */
  buckets: number[]
}

/**
 * http_request_duration_seconds, counted in plain numbers per series and handed to the registry when
 * Prometheus scrapes (prom-client's Metric: name, help, type, get). prom-client's own Histogram checks
 * and hashes the labels on every observe(), a microsecond per request here; the text is the same.
 */
function durationHistogram (series: Iterable<Series>) {
  const name = 'http_request_duration_seconds'
  return {
    name,
    help: 'Time from the request to its answer, in seconds',
    type: 'histogram' as const,
    aggregator: 'sum' as const,
    async get () {
      const values = []
      for (const { labels, count, sum, buckets } of series) {
        let cumulative = 0
        for (const [i, le] of DURATION_BUCKETS.entries()) {
          cumulative += buckets[i]!
          values.push({ metricName: `${name}_bucket`, labels: { le }, sharedLabels: labels, value: cumulative })
        }
        values.push({ metricName: `${name}_bucket`, labels: { le: '+Inf' }, sharedLabels: labels, value: count })
        values.push({ metricName: `${name}_sum`, labels: {}, sharedLabels: labels, value: sum })
        values.push({ metricName: `${name}_count`, labels: {}, sharedLabels: labels, value: count })
      }
      return { name, help: this.help, type: this.type, values, aggregator: this.aggregator }
    }
  }
}

/**
 * Prometheus metrics (prom-client, without fastify-metrics: two hooks of our own cost less per
 * request than its per-route timers, and need no Node.js 22.19). Instruments are always created, so
 * that other plugins can count without asking; with `enabled` false nothing is measured per request.
 */
async function metricsPlugin (app: FastifyInstance, { enabled, snapshots }: { enabled: boolean, snapshots: Snapshots }) {
  const registry = new Registry()
  snapshotMetrics(registry, snapshots)
  const rateLimitRefusals = new Counter({
    name: 'rate_limit_refusals_total',
    help: 'Requests refused with 429, by bucket: key (a valid key over its limit) or address (requests without a valid key)',
    labelNames: ['bucket'] as const,
    registers: [registry]
  })
  const rateLimitStoreErrors = new Counter({
    name: 'rate_limit_store_errors_total',
    help: 'Requests served without a rate-limit check because the shared counter store (Redis) failed',
    registers: [registry]
  })
  app.decorate('metrics', {
    registry,
    async render () {
      return `${await (await processMetrics()).metrics()}\n${await registry.metrics()}`
    },
    rateLimitRefusals,
    rateLimitStoreErrors
  })
  if (!enabled) return

  // Plain numbers per request, handed to prom-client when Prometheus scrapes: its inc() and observe()
  // hash and check the labels on every call. Series by route, then method, then status: the route
  // and method strings are the same objects on every request, so no key is built per request.
  const series: Series[] = []
  const seriesByRoute = new Map<string, Map<string, Map<number, Series>>>()
  const answersByClass = [0, 0, 0, 0, 0, 0]
  const labelNames = ['method', 'route', 'status'] as const
  new Counter({
    name: 'http_requests_total',
    help: 'Answered requests',
    labelNames,
    registers: [registry],
    collect () {
      this.reset()
      for (const { labels, count } of series) this.inc(labels, count)
    }
  })
  registry.registerMetric(durationHistogram(series) as unknown as Metric)
  new Counter({
    name: 'http_responses_total',
    help: 'Answers by status class (2xx, 3xx, 4xx, 5xx)',
    labelNames: ['class'] as const,
    registers: [registry],
    collect () {
      this.reset()
      answersByClass.forEach((count, hundreds) => { if (count > 0) this.inc({ class: `${hundreds}xx` }, count) })
    }
  })
  let inFlight = 0
  new Gauge({
    name: 'http_requests_in_flight',
    help: 'Requests received and not yet answered',
    registers: [registry],
    collect () { this.set(inFlight) }
  })

  function seriesOf (method: string, route: string, status: number): Series {
    let byMethod = seriesByRoute.get(route)
    if (byMethod === undefined) seriesByRoute.set(route, byMethod = new Map())
    let byStatus = byMethod.get(method)
    if (byStatus === undefined) byMethod.set(method, byStatus = new Map())
    let found = byStatus.get(status)
    if (found === undefined) {
      found = { labels: { method, route, status: String(status) }, count: 0, sum: 0, buckets: new Array(DURATION_BUCKETS.length + 1).fill(0) }
      byStatus.set(status, found)
      series.push(found)
    }
    return found
  }

  function observe (found: Series, seconds: number) {
    found.count++
    found.sum += seconds
    let bucket = 0
    while (bucket < DURATION_BUCKETS.length && seconds > DURATION_BUCKETS[bucket]!) bucket++
    found.buckets[bucket]!++
  }

  app.decorateRequest('inFlight', false)
  app.addHook('onRequest', (request: FastifyRequest, _reply: FastifyReply, done: () => void) => {
    request.inFlight = true
    inFlight++
    done()
  })
  app.addHook('onResponse', (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
    if (request.inFlight) inFlight--
    const status = reply.statusCode
    // The route's template with its prefix (`/v1/organization/members`), never the URL itself.
    const found = seriesOf(request.method, request.routeOptions.url ?? UNMATCHED_ROUTE, status)
    observe(found, reply.elapsedTime / 1000)
    // Statuses are 100 to 599 (Node.js refuses others).
    answersByClass[Math.floor(status / 100)]!++
    done()
  })
}

/** The data served, read from the lifecycle when Prometheus scrapes: nothing to do per request or per change. */
function snapshotMetrics (registry: Registry, snapshots: Snapshots) {
  new Gauge({
    name: 'directory_snapshot_info',
    help: 'The snapshot served: its source (files or postgres) and its fingerprint, equal on replicas that serve the same data; always 1',
    labelNames: ['source', 'fingerprint'] as const,
    registers: [registry],
    collect () {
      const { source, fingerprint } = snapshots.info()
      this.reset()
      this.set({ source, fingerprint }, 1)
    }
  })
  new Gauge({
    name: 'directory_snapshot_version',
    help: 'The version of the snapshot served: 1 at start, one more for each change installed',
    registers: [registry],
    collect () { this.set(snapshots.info().version) }
  })
  new Gauge({
    name: 'directory_snapshot_loaded_timestamp_seconds',
    help: 'When the snapshot served was installed, in seconds since the epoch',
    registers: [registry],
    collect () { this.set(snapshots.info().loadedAt / 1000) }
  })
  new Gauge({
    name: 'directory_source_up',
    help: 'Whether changes of the source are followed (the PostgreSQL connection is up, the data folder exists): 1 or 0',
    registers: [registry],
    collect () { this.set(snapshots.info().following ? 1 : 0) }
  })
  new Gauge({
    name: 'directory_records',
    help: 'Records of each kind in the snapshot served (members: of all organizations)',
    labelNames: ['kind'] as const,
    registers: [registry],
    collect () {
      for (const [kind, count] of Object.entries(snapshots.info().records)) this.set({ kind }, count)
    }
  })
  new Counter({
    name: 'directory_reloads_total',
    help: 'Changes of each kind since start: installed (succeeded) or refused, the last good records serving on (failed)',
    labelNames: ['kind', 'outcome'] as const,
    registers: [registry],
    collect () {
      this.reset()
      for (const [kind, { succeeded, failed }] of Object.entries(snapshots.info().reloads)) {
        this.inc({ kind, outcome: 'succeeded' }, succeeded)
        this.inc({ kind, outcome: 'failed' }, failed)
      }
    }
  })
}

export default fp(metricsPlugin, { name: 'metrics' })
