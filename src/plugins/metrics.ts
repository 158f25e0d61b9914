import fp from 'fastify-plugin'
import { Counter, Gauge, Registry, collectDefaultMetrics } from './prometheus.js'
import type { FastifyInstance, FastifyReply, FastifyRequest, onResponseHookHandler } from 'fastify'
import type { Snapshots } from '../repositories/lifecycle.js'
import type { PageCache } from '../representation.js'

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
    collectDefaultMetrics(processRegistry)
    cpuSinceStart(processRegistry)
  }
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

/** A label value in the text format: backslash, double quote and line feed escaped. */
const labelValue = (value: string) => value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')

/**
 * http_request_duration_seconds in Prometheus's text exposition format, from plain numbers counted
 * per series: prom-client's Histogram checks and hashes the labels on every observe(), and its
 * registry takes no series counted elsewhere but through a method it does not publish.
 */
function durationText (series: Iterable<Series>): string {
  let text = `# HELP ${DURATION} Time from the request to its answer, in seconds\n# TYPE ${DURATION} histogram\n`
  for (const { labels, count, sum, buckets } of series) {
    const shared = `method="${labelValue(labels.method)}",route="${labelValue(labels.route)}",status="${labels.status}"`
    let cumulative = 0
    for (const [i, le] of DURATION_BUCKETS.entries()) {
      cumulative += buckets[i]!
      text += `${DURATION}_bucket{le="${le}",${shared}} ${cumulative}\n`
    }
    text += `${DURATION}_bucket{le="+Inf",${shared}} ${count}\n${DURATION}_sum{${shared}} ${sum}\n${DURATION}_count{${shared}} ${count}\n`
  }
  return text
}

/**
 * The process's CPU time since it started, as process.cpuUsage() gives it: prom-client's own counters
 * count from when its collector starts, which leaves out the start (modules loaded, data read and
 * checked), most of what a young process has used. Same names and help as prom-client's.
 */
