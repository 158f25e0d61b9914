import { request as httpRequest } from 'node:http'
import { brotliDecompressSync, gunzipSync } from 'node:zlib'
import { describe, expect, it } from 'vitest'
import { KEYS, bearer, build } from '../../helper.js'

function decode (body: Buffer, coding: unknown): string {
  if (coding === 'gzip') return gunzipSync(body).toString()
  if (coding === 'br') return brotliDecompressSync(body).toString()
  return body.toString()
}

const NEGOTIATION: Array<[string, string | undefined]> = [
  ['gzip', 'gzip'],
  ['br', 'br'],
  ['gzip, deflate, br', 'br'],
  ['GZIP', 'gzip'],
  ['x-gzip', 'gzip'],
  ['br;q=0.5, gzip', 'gzip'],
  ['br;q=0, *', 'gzip'],
  ['br;q=0, gzip;q=0, *', undefined],
  ['*', 'br'],
  ['deflate', undefined],
  ['identity', undefined],
  ['gzip;q=0', undefined],
  ['identity;q=0, *;q=0', undefined],
  ['', undefined],
  // Weights: identity is not preferred when the header leaves it out.
  ['gzip;q=0.2, br;q=0.9', 'br'],
  ['br;q=0.9, gzip;q=0.2', 'br'],
  ['gzip;q=1, br;q=0.9', 'gzip'],
  ['gzip;q=0.5, identity', undefined],
  ['identity;q=0', undefined],
  ['identity;q=0, gzip', 'gzip'],
  ['*;q=0.5, gzip;q=0.1', 'br'],
  ['x-gzip;q=0.5, br;q=0.4', 'gzip'],
  ['Br;Q=0.9, GZIP;q=0.8', 'br'],
  // Malformed weights: a coding whose weight is not a positive number is not acceptable.
  ['gzip;q=-1', undefined],
  ['br;q=abc, gzip', 'gzip'],
  ['br;q=0.0001, gzip;q=0.5', 'gzip'],
  ['gzip;q=1.5, br', 'gzip'],
  // A very long header (some 11 KB) of codings we do not have, then one we have.
  [`${'x-unknown;q=0.9, '.repeat(650)}gzip;q=0.1`, 'gzip']
]

/** Each row named by its header, a very long one by its start and its length. */
const NEGOTIATION_ROWS = NEGOTIATION.map(([header, coding]) => ({
  name: header.length > 60 ? `${JSON.stringify(header.slice(0, 30))}… (${header.length} characters)` : JSON.stringify(header),
  header,
  coding
}))

describe.each(['/v1/providers', '/v1/endpoints/zdr'])('compressed %s', (url) => {
  let app: ReturnType<typeof build>

  const get = (headers: Record<string, string> = {}) => app.inject({ url, headers: { ...bearer(KEYS.alphaStandard), ...headers } })

  it.each(NEGOTIATION_ROWS)('answers Accept-Encoding $name in $coding, the same JSON, varying on Accept-Encoding', async ({ header: acceptEncoding, coding }) => {
    app = build()
    const identity = await get()
    const res = await get({ 'accept-encoding': acceptEncoding })
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-encoding']).toBe(coding)
    expect(res.headers.vary).toBe('Accept-Encoding')
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8')
    expect(decode(res.rawPayload, coding)).toBe(identity.body)
    if (coding !== undefined) expect(res.rawPayload.length).toBeLessThan(identity.rawPayload.length)
  })

  it('varies on Accept-Encoding without one too', async () => {
    app = build()
    const res = await get()
    expect(res.headers['content-encoding']).toBeUndefined()
    expect(res.headers.vary).toBe('Accept-Encoding')
  })

  it('gives each representation its own strong ETag, and answers 304 to each for its own only', async () => {
    app = build()
    const tags = new Map<string, string>()
    for (const coding of ['identity', 'gzip', 'br']) {
      const etag = (await get({ 'accept-encoding': coding })).headers.etag as string
      expect(etag).toMatch(/^"[A-Za-z0-9_-]{43}"$/)
      tags.set(coding, etag)
    }
    expect(new Set(tags.values()).size).toBe(3)
    for (const [coding, etag] of tags) {
      const notModified = await get({ 'accept-encoding': coding, 'if-none-match': etag })
      expect(notModified.statusCode).toBe(304)
      expect(notModified.body).toBe('')
      expect(notModified.headers.etag).toBe(etag)
      expect(notModified.headers.vary).toBe('Accept-Encoding')
      expect(notModified.headers['content-encoding']).toBeUndefined()
      for (const other of ['identity', 'gzip', 'br'].filter((name) => name !== coding)) {
        const res = await get({ 'accept-encoding': other, 'if-none-match': etag })
        expect(res.statusCode, `${other} with the tag of ${coding}`).toBe(200)
        expect(res.headers.etag).toBe(tags.get(other))
      }
    }
  })

  it('answers HEAD with the headers of the compressed body and no body', async () => {
    app = build()
    const gzip = await get({ 'accept-encoding': 'gzip' })
    const head = await app.inject({ method: 'HEAD', url, headers: { ...bearer(KEYS.alphaStandard), 'accept-encoding': 'gzip' } })
    expect(head.statusCode).toBe(200)
    expect(head.headers['content-encoding']).toBe('gzip')
    expect(head.headers.etag).toBe(gzip.headers.etag)
    expect(head.body).toBe('')
  })
})

