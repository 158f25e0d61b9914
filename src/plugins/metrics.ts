import fp from 'fastify-plugin'
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import type { FastifyInstance, FastifyReply, FastifyRequest, onResponseHookHandler } from 'fastify'
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
const DURATION = 'http_request_duration_seconds'

/** The duration histogram's child of one method, route and status. */
type DurationSeries = Histogram.Internal<'method' | 'route' | 'status'>

// CPU, memory, event-loop delay, garbage collection: facts of the process, not of one app. They are
// collected once per process (each collector starts a monitor that nothing stops), whatever number
// of apps a process builds (tests build hundreds), from the first app built with metrics on: the first
// scrape then has event-loop delays to show, where a monitor started by that scrape had none yet.
// Memory is read from the process; garbage collections and event-loop delay are observed from then on
// (prom-client shows the delays since the previous scrape).
let processRegistry: Registry | undefined
function processMetrics () {
  if (processRegistry === undefined) {
    processRegistry = new Registry()
    collectDefaultMetrics({ register: processRegistry })
    cpuSinceStart(processRegistry)
  }
  return processRegistry
}

/**
 * The process's CPU time since it started, as process.cpuUsage() gives it: prom-client's own counters
 * count from when its collector starts, which leaves out the start (modules loaded, data read and
 * checked), most of what a young process has used. Same names and help as prom-client's.
 */
function cpuSinceStart (registry: Registry) {
  for (const name of ['process_cpu_user_seconds_total', 'process_cpu_system_seconds_total', 'process_cpu_seconds_total']) {
    registry.removeSingleMetric(name)
  }
  const system = new Counter({ name: 'process_cpu_system_seconds_total', help: 'Total system CPU time spent in seconds.', registers: [] })
  const total = new Counter({ name: 'process_cpu_seconds_total', help: 'Total user and system CPU time spent in seconds.', registers: [] })
  const user = new Counter({
    name: 'process_cpu_user_seconds_total',
    help: 'Total user CPU time spent in seconds.',
    registers: [],
    // One reading for the three, when the first of them is collected.
    collect () {
      const usage = process.cpuUsage()
      for (const [counter, microseconds] of [[this, usage.user], [system, usage.system], [total, usage.user + usage.system]] as const) {
        counter.reset()
        counter.inc(microseconds / 1e6)
      }
    }
  })
  for (const counter of [user, system, total]) registry.registerMetric(counter)
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
      return `${await processMetrics().metrics()}\n${await registry.metrics()}`
    },
    rateLimitRefusals,
    rateLimitStoreErrors
  })
  if (!enabled) return
  processMetrics()

  const labelNames = ['method', 'route', 'status'] as const
  const duration = new Histogram({
    name: DURATION,
    help: 'Time from the request to its answer, in seconds',
    labelNames,
    buckets: DURATION_BUCKETS,
    registers: [registry]
  })
  new Counter({
    name: 'http_requests_total',
    help: 'Answered requests',
    labelNames,
    registers: [registry],
    // The histogram's counts, read when Prometheus scrapes: one observation per answer, nothing more
    // to do per request.
    async collect () {
      this.reset()
      for (const { metricName, labels, value } of (await duration.get()).values) {
        if (metricName === `${DURATION}_count`) this.inc(labels, value)
      }
    }
  })
  const answersByClass = [0, 0, 0, 0, 0, 0]
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

  /**
   * The histogram's series of one route (its template with its prefix, never the URL), by method then
   * status, each child made once: an answer makes no labels object of its own.
   */
  function routeSeries (route: string) {
    const byMethod = new Map<string, Map<number, DurationSeries>>()
    return (method: string, status: number) => {
      let byStatus = byMethod.get(method)
      if (byStatus === undefined) byMethod.set(method, byStatus = new Map())
      let series = byStatus.get(status)
      if (series === undefined) byStatus.set(status, series = duration.labels(method, route, String(status)))
      return series
    }
  }
  const observe = (series: DurationSeries, reply: FastifyReply) => series.observe(reply.elapsedTime / 1000)

  app.decorateRequest('inFlight', false)
  app.addHook('onRequest', (request: FastifyRequest, _reply: FastifyReply, done: () => void) => {
    request.inFlight = true
    inFlight++
    done()
  })
  const unmatched = routeSeries(UNMATCHED_ROUTE)
  app.addHook('onResponse', (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
    if (request.inFlight) inFlight--
    // Statuses are 100 to 599 (Node.js refuses others).
    answersByClass[Math.floor(reply.statusCode / 100)]!++
    if (request.is404) observe(unmatched(request.method, reply.statusCode), reply)
    done()
  })
  // Each route measures its own answers with its label made once, when the route is declared.
  app.addHook('onRoute', (route) => {
    const seriesOf = routeSeries(route.url)
    const measure: onResponseHookHandler = (request, reply, done) => {
      observe(seriesOf(request.method, reply.statusCode), reply)
      done()
    }
    route.onResponse = route.onResponse === undefined ? [measure] : [...[route.onResponse].flat(), measure]
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
  new Counter({
    name: 'directory_source_read_failures_total',
    help: 'Reads of each kind that failed since start (the source, not the data: a connection cut, a timeout); each is tried again, named records falling back to a whole read',
    labelNames: ['kind'] as const,
    registers: [registry],
    collect () {
      this.reset()
      for (const [kind, count] of Object.entries(snapshots.info().readFailures)) this.inc({ kind }, count)
    }
  })
  new Counter({
    name: 'directory_notices_ignored_total',
    help: 'Notices of change ignored since start, being of no shape the source sends (PostgreSQL: a NOTIFY on the channel by another role)',
    registers: [registry],
    collect () {
      this.reset()
      this.inc(snapshots.info().noticesIgnored)
    }
  })
}

export default fp(metricsPlugin, { name: 'metrics' })