function cpuSinceStart (registry: Registry) {
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
async function metricsPlugin (app: FastifyInstance, { enabled, snapshots, maxStalenessMs, pages }: { enabled: boolean, snapshots: Snapshots, maxStalenessMs?: number | undefined, pages: Pick<PageCache, 'usage'> }) {
  const registry = new Registry()
  snapshotMetrics(registry, snapshots, maxStalenessMs)
  pageCacheMetrics(registry, pages)
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
  // Plain numbers per request, handed to prom-client when Prometheus scrapes: its inc() and observe()
  // hash and check the labels on every call.
  const series: Series[] = []
  app.decorate('metrics', {
    registry,
    async render () {
      const text = `${await processMetrics().metrics()}\n${await registry.metrics()}`
      return enabled ? `${text}\n${durationText(series)}` : text
    },
    rateLimitRefusals,
    rateLimitStoreErrors
  })
  if (!enabled) return
  processMetrics()

  const answersByClass = [0, 0, 0, 0, 0, 0]
  new Counter({
    name: 'http_requests_total',
    help: 'Answered requests',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
    collect () {
      this.reset()
      for (const { labels, count } of series) this.inc(labels, count)
    }
  })
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
  gauge(registry, 'http_requests_in_flight', 'Requests received and not yet answered', () => inFlight)

  /** The series of one route (its template with its prefix, never the URL), by method then status, made once each. */
  function routeSeries (route: string) {
    const byMethod = new Map<string, Map<number, Series>>()
    return (method: string, status: number): Series => {
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
  }

  function observe (found: Series, reply: FastifyReply) {
    const seconds = reply.elapsedTime / 1000
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

/**
 * A gauge of what `read` gives at the scrape, and no sample where it gives nothing (files, or not
 * known): the plain numbers are read when Prometheus scrapes, nothing is done per request or per change.
 */
function gauge (registry: Registry, name: string, help: string, read: () => number | undefined) {
  new Gauge({
    name,
    help,
    registers: [registry],
    collect () {
      const value = read()
      if (value === undefined) this.remove()
      else this.set(value)
    }
  })
}

/** A counter of the total `read` gives at the scrape. */
function counter (registry: Registry, name: string, help: string, read: () => number) {
  new Counter({
    name,
    help,
    registers: [registry],
    collect () {
      this.reset()
      this.inc(read())
    }
  })
}

/** How full the cache of member pages is (representation.ts). */
function pageCacheMetrics (registry: Registry, pages: Pick<PageCache, 'usage'>) {
  gauge(registry, 'directory_page_cache_pages',
    'Member pages kept as they are sent (their bodies in each coding sent, tags and headers), the least recently used out first',
    () => pages.usage.pages)
  gauge(registry, 'directory_page_cache_bytes',
    'Bytes counted for the member pages kept: their bodies, and 1.5 KiB for the objects of each answer kept (one a coding asked for); at most 16 MiB',
    () => pages.usage.bytes)
}

/** The data served, read from the lifecycle. */
function snapshotMetrics (registry: Registry, snapshots: Snapshots, maxStalenessMs: number | undefined) {
  gauge(registry, 'directory_data_unconfirmed_seconds',
    'Seconds since the data served was last confirmed current (the start of the last read of the source that succeeded)',
    () => Math.max(0, Date.now() - snapshots.confirmedAt()) / 1000)
  // Only where it is set: the alert compares the two.
  if (maxStalenessMs !== undefined) {
    gauge(registry, 'directory_data_max_staleness_seconds',
      'MAX_STALENESS_MS in seconds: past it without the data confirmed current, keyed requests are refused (503)',
      () => maxStalenessMs / 1000)
  }
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
  gauge(registry, 'directory_snapshot_version', 'The version of the snapshot served: 1 at start, one more for each change installed',
    () => snapshots.info().version)
  gauge(registry, 'directory_snapshot_installed_timestamp_seconds', 'When the snapshot served was installed, in seconds since the epoch',
    () => snapshots.info().installedAt / 1000)
  gauge(registry, 'directory_source_up',
    'Whether changes of the source are followed (the PostgreSQL connection is up, the data folder exists): 1 or 0',
    () => snapshots.info().following ? 1 : 0)
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
    name: 'directory_changes_total',
    help: 'Changes of each kind since start: installed (succeeded) or refused (failed: a file keeps its last good records, a record refused alone in PostgreSQL is not served)',
    labelNames: ['kind', 'outcome'] as const,
    registers: [registry],
    collect () {
      this.reset()
      for (const [kind, { succeeded, failed }] of Object.entries(snapshots.info().changes)) {
        this.inc({ kind, outcome: 'succeeded' }, succeeded)
        this.inc({ kind, outcome: 'failed' }, failed)
      }
    }
  })
  counter(registry, 'directory_source_read_failures_total',
    'Reads of changes that failed since start (the source, not the data: a connection cut, a timeout); each is tried again, from the same position',
    () => snapshots.info().readFailures)
  // No sample rather than a 0 that would read as a horizon.
  const HORIZON_HELP = 'PostgreSQL: the transaction horizon of the snapshot served (the xmax of the database snapshot it was read at, a 64-bit transaction id), comparable between replicas of one database; absent with files'
  gauge(registry, 'directory_source_horizon', HORIZON_HELP, () => snapshots.info().horizon)
  // Its name in 1.0, kept until 2.0 (a removed metric breaks the dashboards and alerts built on it).
  gauge(registry, 'directory_source_position', `Deprecated: renamed directory_source_horizon, removed in 2.0. ${HORIZON_HELP}`, () => snapshots.info().horizon)
  gauge(registry, 'directory_source_lag_entries',
    'Entries of the change log committed and not yet installed by this replica, as of the scrape: 0 when caught up or unknown',
    () => snapshots.info().lag.entries)
  gauge(registry, 'directory_source_lag_seconds',
    'Age in seconds of the oldest entry of the change log this replica has not installed yet, as of the scrape: 0 when caught up or unknown',
    () => snapshots.info().lag.seconds)
  gauge(registry, 'directory_source_replay_lag_seconds',
    'PostgreSQL: how far the database read is behind its primary, as last read (a hot standby\'s replay lag, counted against MAX_STALENESS_MS); 0 on a primary; absent with files or when it cannot be told',
    () => snapshots.info().replayLagSeconds)
  gauge(registry, 'directory_source_clock_offset_seconds',
    'PostgreSQL: the database\'s clock minus this replica\'s, as last measured; keys expire on the database\'s time; 0 with files',
    () => snapshots.info().clockOffsetSeconds)
  gauge(registry, 'directory_source_oldest_transaction_seconds',
    'PostgreSQL: how long the oldest transaction in progress has been seen open by this replica (it holds the change log\'s cut back: idle_in_transaction_session_timeout ends it); 0 when none',
    () => snapshots.info().oldestOpenSeconds)
  counter(registry, 'directory_source_relists_total',
    'Times every kind was read whole since start because the changes since the position could not be told: a failover, a restore, another database, a trimmed log',
    () => snapshots.info().relists)
  new Gauge({
    name: 'directory_source_mode',
    help: 'How changes of the source are followed: notify (PostgreSQL, woken by NOTIFY), poll (PostgreSQL, the log read every POLL_INTERVAL_MS), watch (files); 1 for the mode in use, the only series',
    labelNames: ['mode'] as const,
    registers: [registry],
    collect () {
      this.reset()
      this.set({ mode: snapshots.info().mode }, 1)
    }
  })
}

export default fp(metricsPlugin, { name: 'metrics' })
