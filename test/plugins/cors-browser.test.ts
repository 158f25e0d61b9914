import { once } from 'node:events'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { createServer, type Server } from 'node:http'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { build as bundle } from 'esbuild'
import type { Browser } from 'playwright-core'
import { afterAll, describe, expect, it } from 'vitest'
import { OPERATIONS } from '../../src/registry.js'
import { launchChromium } from '../chromium.js'
import { KEYS, build, makeData } from '../helper.js'
import { sdkRequestHeaders } from '../sdk-headers.js'

// A dashboard's page: the pinned SDK's ESM bundle, and a function that makes each of the three calls with
// an app that names itself, answering what each returned or threw (a CORS refusal surfaces as the SDK's
// ConnectionError, which names no header: the console says which).
const PAGE = `<!doctype html>
<meta charset="utf-8">
<title>A dashboard</title>
<script type="module">
import { OpenRouter } from './sdk.js'
const outcome = (call) => call.then((value) => ({ value }), (error) => ({ error: error.name + ': ' + error.message }))
window.callEachOperation = async ({ serverURL, standardKey, managementKey, naming }) => {
  // Retries off: a refused call must fail at once, not back off for an hour.
  const client = (apiKey) => new OpenRouter({ apiKey, serverURL, ...naming, retryConfig: { strategy: 'none' } })
  return {
    providers: await outcome(client(standardKey).providers.list().then((res) => res.data.map((provider) => provider.slug))),
    endpoints: await outcome(client(standardKey).endpoints.listZdrEndpoints().then((res) => res.data.map((endpoint) => endpoint.name))),
    members: await outcome(client(managementKey).organization.listMembers({ limit: 10 }).then((page) => ({ count: page.result.data.length, total: page.result.totalCount })))
  }
}
</script>
`

/** The page's origin: a server of its own on another port, serving the page and the SDK bundled into one file. */
async function servePage (sdkBundle: string) {
  const sdk = await readFile(sdkBundle)
  const server = createServer((req, res) => {
    const [type, body] = req.url === '/sdk.js' ? ['text/javascript', sdk] : ['text/html; charset=utf-8', PAGE]
    res.writeHead(200, { 'content-type': type }).end(body)
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as { port: number }
  return { server, origin: `http://127.0.0.1:${port}` }
}

describe('the official SDK in a browser, on a dashboard of another origin', () => {
  let browser: Browser | undefined
  let page: Server | undefined
  const folders: string[] = []
  afterAll(async () => {
    await browser?.close()
    page?.close()
    await Promise.all(folders.map((dir) => rm(dir, { recursive: true, force: true })))
  })

  it('calls each operation with httpReferer, appTitle and appCategories set: the preflight allows the headers it sends', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'cors-browser-'))
    folders.push(dir)
    await bundle({
      entryPoints: [createRequire(import.meta.url).resolve('@openrouter/sdk')],
      bundle: true,
      format: 'esm',
      platform: 'browser',
      outfile: join(dir, 'sdk.js'),
      logLevel: 'silent'
    })
    const dashboard = await servePage(join(dir, 'sdk.js'))
    page = dashboard.server

    const data = makeData()
    const app = build({ data, settings: { CORS_ORIGINS: dashboard.origin } })
    // What reached the server, preflights included (answered by the CORS plugin's own hook).
    const seen: Array<{ method: string, path: string, status: number, headers: Record<string, unknown> }> = []
    app.addHook('onResponse', async (request, reply) => {
      seen.push({ method: request.method, path: request.url.split('?')[0]!, status: reply.statusCode, headers: request.headers })
    })
    const api = await app.listen({ host: '127.0.0.1', port: 0 })
    expect(new URL(api).origin).not.toBe(dashboard.origin)

    browser = await launchChromium()
    const tab = await browser.newPage()
    const complaints: string[] = []
    tab.on('console', (message) => { if (message.type() === 'error') complaints.push(message.text()) })
    tab.on('pageerror', (error) => complaints.push(error.message))
    await tab.goto(dashboard.origin)
    await tab.waitForFunction(() => 'callEachOperation' in window)

    const naming = { httpReferer: 'https://dash.example/models', appTitle: 'Model dashboard', appCategories: 'cli-agent,programming-app' }
    const outcomes = await tab.evaluate(
      (args) => (window as unknown as { callEachOperation: (a: typeof args) => Promise<Record<string, { value?: unknown, error?: string }>> }).callEachOperation(args),
      { serverURL: `${api}/v1`, standardKey: KEYS.alphaStandard, managementKey: KEYS.alphaManagement, naming }
    )
    // Together, so that a refusal shows beside the outcomes the console's reason, which names the header.
    expect({ outcomes, complaints }).toEqual({
      outcomes: {
        providers: { value: data.providers.map((provider) => provider.slug) },
        endpoints: { value: data.endpoints.map((endpoint) => endpoint.name) },
        members: { value: { count: 10, total: data.organizations[0]!.members.length } }
      },
      complaints: []
    })

    // Each operation was preflighted for the SDK's headers, and its call carried the app's names.
    const sent = [...new Set(Object.values(await sdkRequestHeaders()).flat().map((name) => name.toLowerCase()))]
    for (const { path } of OPERATIONS) {
      const preflight = seen.find((entry) => entry.method === 'OPTIONS' && entry.path === `/v1${path}`)
      expect(preflight, path).toMatchObject({ status: 204, headers: { origin: dashboard.origin } })
      expect(String(preflight!.headers['access-control-request-headers']).split(',').sort(), path).toEqual(['authorization', ...sent].sort())
      const call = seen.find((entry) => entry.method === 'GET' && entry.path === `/v1${path}`)
      expect(call, path).toMatchObject({
        status: 200,
        headers: { origin: dashboard.origin, 'http-referer': naming.httpReferer, 'x-openrouter-title': naming.appTitle, 'x-openrouter-categories': naming.appCategories }
      })
    }
  })
})
