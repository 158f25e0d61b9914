import { brotliDecompressSync, gunzipSync } from 'node:zlib'
import { describe, expect, it } from 'vitest'
import { KEYS, bearer, build, makeData, snapshotsOf } from '../../helper.js'
import { MemberList } from '../../../src/repositories/member-list.js'
import { PAGE_CACHE_MAX_BYTES, PageCache } from '../../../src/representation.js'
import type { Member } from '../../../src/schemas/member.js'

type App = ReturnType<typeof build>

const CODINGS = ['identity', 'gzip', 'br'] as const

const get = (app: App, query: string, headers: Record<string, string> = {}) =>
  app.inject({ url: `/v1/organization/members${query}`, headers: { ...bearer(KEYS.alphaManagement), ...headers } })

function decode (body: Buffer, coding: string | undefined): string {
  if (coding === 'gzip') return gunzipSync(body).toString()
  if (coding === 'br') return brotliDecompressSync(body).toString()
  return body.toString()
}

/** What a client sees of an answer, but for what differs on every request (its id, the date, the rate limit left). */
function seen (res: Awaited<ReturnType<App['inject']>>) {
  const { 'x-request-id': _id, date: _date, 'x-ratelimit-remaining': _left, 'x-ratelimit-reset': _reset, ...headers } = res.headers
  return { status: res.statusCode, headers, body: res.rawPayload }
}

