import { createRequire } from 'node:module'
import type * as PromClient from 'prom-client'

// prom-client's parts that we use, each from its own module rather than from the package's index: the
// index loads the whole library at every start, its push-gateway client with node:https and TLS, and
// its CPU counters with OpenTelemetry's API, none of which we use (metrics.ts counts the CPU itself):
// most of what prom-client cost a start (docs/performance.md, "Start-up"). test/plugins/prometheus.test.ts
// holds these parts equal to the index's, and fails on the upgrade that moves them.
const load = createRequire(import.meta.url)

export const Registry = load('prom-client/lib/registry') as typeof PromClient.Registry
export type Registry = PromClient.Registry
export const Counter = load('prom-client/lib/counter') as typeof PromClient.Counter
export type Counter<T extends string = string> = PromClient.Counter<T>
export const Gauge = load('prom-client/lib/gauge') as typeof PromClient.Gauge
export type Gauge<T extends string = string> = PromClient.Gauge<T>

/**
 * The modules of prom-client's default metrics (its collectDefaultMetrics's metricsList) but its CPU
 * counters, in its order. processResources needs process.getActiveResourcesInfo, which every
 * Node.js this server runs on has.
 */
export const DEFAULT_METRICS = [
  'processStartTime', 'osMemoryHeap', 'processOpenFileDescriptors', 'processMaxFileDescriptors', 'eventLoopLag',
  'processResources', 'processHandles', 'processRequests', 'heapSizeAndUsed', 'heapSpacesSizeAndUsed', 'version', 'gc'
] as const

// Loaded with this module, as the index would: a start loads them anyway, and the image's compile
// cache (src/cli/compile-cache.ts) holds what loading the modules loads.
const defaultMetrics = DEFAULT_METRICS.map((name) => load(`prom-client/lib/metrics/${name}`) as (registry: Registry, config: object) => void)

/** prom-client's collectDefaultMetrics with its defaults, without its CPU counters (metrics.ts has its own). */
export function collectDefaultMetrics (register: Registry) {
  for (const collect of defaultMetrics) collect(register, { eventLoopMonitoringPrecision: 10 })
}
