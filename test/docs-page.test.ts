import { mkdir, readFile } from 'node:fs/promises'
import { afterAll, describe, expect, it } from 'vitest'
import type { Browser } from 'playwright-core'
import Fastify from 'fastify'
import docsPage, { buildDocsApp } from '../src/routes/docs.js'
import { KINDS, OPERATIONS } from '../src/registry.js'
import { launchChromium } from './chromium.js'
import { KEYS, build } from './helper.js'

describe('the reference page at /docs', () => {
  it('is served without a key, with its assets from this server', async () => {
    const app = build()
    const page = await app.inject({ url: '/docs' })
    expect(page.statusCode).toBe(200)
    expect(page.headers['content-type']).toBe('text/html; charset=utf-8')
    const assets = [...page.body.matchAll(/(?:src|href)="([^"]+)"/g)].map((match) => match[1]!)
    expect(assets.length).toBeGreaterThan(3)
    for (const asset of assets) {
      expect(asset).toMatch(/^\/docs\/static\//)
      expect((await app.inject({ url: asset })).statusCode, asset).toBe(200)
    }
    expect((await app.inject({ url: '/docs/json' })).json()).toEqual((await app.inject({ url: '/v1/openapi.json' })).json())
  })

  it('answers on the routes of Swagger UI, no fewer and no more', async () => {
    // The page's routes are declared before Swagger UI is loaded (on the first request for the page).
    const ours = Fastify()
    await ours.register(docsPage).ready()
    const swaggerUi = await buildDocsApp({ openapi: '3.1.0', info: { title: 'any', version: '1' }, paths: {} })
    expect(ours.printRoutes({ method: 'GET', commonPrefix: false })).toBe(swaggerUi.printRoutes({ method: 'GET', commonPrefix: false }))
    await Promise.all([ours.close(), swaggerUi.close()])
  })

  it('answers an asset it does not have, or another method, with the error shape', async () => {
    const app = build()
    const missing = await app.inject({ url: '/docs/static/missing.js' })
    expect(missing.statusCode).toBe(404)
    expect(missing.json()).toEqual({ error: { code: 404, message: 'Not found: GET /docs/static/missing.js' } })
    const posted = await app.inject({ method: 'POST', url: '/docs/json' })
    expect(posted.statusCode).toBe(405)
    expect(posted.headers.allow).toBe('GET, HEAD')
    expect(posted.json()).toEqual({ error: { code: 405, message: 'Method POST is not allowed on /docs/json; use GET' } })
  })

  it('answers a conditional request for an asset with 304, and HEAD with the headers of GET', async () => {
    const app = build()
    const asset = await app.inject({ url: '/docs/static/swagger-ui.css' })
    expect(asset.statusCode).toBe(200)
    const again = await app.inject({ url: '/docs/static/swagger-ui.css', headers: { 'if-none-match': String(asset.headers.etag) } })
    expect(again.statusCode).toBe(304)
    expect(again.body).toBe('')
    const head = await app.inject({ method: 'HEAD', url: '/docs/static/swagger-ui.css' })
    expect(head.statusCode).toBe(200)
    expect(head.body).toBe('')
    expect(head.headers['content-length']).toBe(asset.headers['content-length'])
    expect(head.headers['content-type']).toBe(asset.headers['content-type'])
    expect(head.headers['x-request-id']).toBeDefined()
  })

  it('carries a Content-Security-Policy that allows this server only, and no inline script', async () => {
    const app = build()
    for (const url of ['/docs', '/docs/static/swagger-initializer.js']) {
      const policy = String((await app.inject({ url })).headers['content-security-policy'])
      const directives = Object.fromEntries(policy.split(';').map((part) => part.trim()).filter(Boolean).map((part) => {
        const [name = '', ...values] = part.split(/\s+/)
        return [name, values.join(' ')]
      }))
      expect(directives, url).toMatchObject({ 'default-src': "'self'", 'script-src': "'self'", 'connect-src': "'self'", 'object-src': "'none'", 'frame-ancestors': "'self'" })
      expect(directives['style-src'], 'styles from this server, and the <style> elements Swagger UI adds').toBe("'self' 'unsafe-inline'")
      expect(policy.replace(directives['style-src']!, '')).not.toMatch(/unsafe|https:|upgrade-insecure-requests/)
    }
    // The API itself is JSON, no page: it carries none.
    expect((await app.inject({ url: '/v1/openapi.json' })).headers['content-security-policy']).toBeUndefined()
  })
})

describe('the reference page at /docs, in a real browser', () => {
  const app = build()
  let browser: Browser | undefined
  afterAll(() => browser?.close())

  it('lists every operation of the registry, fetches nothing from outside this server, and leaves a screenshot in reports/', async () => {
    const origin = await app.listen({ host: '127.0.0.1', port: 0 })
    browser = await launchChromium()
    const context = await browser.newContext({ viewport: { width: 1280, height: 1000 } })
    // Every request of the page passes here: anything not for this server is recorded, then refused.
    const outside: string[] = []
    await context.route('**/*', (route) => {
      const url = route.request().url()
      if (url.startsWith(`${origin}/`)) return route.continue()
      outside.push(url)
      return route.abort()
    })
    // Anything the page's Content-Security-Policy blocks is reported here.
    await context.addInitScript(() => {
      const seen: string[] = []
      ;(window as unknown as { cspViolations: string[] }).cspViolations = seen
      document.addEventListener('securitypolicyviolation', (event) => seen.push(`${event.violatedDirective} ${event.blockedURI}`))
    })
    const page = await context.newPage()
    const pageErrors: string[] = []
    page.on('pageerror', (error) => pageErrors.push(error.message))
    page.on('console', (message) => { if (message.type() === 'error') pageErrors.push(message.text()) })

    const response = await page.goto(`${origin}/docs`)
    expect(await response?.headerValue('content-security-policy')).toContain("default-src 'self'")
    const operations = page.locator('.opblock')
    await operations.nth(OPERATIONS.length - 1).waitFor()

    // The service's name and version head the page, and its tab; no Fastify logo, no Explore bar.
    const { version } = JSON.parse(await readFile('package.json', 'utf8')) as { version: string }
    expect(await page.title()).toBe(`Model-gateway directory ${version}: API reference`)
    expect(await page.locator('.topbar').count()).toBe(0)
    expect(await page.locator('.download-url-input, .download-url-button').count()).toBe(0)
    expect(await page.locator('img').count()).toBe(0)
    expect((await page.locator('.info .title').textContent())?.replace(/\s+/g, ' ')).toMatch(new RegExp(`^Model-gateway directory ${version.replaceAll('.', '\\.')}\\b`))
    expect(await operations.count()).toBe(OPERATIONS.length)
    expect(await page.locator('.opblock-summary-path').allTextContents()).toEqual(OPERATIONS.map(({ path }) => path))
    expect(await page.locator('.opblock-summary-operation-id').allTextContents()).toEqual(OPERATIONS.map(({ operationId }) => operationId))
    expect(await page.locator('.opblock-tag').allTextContents()).toEqual(OPERATIONS.map(({ tag }) => expect.stringContaining(tag.name)))

    // Opened, the member listing shows its parameters and every documented status.
    const { operationId, tag } = KINDS.organizations.operation
    const members = page.locator(`#operations-${tag.name}-${operationId}`)
    await members.locator('.opblock-summary').click()
    await members.locator('.parameters').waitFor()
    expect(await members.locator('.parameter__name').allTextContents()).toEqual(['offset', 'limit'])
    expect(await members.locator('.responses-table tbody .response-col_status').allTextContents()).toEqual(['200', '304', '400', '401', '403', '404', '413', '417', '429', '500', '503'])

    // "Try it out" with a key: the call is allowed by connect-src and answers.
    await page.locator('.authorize').click()
    await page.locator('.modal-ux input').fill(KEYS.alphaManagement)
    await page.locator('.modal-ux .auth-btn-wrapper .authorize').click()
    await page.locator('.modal-ux .btn-done').click()
    await members.locator('.try-out__btn').click()
    await members.locator('.execute').click()
    await members.locator('.live-responses-table tbody .response-col_status').first().waitFor()
    expect((await members.locator('.live-responses-table tbody .response-col_status').first().textContent())?.trim()).toBe('200')

    expect(await page.evaluate(() => (window as unknown as { cspViolations: string[] }).cspViolations)).toEqual([])
    await mkdir('reports', { recursive: true })
    await page.screenshot({ path: 'reports/docs.png', fullPage: true })
    await context.close()
    expect(outside).toEqual([])
    expect(pageErrors).toEqual([])
  })
})
