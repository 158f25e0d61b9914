import { describe, expect, it } from 'vitest'
import { KEYS, bearer, build, makeData, makeEndpoint, makeProvider, snapshotsOf } from '../../helper.js'
import { MemberList } from '../../../src/repositories/member-list.js'

describe.each(['/v1/providers', '/v1/endpoints/zdr'])('conditional GET %s', (url) => {
  async function currentEtag (app: ReturnType<typeof build>) {
    const res = await app.inject({ url, headers: bearer(KEYS.alphaStandard) })
    expect(res.statusCode).toBe(200)
    return res.headers.etag as string
  }

  it('carries a strong ETag that stays the same while the data does', async () => {
    const app = build()
    const etag = await currentEtag(app)
    expect(etag).toMatch(/^"[A-Za-z0-9_-]{43}"$/)
    expect(await currentEtag(app)).toBe(etag)
  })

  it('gives different data a different ETag', async () => {
    const before = await currentEtag(build())
    expect(await currentEtag(build({ data: makeData({ providers: [makeProvider(42)], endpoints: [] }) }))).not.toBe(before)
  })

  it('gives a list a new ETag when a change is installed, and the old tag no 304', async () => {
    const directory = snapshotsOf(makeData())
    const app = build({ snapshots: directory })
    const before = await currentEtag(app)
    await directory.install(makeData({ providers: [makeProvider(42)], endpoints: [makeEndpoint(42)] }))
    expect(await currentEtag(app)).not.toBe(before)
    const res = await app.inject({ url, headers: { ...bearer(KEYS.alphaStandard), 'if-none-match': before } })
    expect(res.statusCode).toBe(200)
  })

  it('gives the same data the same ETag in another process or replica', async () => {
    const one = await currentEtag(build({ snapshots: snapshotsOf(makeData()) }))
    // Parsed again from its JSON text, as another replica would read it.
    expect(await currentEtag(build({ snapshots: snapshotsOf(makeData()) }))).toBe(one)
  })

  it.each([
    ['the same tag', (etag: string) => etag],
    ['the weak form of the tag', (etag: string) => `W/${etag}`],
    ['a list holding the tag', (etag: string) => `"other", ${etag}`],
    ['*', () => '*']
  ])('answers 304 without a body to If-None-Match with %s', async (_case, header) => {
    const app = build()
    const etag = await currentEtag(app)
    const res = await app.inject({ url, headers: { ...bearer(KEYS.alphaStandard), 'if-none-match': header(etag) } })
    expect(res.statusCode).toBe(304)
    expect(res.body).toBe('')
    expect(res.headers.etag).toBe(etag)
    expect(res.headers['content-length']).toBeUndefined()
  })

  it('answers 200 with the body to an If-None-Match that does not match', async () => {
    const app = build()
    const res = await app.inject({ url, headers: { ...bearer(KEYS.alphaStandard), 'if-none-match': '"stale"' } })
    expect(res.statusCode).toBe(200)
    expect(res.json().data.length).toBeGreaterThan(0)
  })

  it('still needs a key', async () => {
    const app = build()
    const etag = await currentEtag(app)
    const res = await app.inject({ url, headers: { 'if-none-match': etag } })
    expect(res.statusCode).toBe(401)
    expect(res.headers.etag).toBeUndefined()
  })
})

describe('conditional GET /v1/organization/members', () => {
  const get = (app: ReturnType<typeof build>, query: string, headers: Record<string, string> = {}) =>
    app.inject({ url: `/v1/organization/members${query}`, headers: { ...bearer(KEYS.alphaManagement), ...headers } })

  async function pageEtag (app: ReturnType<typeof build>, query: string, headers: Record<string, string> = {}) {
    const res = await get(app, query, headers)
    expect(res.statusCode).toBe(200)
    return res.headers.etag as string
  }

  it('carries a strong ETag per page that stays the same while the members do', async () => {
    const app = build()
    const etag = await pageEtag(app, '?offset=10&limit=20')
    expect(etag).toMatch(/^"[^"]+"$/)
    expect(await pageEtag(app, '?offset=10&limit=20')).toBe(etag)
    expect(await pageEtag(app, '?offset=30&limit=20')).not.toBe(etag)
    expect(await pageEtag(app, '?offset=10&limit=21')).not.toBe(etag)
  })

  it('gives each coding of a page its own tag', async () => {
    const app = build()
    const tags = new Set<string>()
    for (const coding of ['identity', 'gzip', 'br']) tags.add(await pageEtag(app, '?limit=100', { 'accept-encoding': coding }))
    expect(tags.size).toBe(3)
  })

  it('gives the page a new tag when a member of the organization changes, and the old tag no 304', async () => {
    const alphaMembers = (thirdEmail?: string) => MemberList.of(Array.from({ length: 20 }, (_, i) => ({
      id: `user_${i}`, email: i === 2 && thirdEmail ? thirdEmail : `person${i}@alpha.example`, first_name: 'First', last_name: 'Last', role: 'org:member'
    })))
    const directory = snapshotsOf(makeData({ organizations: [{ id: 'org_alpha', name: 'Alpha', members: alphaMembers() }] }))
    const app = build({ snapshots: directory })
    const before = await pageEtag(app, '?offset=0&limit=5')
    await directory.install(makeData({ organizations: [{ id: 'org_alpha', name: 'Alpha', members: alphaMembers('changed@alpha.example') }] }))
    const res = await get(app, '?offset=0&limit=5', { 'if-none-match': before })
    expect(res.statusCode).toBe(200)
    expect(res.json().data[2].email).toBe('changed@alpha.example')
    expect(res.headers.etag).not.toBe(before)
  })

  it('gives the same page the same tag in another replica', async () => {
    const one = await pageEtag(build({ snapshots: snapshotsOf(makeData()) }), '?offset=3&limit=7')
    expect(await pageEtag(build({ snapshots: snapshotsOf(makeData()) }), '?offset=3&limit=7')).toBe(one)
  })

  it.each([
    ['the same tag', (etag: string) => etag],
    ['the weak form of the tag', (etag: string) => `W/${etag}`],
    ['a list holding the tag', (etag: string) => `"other", ${etag}`],
    ['*', () => '*']
  ])('answers 304 without a body to If-None-Match with %s', async (_case, header) => {
    const app = build()
    const etag = await pageEtag(app, '?offset=5&limit=50', { 'accept-encoding': 'gzip' })
    const res = await get(app, '?offset=5&limit=50', { 'accept-encoding': 'gzip', 'if-none-match': header(etag) })
    expect(res.statusCode).toBe(304)
    expect(res.body).toBe('')
    expect(res.headers.etag).toBe(etag)
    expect(res.headers.vary).toBe('Accept-Encoding')
    expect(res.headers['content-encoding']).toBeUndefined()
  })

  it('still needs a management key, and answers 404 for an organization that does not exist', async () => {
    const app = build()
    const etag = await pageEtag(app, '')
    expect((await app.inject({ url: '/v1/organization/members', headers: { 'if-none-match': etag } })).statusCode).toBe(401)
    expect((await app.inject({ url: '/v1/organization/members', headers: { ...bearer(KEYS.alphaStandard), 'if-none-match': '*' } })).statusCode).toBe(403)
    expect((await app.inject({ url: '/v1/organization/members', headers: { ...bearer(KEYS.orphanManagement), 'if-none-match': '*' } })).statusCode).toBe(404)
  })
})
