import { describe, expect, it } from 'vitest'
import { KEYS, bearer, build, makeData, makeEndpoint, makeProvider, snapshotsOf } from '../../helper.js'

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
