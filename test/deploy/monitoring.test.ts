import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { promisify } from 'node:util'
import { parse } from 'yaml'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { BUNDLED_MANAGEMENT_KEY, freePort, startServer, type RunningServer } from '../process.js'
import { build } from '../helper.js'

/** Where an alert links by default: the runbook the replicas of its namespace serve. */
const DEFAULT_RUNBOOK_URL = 'http://model-gateway-directory.{{ $labels.namespace }}.svc/runbook'

const run = promisify(execFile)
const MONITORING = 'deploy/monitoring'

interface Rule { alert: string, expr: string, for?: string, labels: Record<string, string>, annotations: Record<string, string> }
interface Dashboard {
  templating: { list: Array<{ name: string, type: string }> }
  panels: Array<{ type: string, title: string, targets?: Array<{ expr: string }> }>
}

const rulesFile = parse(await readFile(`${MONITORING}/rules.yaml`, 'utf8')) as { groups: Array<{ name: string, rules: Rule[] }> }
const rules = rulesFile.groups.flatMap((group) => group.rules)
const dashboard = JSON.parse(await readFile(`${MONITORING}/dashboard.json`, 'utf8')) as Dashboard
const queries = dashboard.panels.flatMap((panel) => (panel.targets ?? []).map(({ expr }) => ({ panel: panel.title, expr })))

// Metrics a Kubernetes cluster has without us: the container's memory limit from the kubelet's cAdvisor,
// which the process cannot see (the memory panel draws it beside the resident memory).
const CLUSTER_METRICS = new Set(['container_spec_memory_limit_bytes'])

/** Grafana's variables, as an operator's "All" selection expands them. */
const expand = (expr: string) => expr
  .replaceAll('$__rate_interval', '15s')
  .replaceAll('$namespace', '.*')
  .replaceAll('$pod', '.*')

const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'inf', 'nan'])

