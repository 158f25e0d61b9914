import { readFile } from 'node:fs/promises'
import { describe, expect, it } from 'vitest'
import { OPERATIONS } from '../../src/registry.js'
import { KEYS, bearer, build } from '../helper.js'
import { startServer } from '../process.js'

const packageJson = JSON.parse(await readFile('package.json', 'utf8')) as { name: string, version: string }

const INDEX = {
  name: 'model-gateway-directory',
  version: packageJson.version,
  // Every operation of the registry, under /v1 (that these are the OpenAPI document's is tested below).
  operations: OPERATIONS.map(({ operationId, path }) => ({ id: operationId, method: 'GET', path: `/v1${path}` })),
  docs: '/docs',
  runbook: '/runbook',
  openapi: ['/v1/openapi.json', '/v1/openapi.yaml'],
  metrics: '/metrics',
  probes: { liveness: '/health', readiness: '/ready' }
}

describe('GET /', () => {
  it('introduces the server without a key: name and version of package.json, and where its parts are', async () => {
    const app = build()
    const res = await app.inject({ url: '/' })
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8')
    expect(res.json()).toStrictEqual(INDEX)
  })

  it('names the operations of the OpenAPI document, by their ids', async () => {
    const app = build()
    const document = (await app.inject({ url: '/v1/openapi.json' })).json() as {
      servers: Array<{ url: string }>, paths: Record<string, Record<string, { operationId: string }>>
    }
    const documented = Object.entries(document.paths).flatMap(([path, operations]) =>
      Object.entries(operations).map(([method, { operationId }]) => ({ id: operationId, method: method.toUpperCase(), path: `${document.servers[0]!.url}${path}` })))
    expect((await app.inject({ url: '/' })).json().operations).toStrictEqual(documented)
  })

  it('names only addresses that answer', async () => {
    const app = build()
    const index = (await app.inject({ url: '/' })).json() as typeof INDEX
    const addresses = [...index.operations.map(({ path }) => path), index.docs, ...index.openapi, index.metrics, index.probes.liveness, index.probes.readiness]
    for (const url of addresses) {
      const res = await app.inject({ url, headers: bearer(KEYS.alphaManagement) })
      expect(res.statusCode, url).toBe(200)
    }
  })

  it('leaves /metrics out when METRICS=false turns it off', async () => {
    const app = build({ settings: { METRICS: false } })
    const { metrics, ...rest } = INDEX
    expect(metrics).toBeDefined()
    expect((await app.inject({ url: '/' })).json()).toStrictEqual(rest)
  })

  it('answers HEAD without a body, and another method with 405 in the error shape', async () => {
    const app = build()
    const head = await app.inject({ method: 'HEAD', url: '/' })
    expect(head.statusCode).toBe(200)
    expect(head.body).toBe('')
    const post = await app.inject({ method: 'POST', url: '/' })
    expect(post.statusCode).toBe(405)
    expect(post.json()).toStrictEqual({ error: { code: 405, message: 'Method POST is not allowed on /; use GET' } })
  })

  it('reads the version from the bundled server too (dist/main.js, one folder from package.json)', async () => {
    const server = await startServer()
    try {
      expect(await (await fetch(`${server.url}/`)).json()).toStrictEqual(INDEX)
    } finally {
      server.process.kill('SIGTERM')
      await server.exited
    }
  })
})
