// prom-client's registry and instruments, each from its own file (plugins/metrics.ts): the package's
// index also loads its default process collectors and OpenTelemetry's API, some 80 modules and
// 40 ms of every start, which only a scrape of /metrics needs. They are the classes the index exports.
declare module 'prom-client/lib/registry.js' {
  import { Registry } from 'prom-client'
  export = Registry
}
declare module 'prom-client/lib/counter.js' {
  import { Counter } from 'prom-client'
  export = Counter
}
declare module 'prom-client/lib/gauge.js' {
  import { Gauge } from 'prom-client'
  export = Gauge
}
