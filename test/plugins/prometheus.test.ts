import * as promClient from 'prom-client'
import { describe, expect, it } from 'vitest'
import { Counter, DEFAULT_METRICS, Gauge, Registry } from '../../src/plugins/prometheus.js'
import { build } from '../helper.js'

describe('prom-client, loaded part by part', () => {
  it('gives the classes of its index', () => {
    expect(Registry).toBe(promClient.Registry)
    expect(Counter).toBe(promClient.Counter)
    expect(Gauge).toBe(promClient.Gauge)
  })

  it('collects the default metrics of its index but its CPU counters, in its order', () => {
    const { metricsList } = promClient.collectDefaultMetrics as unknown as { metricsList: string[] }
    expect(DEFAULT_METRICS).toEqual(metricsList.filter((name) => name !== 'processCpuTotal'))
  })

  it('serves every default metric of the index, with the same name, type and help', async () => {
    const text = (await build().inject({ url: '/metrics' })).body
    const registry = new promClient.Registry()
    promClient.collectDefaultMetrics({ register: registry })
    const metrics = await registry.getMetricsAsJSON()
    expect(metrics.length).toBeGreaterThan(20)
    for (const { name, type, help } of metrics) {
      expect(text).toContain(`# HELP ${name} ${help}\n# TYPE ${name} ${type}\n`)
    }
  })
})