function metric (text: string, name: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `))
  if (line === undefined) throw new Error(`no ${name} in the metrics`)
  return Number(line.split(' ')[1])
}

async function pageCacheUsage (app: App) {
  const text = (await app.inject({ url: '/metrics' })).body
  return { pages: metric(text, 'directory_page_cache_pages'), bytes: metric(text, 'directory_page_cache_bytes') }
}

describe('GET /v1/organization/members, a page asked for again', () => {
  it.each(CODINGS)('answers with the same status, headers and bytes as the first time (%s)', async (coding) => {
    const data = makeData()
    const app = build({ data })
    const first = await get(app, '?offset=100&limit=100', { 'accept-encoding': coding })
    expect(first.statusCode).toBe(200)
    const again = await get(app, '?offset=100&limit=100', { 'accept-encoding': coding })
    expect(seen(again)).toEqual(seen(first))
    expect(again.headers['content-encoding']).toBe(coding === 'identity' ? undefined : coding)
    expect(again.headers['content-length']).toBe(String(again.rawPayload.length))
    expect(JSON.parse(decode(again.rawPayload, again.headers['content-encoding'] as string | undefined)))
      .toEqual({ data: data.organizations[0]!.members.slice(100, 200), total_count: 250 })
  })

  it('answers a page of a few members uncompressed whatever the client accepts, with the same tag each time', async () => {
    const app = build()
    const first = await get(app, '?offset=0&limit=2', { 'accept-encoding': 'gzip' })
    const again = await get(app, '?offset=0&limit=2', { 'accept-encoding': 'br' })
    expect(first.headers['content-encoding']).toBeUndefined()
    expect(seen(again)).toEqual(seen(first))
  })

  it('answers HEAD of a page kept with its headers and no body', async () => {
    const app = build()
    const page = await get(app, '?offset=7&limit=30', { 'accept-encoding': 'br' })
    const head = await app.inject({ method: 'HEAD', url: '/v1/organization/members?offset=7&limit=30', headers: { ...bearer(KEYS.alphaManagement), 'accept-encoding': 'br' } })
    expect(head.statusCode).toBe(200)
    expect(head.body).toBe('')
    expect(head.headers.etag).toBe(page.headers.etag)
    expect(head.headers['content-length']).toBe(page.headers['content-length'])
  })

  it.each(CODINGS)('answers 304 to the tag of a page kept, and of one this process never sent (%s)', async (coding) => {
    const replica = build()
    const { etag } = (await get(replica, '?offset=20&limit=60', { 'accept-encoding': coding })).headers
    const app = build()
    // Not kept yet: the tag of another replica with the same data.
    const fresh = await get(app, '?offset=20&limit=60', { 'accept-encoding': coding, 'if-none-match': etag as string })
    expect([fresh.statusCode, fresh.body, fresh.headers.etag, fresh.headers.vary]).toEqual([304, '', etag, 'Accept-Encoding'])
    const page = await get(app, '?offset=20&limit=60', { 'accept-encoding': coding })
    expect(page.statusCode).toBe(200)
    const kept = await get(app, '?offset=20&limit=60', { 'accept-encoding': coding, 'if-none-match': etag as string })
    expect(seen(kept)).toEqual(seen(fresh))
  })

  it.each(CODINGS)('sends the changed page after a change of the organization\'s members, never the page kept from before (%s)', async (coding) => {
    const snapshots = snapshotsOf(makeData())
    await snapshots.ready
    const app = build({ snapshots })
    const before = await get(app, '?offset=0&limit=100', { 'accept-encoding': coding })
    expect(seen(await get(app, '?offset=0&limit=100', { 'accept-encoding': coding }))).toEqual(seen(before))
    const changed = makeData()
    const members: Member[] = changed.organizations[0]!.members.slice()
    members[5] = { ...members[5]!, email: 'changed@alpha.example' }
    await snapshots.install({ ...changed, organizations: [{ ...changed.organizations[0]!, members: MemberList.of(members) }, changed.organizations[1]!] })
    const after = await get(app, '?offset=0&limit=100', { 'accept-encoding': coding, 'if-none-match': before.headers.etag as string })
    expect(after.statusCode).toBe(200)
    expect(after.headers.etag).not.toBe(before.headers.etag)
    expect(JSON.parse(decode(after.rawPayload, after.headers['content-encoding'] as string | undefined)).data[5].email).toBe('changed@alpha.example')
    // A member removed changes the count of every page, the ones past the change too.
    await snapshots.install({ ...changed, organizations: [{ ...changed.organizations[0]!, members: MemberList.of(members.slice(1)) }, changed.organizations[1]!] })
    const fewer = await get(app, '?offset=200&limit=100', { 'accept-encoding': coding })
    expect(JSON.parse(decode(fewer.rawPayload, fewer.headers['content-encoding'] as string | undefined)).total_count).toBe(249)
  })

  it('keeps at most 16 MiB of pages, however many distinct pages are asked for, and still answers each one right', async () => {
    // Members with long names, so that a page is some 50 KB and the bound is passed in a few hundred pages.
    const members = MemberList.of(Array.from({ length: 600 }, (_, i) => ({
      id: `user_${i}`, email: `person${i}@large.example`, first_name: `First${i}`.padEnd(250, '.'), last_name: `Last${i}`.padEnd(250, '.'), role: 'org:member'
    })))
    const app = build({ data: makeData({ organizations: [{ id: 'org_alpha', name: 'Alpha', members }] }) })
    const asked = 500
    for (let offset = 0; offset < asked; offset++) {
      // Uncompressed, the bodies that fill it; compressed too, for some (these names compress to little).
      for (const coding of offset % 5 === 0 ? ['identity', 'gzip', 'br'] : ['identity']) {
        expect((await get(app, `?offset=${offset}&limit=100`, { 'accept-encoding': coding })).statusCode).toBe(200)
      }
    }
    const usage = await pageCacheUsage(app)
    expect(usage.bytes).toBeLessThanOrEqual(PAGE_CACHE_MAX_BYTES)
    // Filled, not merely under the bound: the bound is what holds it.
    expect(usage.bytes).toBeGreaterThan(PAGE_CACHE_MAX_BYTES - 128 * 1024)
    expect(usage.pages).toBeLessThan(asked)
    // The first pages went out first, and are made again when asked for.
    const first = await get(app, '?offset=0&limit=100')
    expect(JSON.parse(first.body)).toEqual({ data: members.slice(0, 100), total_count: 600 })
    expect((await pageCacheUsage(app)).bytes).toBeLessThanOrEqual(PAGE_CACHE_MAX_BYTES)
  })
})

describe('the page cache', () => {
  const list = (i: number, members = 100) => {
    const json = Buffer.from(JSON.stringify({ data: Array.from({ length: members }, (_, k) => ({ id: `user_${i}_${k}`, email: `m${k}@org${i}.example`, n: Math.sin(i * k) })) }))
    // In memory of its own, as MemberList.page makes it.
    return { digest: `v${i}`, page: () => { const own = Buffer.allocUnsafeSlow(json.length); json.copy(own); return own }, pageLength: () => json.length }
  }
  const body = (cache: PageCache, i: number, coding: 'identity' | 'gzip' | 'br') => cache.answer(list(i), 0, 100, coding).body(list(i))

  it('keeps pages up to a bound in bytes, the least recently used out first', () => {
    const cache = new PageCache('Accept-Encoding', 64 * 1024)
    const bodies = Array.from({ length: 200 }, (_, i) => body(cache, i, 'gzip'))
    expect(cache.usage.bytes).toBeLessThanOrEqual(64 * 1024)
    expect(cache.usage.pages).toBeGreaterThan(0)
    expect(cache.usage.pages).toBeLessThan(200)
    // The last page is kept, the first is gone (made again, the same bytes), and what is kept is what was sent.
    expect(body(cache, 199, 'gzip')).toBe(bodies[199])
    const again = body(cache, 0, 'gzip')
    expect(again).not.toBe(bodies[0])
    expect(again).toEqual(bodies[0])
  })

  it('counts every body it keeps, in memory of its own size, and makes none for a 304', () => {
    const cache = new PageCache('Accept-Encoding', 64 * 1024)
    const answer = cache.answer(list(1), 0, 100, 'br')
    const tagged = cache.usage.bytes
    // The tag is known without the body: a 304 makes none, nor the page uncompressed.
    expect(answer.etag).toBe('"v1.0.100.br"')
    expect(cache.usage.bytes).toBe(1536)
    const sent = answer.body(list(1))
    expect(cache.usage.bytes).toBe(tagged + sent.length)
    // The page sent compressed only keeps no uncompressed copy; sent uncompressed, it does.
    const identity = cache.answer(list(1), 0, 100, 'identity').body(list(1))
    expect(cache.usage.bytes).toBe(tagged + sent.length + 1536 + identity.length)
    for (let i = 0; i < 200; i++) {
      for (const coding of ['identity', 'gzip', 'br'] as const) {
        const kept = body(cache, i, coding)
        // zlib hands back a view of its whole output chunk (64 KiB) for a body of 1 KB, which the
        // bound, counting the view's length, would hold dozens of times over.
        expect(kept.buffer.byteLength).toBe(kept.length)
      }
    }
    expect(cache.usage.bytes).toBeLessThanOrEqual(64 * 1024)
  })
})