describe('compressed member pages', () => {
  let app: ReturnType<typeof build>

  const get = (query: string, headers: Record<string, string> = {}) =>
    app.inject({ url: `/v1/organization/members${query}`, headers: { ...bearer(KEYS.alphaManagement), ...headers } })

  it.each(NEGOTIATION_ROWS)('answers Accept-Encoding $name in $coding, the same page, with its own strong ETag', async ({ header: acceptEncoding, coding }) => {
    app = build()
    const identity = await get('?offset=10&limit=100')
    const res = await get('?offset=10&limit=100', { 'accept-encoding': acceptEncoding })
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-encoding']).toBe(coding)
    expect(res.headers.vary).toBe('Accept-Encoding')
    expect(decode(res.rawPayload, coding)).toBe(identity.body)
    expect(res.headers.etag).toMatch(/^"[^"]+"$/)
    if (coding !== undefined) expect(res.headers.etag).not.toBe(identity.headers.etag)
  })

  it('sends a page under 1 KiB as it is', async () => {
    app = build()
    const res = await get('?offset=1000', { 'accept-encoding': 'gzip, br' })
    expect(res.headers['content-encoding']).toBeUndefined()
    expect(res.headers.vary).toBe('Accept-Encoding')
    expect(res.json()).toEqual({ data: [], total_count: 250 })
  })

  it('leaves errors uncompressed', async () => {
    app = build()
    const res = await get('?limit=500', { 'accept-encoding': 'gzip' })
    expect(res.statusCode).toBe(400)
    expect(res.headers['content-encoding']).toBeUndefined()
  })
})

describe('compression over a real socket', () => {
  const app = build()

  /** The raw bytes on the wire, as node:http gives them (fetch would decode them). */
  function raw (origin: string, path: string, acceptEncoding?: string) {
    return new Promise<{ headers: Record<string, unknown>, body: Buffer }>((resolve, reject) => {
      const headers = { ...bearer(KEYS.alphaManagement), ...(acceptEncoding ? { 'accept-encoding': acceptEncoding } : {}) }
      httpRequest(`${origin}${path}`, { headers }, (res) => {
        const chunks: Buffer[] = []
        res.on('data', (chunk: Buffer) => chunks.push(chunk))
        res.on('end', () => resolve({ headers: res.headers, body: Buffer.concat(chunks) }))
      }).on('error', reject).end()
    })
  }

  it('sends fewer bytes, which decode to the same JSON', async () => {
    const origin = await app.listen({ host: '127.0.0.1', port: 0 })
    for (const path of ['/v1/providers', '/v1/endpoints/zdr', '/v1/organization/members?limit=100']) {
      const plain = await raw(origin, path)
      for (const coding of ['gzip', 'br']) {
        const compressed = await raw(origin, path, coding)
        expect(compressed.headers['content-encoding']).toBe(coding)
        expect(Number(compressed.headers['content-length'])).toBe(compressed.body.length)
        expect(compressed.body.length).toBeLessThan(plain.body.length / 3)
        expect(JSON.parse(decode(compressed.body, coding))).toEqual(JSON.parse(plain.body.toString()))
      }
    }
  })
})