/** The metric names a PromQL expression selects: identifiers that are neither functions, keywords nor labels. */
function metricNames (expr: string): string[] {
  const stripped = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
  const names = new Set<string>()
  for (const [, name, call] of stripped.matchAll(/(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\()?/g)) {
    if (call === undefined && !KEYWORDS.has(name!.toLowerCase())) names.add(name!)
  }
  return [...names]
}

/** The series names the server's /metrics text defines (a histogram's _bucket, _sum and _count). */
function exportedNames (text: string) {
  const names = new Set<string>()
  for (const [, name, type] of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    names.add(name!)
    if (type === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) names.add(`${name}${suffix}`)
    if (type === 'summary') for (const suffix of ['_sum', '_count']) names.add(`${name}${suffix}`)
  }
  return names
}

describe('the alert rules', () => {
  it('are a valid rules file, and the PrometheusRule holds the very same groups', async () => {
    await run('promtool', ['check', 'rules', `${MONITORING}/rules.yaml`])
    const operator = parse(await readFile(`${MONITORING}/prometheus-rule.yaml`, 'utf8'))
    expect(operator).toMatchObject({ apiVersion: 'monitoring.coreos.com/v1', kind: 'PrometheusRule', metadata: { name: 'model-gateway-directory' } })
    expect(operator.spec, 'prometheus-rule.yaml differs from rules.yaml: copy the groups of rules.yaml').toStrictEqual(rulesFile)
  })

  it('pass their promtool unit tests: each alert fires when it should, and stays silent when it should not', async () => {
    const { stdout } = await run('promtool', ['test', 'rules', `${MONITORING}/tests/alerts.test.yaml`])
    expect(stdout).toContain('SUCCESS')
    const tested = parse(await readFile(`${MONITORING}/tests/alerts.test.yaml`, 'utf8')) as { tests: Array<{ alert_rule_test: Array<{ alertname: string, exp_alerts: unknown[] }> }> }
    const cases = tested.tests.flatMap((test) => test.alert_rule_test)
    for (const { alert } of rules) {
      expect(cases.some((c) => c.alertname === alert && c.exp_alerts.length > 0), `${alert} fires in a test`).toBe(true)
      expect(cases.some((c) => c.alertname === alert && c.exp_alerts.length === 0), `${alert} is silent in a test`).toBe(true)
    }
  })

  it('cover what the issue lists, each with a summary, a description and an absolute link to its entry of the runbook a replica serves', async () => {
    expect(rules.map((rule) => rule.alert)).toEqual([
      'DirectoryChangeRefused', 'DirectoryReplicasServeDifferentData', 'DirectorySourceUnreachable', 'DirectorySourceReadsFailing', 'DirectoryReplicaBehind', 'DirectoryDataUnconfirmed', 'DirectoryTransactionHeldOpen', 'DirectoryClockSkew',
      'DirectoryHighErrorRatio', 'DirectoryHighLatency', 'DirectoryRateLimitStoreErrors', 'DirectoryEventLoopLag', 'DirectoryMemoryNearLimit'
    ])
    // The page the link opens, as a replica serves it: each anchor an element's id.
    const page = (await build().inject({ url: '/runbook' })).body
    for (const rule of rules) {
      expect(rule.annotations.summary, rule.alert).toBeTruthy()
      expect(rule.annotations.description, rule.alert).toBeTruthy()
      expect(['warning', 'critical'], rule.alert).toContain(rule.labels.severity)
      const [base, anchor] = rule.annotations.runbook_url!.split('#')
      expect(base, rule.alert).toBe(DEFAULT_RUNBOOK_URL)
      expect(page, rule.alert).toContain(` id="${anchor}"`)
    }
  })

  it('link to the runbook-url setting of deploy/monitoring, each alert to its own anchor, and apply nothing else', async () => {
    const built = async (dir: string) => parse((await run('kubectl', ['kustomize', dir])).stdout) as { kind: string, spec: unknown }
    // The default: the PrometheusRule as committed.
    expect(await built(MONITORING)).toStrictEqual(parse(await readFile(`${MONITORING}/prometheus-rule.yaml`, 'utf8')))
    // Set, in a copy of the folder: every link follows it.
    const dir = await mkdtemp(join(tmpdir(), 'monitoring-'))
    try {
      await cp(MONITORING, dir, { recursive: true })
      const kustomization = await readFile(join(dir, 'kustomization.yaml'), 'utf8')
      expect(kustomization).toContain(`runbook-url=${DEFAULT_RUNBOOK_URL}\n`)
      await writeFile(join(dir, 'kustomization.yaml'), kustomization.replace(`runbook-url=${DEFAULT_RUNBOOK_URL}`, 'runbook-url=https://git.example.com/team/directory/-/blob/main/docs/runbook.md'))
      const rule = await built(dir) as { kind: string, spec: { groups: Array<{ rules: Rule[] }> } }
      expect(rule.kind).toBe('PrometheusRule')
      expect(rule.spec.groups.flatMap((group) => group.rules).map((each) => each.annotations.runbook_url))
        .toEqual(rules.map((each) => `https://git.example.com/team/directory/-/blob/main/docs/runbook.md#${each.annotations.runbook_url!.split('#')[1]}`))
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('put "memory near the limit" at 90 % of the Deployment\'s memory limit', async () => {
    const deployment = parse(await readFile('deploy/kubernetes/deployment.yaml', 'utf8'))
    const limit = deployment.spec.template.spec.containers[0].resources.limits.memory as string
    const mebibytes = Number(/^(\d+)Mi$/.exec(limit)![1])
    const rule = rules.find((candidate) => candidate.alert === 'DirectoryMemoryNearLimit')!
    expect(rule.expr).toBe(`process_resident_memory_bytes > ${Math.floor(0.9 * mebibytes * 1024 * 1024)}`)
    expect(rule.annotations.description).toContain(`the ${limit} limit`)
  })
})

describe('the dashboard', () => {
  it('has the data source, namespace and pod as variables, used by every query', () => {
    expect(dashboard.templating.list.map(({ name, type }) => [name, type])).toEqual([['datasource', 'datasource'], ['namespace', 'query'], ['pod', 'query']])
    for (const { panel, expr } of queries) {
      expect(expr, panel).toContain('namespace=~"$namespace"')
      expect(expr, panel).toContain('pod=~"$pod"')
    }
  })
})

describe('against a real Prometheus scraping a real server, with the rules loaded', () => {
  let server: RunningServer
  let prometheus: ChildProcess
  let dir: string
  let api: string
  let metricsText: string

  async function query (expr: string) {
    const response = await fetch(`${api}/api/v1/query?${new URLSearchParams({ query: expr })}`)
    return await response.json() as { status: string, error?: string, data: { result: unknown[] } }
  }

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'prometheus-'))
    // With a bound on stale data: the metric its alert compares with is exported only then.
    server = await startServer({ MAX_STALENESS_MS: '600000' })
    // Traffic of every kind the panels show: answers, a 401, a 404, a member page.
    const headers = { authorization: `Bearer ${BUNDLED_MANAGEMENT_KEY}` }
    for (const path of ['/v1/providers', '/v1/endpoints/zdr', '/v1/organization/members?limit=10', '/v1/nothing', '/']) await fetch(`${server.url}${path}`, { headers })
    await fetch(`${server.url}/v1/providers`)
    const port = await freePort()
    api = `http://127.0.0.1:${port}`
    // Short intervals, so that rates and the rules have samples within seconds.
    await writeFile(join(dir, 'prometheus.yml'), JSON.stringify({
      global: { scrape_interval: '1s', evaluation_interval: '1s' },
      rule_files: [resolve(MONITORING, 'rules.yaml')],
      scrape_configs: [{ job_name: 'model-gateway-directory', static_configs: [{ targets: [new URL(server.url).host] }] }]
    }))
    prometheus = spawn('prometheus', [`--config.file=${join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`], { stdio: ['ignore', 'ignore', 'pipe'] })
    let log = ''
    prometheus.stderr!.on('data', (chunk) => { log += chunk })
    await new Promise<void>((resolveStarted, reject) => {
      prometheus.on('error', (error) => reject(new Error(`cannot run prometheus (apt-get install prometheus): ${error.message}`)))
      prometheus.on('exit', () => reject(new Error(`prometheus exited:\n${log}`)))
      // Five scrapes of the target: enough for a rate over 15 s and a few evaluations of every rule.
      const poll = async () => {
        const result = await query('count_over_time(up{job="model-gateway-directory"}[1m])').catch(() => undefined)
        const [sample] = (result?.data.result ?? []) as Array<{ value: [number, string] }>
        if (sample && Number(sample.value[1]) >= 5) resolveStarted()
        else setTimeout(poll, 250)
      }
      poll()
    })
    metricsText = await (await fetch(`${server.url}/metrics`)).text()
  })

  afterAll(async () => {
    if (prometheus?.exitCode === null) {
      prometheus.kill('SIGTERM')
      await once(prometheus, 'exit')
    }
    if (server) {
      server.process.kill('SIGTERM')
      await server.exited
    }
    if (dir) await rm(dir, { recursive: true, force: true })
  })

  it('scrapes the server', async () => {
    const { data } = await query('up{job="model-gateway-directory"} == 1')
    expect(data.result).toHaveLength(1)
  })

  it('evaluates every dashboard query, and each names only metrics the server exports', async () => {
    const exported = exportedNames(metricsText)
    for (const { panel, expr } of queries) {
      const result = await query(expand(expr))
      expect(result.status, `${panel}: ${expr}: ${result.error}`).toBe('success')
      for (const name of metricNames(expr)) {
        if (!CLUSTER_METRICS.has(name)) expect(exported, `${panel}: ${name}`).toContain(name)
      }
    }
    // The names are read right: the panels use the metrics of the issue.
    const named = new Set(queries.flatMap(({ expr }) => metricNames(expr)))
    for (const name of ['http_requests_total', 'http_responses_total', 'http_request_duration_seconds_bucket', 'http_requests_in_flight',
      'rate_limit_refusals_total', 'rate_limit_store_errors_total', 'directory_snapshot_installed_timestamp_seconds', 'directory_snapshot_version',
      'directory_snapshot_info', 'directory_source_up', 'directory_changes_total', 'directory_records', 'directory_source_horizon',
      'directory_source_lag_seconds', 'directory_source_mode', 'nodejs_eventloop_lag_p99_seconds', 'process_resident_memory_bytes',
      'container_spec_memory_limit_bytes']) expect(named).toContain(name)
  })

  it('evaluates every alert expression in Prometheus without error, each naming only metrics the server exports', async () => {
    const exported = exportedNames(metricsText)
    const response = await (await fetch(`${api}/api/v1/rules`)).json() as { data: { groups: Array<{ rules: Array<{ name: string, health: string, lastError?: string, lastEvaluation: string }> }> } }
    const loaded = response.data.groups.flatMap((group) => group.rules)
    expect(loaded.map((rule) => rule.name)).toEqual(rules.map((rule) => rule.alert))
    for (const rule of loaded) {
      expect(rule.health, `${rule.name}: ${rule.lastError}`).toBe('ok')
      expect(rule.lastEvaluation).not.toMatch(/^0001/)
    }
    for (const rule of rules) {
      for (const name of metricNames(rule.expr)) expect(exported, `${rule.alert}: ${name}`).toContain(name)
    }
  })

  it('fires no alert on a healthy server', async () => {
    const response = await (await fetch(`${api}/api/v1/alerts`)).json() as { data: { alerts: unknown[] } }
    expect(response.data.alerts).toEqual([])
    // Nor would one fire with its "for" elapsed: no expression has a result.
    for (const rule of rules) expect((await query(rule.expr)).data.result, rule.alert).toEqual([])
  })
})
