import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { KEYS, bearer, build, captureLogs, makeData, makeProvider, sha256, snapshotsOf } from '../helper.js'
import { BUNDLED_MANAGEMENT_KEY, startServer } from '../process.js'

/** The value of one series in the Prometheus text, or undefined. */
function valueOf (text: string, series: string): number | undefined {
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${series} `))
  return line === undefined ? undefined : Number(line.slice(series.length + 1))
}

/** The sample lines of one metric in the Prometheus text, labels and value. */
function series (text: string, name: string): string[] {
  return text.split('\n').filter((line) => line.startsWith(`${name} `) || line.startsWith(`${name}{`))
}

describe('GET /metrics', () => {

  it('answers the Prometheus text format without a key', async () => {
    const app = build()
    const res = await app.inject({ url: '/metrics', headers: { authorization: 'Bearer nope' } })
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toBe('text/plain; version=0.0.4; charset=utf-8')
    expect(res.body).toContain('# TYPE http_requests_total counter')
    expect(res.body).toContain('# TYPE http_request_duration_seconds histogram')
  })

  it('counts requests by method, route template with its prefix, and status; unknown paths under one route', async () => {
    const app = build()
    for (let i = 0; i < 2; i++) await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })
    await app.inject({ url: '/v1/organization/members?offset=3&limit=2', headers: bearer(KEYS.alphaManagement) })
    await app.inject({ url: '/v1/providers' })
    await app.inject({ method: 'HEAD', url: '/v1/endpoints/zdr', headers: bearer(KEYS.alphaStandard) })
    await app.inject({ url: '/no/such/path' })
    await app.inject({ url: '/v1/providers/secret-looking-path' })
    const text = (await app.inject({ url: '/metrics' })).body

    expect(valueOf(text, 'http_requests_total{method="GET",route="/v1/providers",status="200"}')).toBe(2)
    expect(valueOf(text, 'http_requests_total{method="GET",route="/v1/providers",status="401"}')).toBe(1)
    expect(valueOf(text, 'http_requests_total{method="GET",route="/v1/organization/members",status="200"}')).toBe(1)
    expect(valueOf(text, 'http_requests_total{method="HEAD",route="/v1/endpoints/zdr",status="200"}')).toBe(1)
    expect(valueOf(text, 'http_requests_total{method="GET",route="unmatched",status="404"}')).toBe(2)
    expect(valueOf(text, 'http_request_duration_seconds_count{method="GET",route="/v1/providers",status="200"}')).toBe(2)
    // Buckets fine enough for answers under a millisecond.
    expect(text).toContain('http_request_duration_seconds_bucket{le="0.00005",method="GET",route="/v1/providers",status="200"}')
    expect(valueOf(text, 'http_responses_total{class="2xx"}')).toBe(4)
    expect(valueOf(text, 'http_responses_total{class="4xx"}')).toBe(3)
  })

  it('never carries a key, its hash, an organization id or a raw URL', async () => {
    const app = build()
    await app.inject({ url: '/v1/organization/members?offset=3&limit=2', headers: bearer(KEYS.alphaManagement) })
    await app.inject({ url: '/v1/providers', headers: bearer(KEYS.betaManagement) })
    await app.inject({ url: `/v1/${KEYS.alphaStandard}?token=abc` })
    const text = (await app.inject({ url: '/metrics' })).body
    for (const secret of [KEYS.alphaManagement, sha256(KEYS.alphaManagement), KEYS.betaManagement, KEYS.alphaStandard, 'org_alpha', 'offset=', 'token', 'alpha-management']) {
      expect(text).not.toContain(secret)
    }
  })

  it('describes the data served: source, version, fingerprint, when installed, records of each kind, changes that succeeded and failed', async () => {
    const directory = snapshotsOf(makeData(), 'files')
    const app = build({ snapshots: directory })
    const before = (await app.inject({ url: '/metrics' })).body
    const fingerprint = directory.info().fingerprint
    expect(fingerprint).toMatch(/^[0-9a-f]{16}$/)
    expect(valueOf(before, `directory_snapshot_info{source="files",fingerprint="${fingerprint}"}`)).toBe(1)
    expect(valueOf(before, 'directory_snapshot_version')).toBe(1)
    expect(valueOf(before, 'directory_source_up')).toBe(1)
    expect(valueOf(before, 'directory_records{kind="providers"}')).toBe(3)
    expect(valueOf(before, 'directory_records{kind="members"}')).toBe(253)
    expect(valueOf(before, 'directory_records{kind="keys"}')).toBe(4)
    expect(valueOf(before, 'directory_changes_total{kind="providers",outcome="succeeded"}')).toBe(0)
    const loadedAt = valueOf(before, 'directory_snapshot_installed_timestamp_seconds')!
    expect(loadedAt * 1000).toBe(directory.info().installedAt)

    await directory.install(makeData({ providers: [makeProvider(9)] }))
    directory.refused('keys')
    const after = (await app.inject({ url: '/metrics' })).body
    expect(valueOf(after, 'directory_records{kind="providers"}')).toBe(1)
    expect(valueOf(after, 'directory_snapshot_version')).toBe(2)
    expect(valueOf(after, `directory_snapshot_info{source="files",fingerprint="${fingerprint}"}`)).toBeUndefined()
    expect(valueOf(after, 'directory_changes_total{kind="providers",outcome="succeeded"}')).toBe(1)
    expect(valueOf(after, 'directory_changes_total{kind="keys",outcome="failed"}')).toBe(1)
    expect(valueOf(after, 'directory_snapshot_installed_timestamp_seconds')! * 1000).toBe(directory.info().installedAt)
  })

  it('tells how the source is followed: its mode alone, its horizon, how far behind its log, its failed reads', async () => {
    const files = (await build({ snapshots: snapshotsOf(makeData(), 'files') }).inject({ url: '/metrics' })).body
    expect(series(files, 'directory_source_mode')).toEqual(['directory_source_mode{mode="watch"} 1'])
    // Files have no horizon: the gauge is declared, without a sample (a 0 would read as one).
    expect(files).toContain('# TYPE directory_source_horizon gauge')
    expect(series(files, 'directory_source_horizon')).toEqual([])
    expect(series(files, 'directory_source_position')).toEqual([])
    expect(valueOf(files, 'directory_source_lag_entries')).toBe(0)
    expect(valueOf(files, 'directory_source_lag_seconds')).toBe(0)
    expect(valueOf(files, 'directory_source_read_failures_total')).toBe(0)
    expect(files).not.toContain('directory_notices_ignored_total')

    const directory = snapshotsOf(makeData(), 'postgres')
    const app = build({ snapshots: directory })
    const caughtUp = (await app.inject({ url: '/metrics' })).body
    expect(series(caughtUp, 'directory_source_mode')).toEqual(['directory_source_mode{mode="notify"} 1'])
    expect(valueOf(caughtUp, 'directory_source_horizon')).toBe(1000)
    await directory.install(makeData())
    expect(valueOf((await app.inject({ url: '/metrics' })).body, 'directory_source_horizon')).toBe(1001)

    // A 64-bit transaction id past 2^32 (an epoch on) is written whole; the mode changed leaves one series.
    directory.follows({ mode: 'poll', horizon: 2 ** 32 + 1234, lag: { entries: 3, seconds: 12.5 }, readFailures: 2 })
    const behind = (await app.inject({ url: '/metrics' })).body
    expect(series(behind, 'directory_source_mode')).toEqual(['directory_source_mode{mode="poll"} 1'])
    expect(series(behind, 'directory_source_horizon')).toEqual(['directory_source_horizon 4294968530'])
    // Its former name, deprecated, says so and gives the same value until it goes.
    expect(behind).toMatch(/# HELP directory_source_position Deprecated: renamed directory_source_horizon/)
    expect(series(behind, 'directory_source_position')).toEqual(['directory_source_position 4294968530'])
    expect(valueOf(behind, 'directory_source_lag_entries')).toBe(3)
    expect(valueOf(behind, 'directory_source_lag_seconds')).toBe(12.5)
    expect(series(behind, 'directory_source_read_failures_total')).toEqual(['directory_source_read_failures_total 2'])
  })

  it('counts rate-limit refusals by bucket', async () => {
    const app = build({ settings: { RATE_LIMIT_PER_MINUTE: 1, RATE_LIMIT_ANONYMOUS_PER_MINUTE: 1 } })
    for (let i = 0; i < 3; i++) await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })
    for (let i = 0; i < 2; i++) await app.inject({ url: '/v1/providers' })
    const text = (await app.inject({ url: '/metrics' })).body
    expect(valueOf(text, 'rate_limit_refusals_total{bucket="key"}')).toBe(2)
    expect(valueOf(text, 'rate_limit_refusals_total{bucket="address"}')).toBe(1)
  })

  it('reports the process and its event loop, and the requests in flight (the scrape itself, over a socket)', async () => {
    const app = build()
    const url = await app.listen({ host: '127.0.0.1', port: 0 })
    const text = await (await fetch(`${url}/metrics`)).text()
    expect(valueOf(text, 'http_requests_in_flight')).toBe(1)
    for (const name of ['process_cpu_seconds_total', 'process_resident_memory_bytes', 'nodejs_eventloop_lag_seconds', 'nodejs_heap_size_used_bytes']) {
      expect(valueOf(text, name), name).toBeGreaterThanOrEqual(0)
    }
  })

  it('writes no access line, as the probes, while the API does', async () => {
    const { lines, log } = captureLogs()
    const app = build({ log })
    await app.inject({ url: '/metrics' })
    await app.inject({ url: '/health' })
    await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })
    expect(lines.filter((line) => line.msg === 'request completed').map((line) => line.url)).toEqual(['/v1/providers'])
  })

  it('is off with METRICS=false: 404, and no request is measured', async () => {
    const app = build({ settings: { METRICS: false } })
    const res = await app.inject({ url: '/metrics' })
    expect(res.statusCode).toBe(404)
    expect(res.json()).toEqual({ error: { code: 404, message: 'Not found: GET /metrics' } })
  })
})

/** CPU seconds a process has used since it started, user and system, as the kernel counts them (in clock ticks). */
function cpuSecondsOf (pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
  // utime and stime, the 14th and 15th fields of the line, the 12th and 13th after the name.
  return (Number(fields[11]) + Number(fields[12])) / Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }))
}

describe('GET /metrics, first scrape of a fresh server process', () => {
  it('counts the CPU used since the process started, and shows no figure of an empty sample', async () => {
    const server = await startServer()
    try {
      // Some work before the first scrape, besides the start itself.
      const until = performance.now() + 500
      while (performance.now() < until) {
        await Promise.all(Array.from({ length: 10 }, async () => {
          await (await fetch(`${server.url}/v1/providers`, { headers: bearer(BUNDLED_MANAGEMENT_KEY) })).arrayBuffer()
        }))
      }
      const used = cpuSecondsOf(server.process.pid!)
      const text = await (await fetch(`${server.url}/metrics`)).text()
      expect(used).toBeGreaterThan(0.1)
      expect(valueOf(text, 'process_cpu_seconds_total')).toBeGreaterThanOrEqual(used)
      expect(valueOf(text, 'process_cpu_user_seconds_total')! + valueOf(text, 'process_cpu_system_seconds_total')!).toBeCloseTo(valueOf(text, 'process_cpu_seconds_total')!, 6)
      // prom-client writes NaN as Nan.
      expect(text).not.toMatch(/ nan$/im)
      // An event-loop delay of an empty sample reads 2^63 ns, 9.2e9 s.
      const delays = text.split('\n').filter((line) => line.startsWith('nodejs_eventloop_lag_')).map((line) => Number(line.split(' ').at(-1)))
      expect(delays).toHaveLength(8)
      for (const delay of delays) expect(delay).toBeLessThan(10)
    } finally {
      server.process.kill('SIGTERM')
      await server.exited
    }
  })
})

describe('the histograms, as docs/operations.md states their buckets', () => {
  it('lists every histogram served, each with the upper bounds of its buckets', async () => {
    const app = build()
    await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })
    // A minor collection at least, so that the garbage collector's histogram has a series to show.
    let garbage: unknown[] = []
    for (let i = 0; i < 200_000; i++) garbage.push({ i })
    garbage = []
    const text = (await app.inject({ url: '/metrics' })).body
    const served = Object.fromEntries([...text.matchAll(/^# TYPE (\S+) histogram$/gm)].map(([, name]) => [name!,
      [...new Set(series(text, `${name}_bucket`).map((line) => /le="([^"]+)"/.exec(line)![1]!))].filter((le) => le !== '+Inf').map(Number)]))
    expect(Object.keys(served).sort()).toEqual(['http_request_duration_seconds', 'nodejs_gc_duration_seconds'])
    // Each histogram's row: `name` | histogram ... (`le` a, b, c) ...
    const docs = readFileSync('docs/operations.md', 'utf8')
    const stated = Object.fromEntries([...docs.matchAll(/^\| `(\w+)` \| histogram[^|]*\(`le` ([0-9., ]+)\)/gm)].map(([, name, bounds]) => [name!, bounds!.split(', ').map(Number)]))
    expect(stated).toEqual(served)
  })
})
