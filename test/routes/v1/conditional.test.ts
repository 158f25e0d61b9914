import { afterEach, describe, expect, it } from 'vitest'
import { createDirectory } from '../../../src/repositories/directory.js'
import { KEYS, bearer, build, makeData, makeEndpoint, makeProvider } from '../../helper.js'

describe.each(['/v1/providers', '/v1/endpoints/zdr'])('conditional GET %s', (url) => {
  let app: ReturnType<typeof build>
  afterEach(() => app.close())

  async function currentEtag () {
    const res = await app.inject({ url, headers: bearer(KEYS.alphaStandard) })
    expect(res.statusCode).toBe(200)
    return res.headers.etag as string
  }

  it('carries a strong ETag that stays the same while the data does', async () => {
    app = build()
    const etag = await currentEtag()
    expect(etag).toMatch(/^"[A-Za-z0-9_-]{43}"$/)
    expect(await currentEtag()).toBe(etag)
  })

  it('gives different data a different ETag', async () => {
    app = build()
    const before = await currentEtag()
    await app.close()
    app = build({ data: makeData({ providers: [makeProvider(42)], endpoints: [] }) })
    expect(await currentEtag()).not.toBe(before)
  })

  it('gives a list a new ETag when a change is installed, and the old tag no 304', async () => {
    const directory = createDirectory('test', makeData())
    app = build({ directory })
    const before = await currentEtag()
    directory.install(makeData({ providers: [makeProvider(42)], endpoints: [makeEndpoint(42)] }))
    const after = await currentEtag()
    expect(after).not.toBe(before)
    const res = await app.inject({ url, headers: { ...bearer(KEYS.alphaStandard), 'if-none-match': before } })
    expect(res.statusCode).toBe(200)
  })

  it('gives the same data the same ETag in another process or replica', async () => {
    app = build({ directory: createDirectory('test', makeData()) })
    const one = await currentEtag()
    await app.close()
    // Parsed again from its JSON text, as another replica would read it.
    app = build({ directory: createDirectory('test', JSON.parse(JSON.stringify(makeData()))) })
    expect(await currentEtag()).toBe(one)
  })

  it.each([
    ['the same tag', (etag: string) => etag],
    ['the weak form of the tag', (etag: string) => `W/${etag}`],
    ['a list holding the tag', (etag: string) => `"other", ${etag}`],
    ['*', () => '*']
  ])('answers 304 without a body to If-None-Match with %s', async (_case, header) => {
    app = build()
    const etag = await currentEtag()
    const res = await app.inject({ url, headers: { ...bearer(KEYS.alphaStandard), 'if-none-match': header(etag) } })
    expect(res.statusCode).toBe(304)
    expect(res.body).toBe('')
    expect(res.headers.etag).toBe(etag)
    expect(res.headers['content-length']).toBeUndefined()
  })

  it('answers 200 with the body to an If-None-Match that does not match', async () => {
    app = build()
    const res = await app.inject({ url, headers: { ...bearer(KEYS.alphaStandard), 'if-none-match': '"stale"' } })
    expect(res.statusCode).toBe(200)
    expect(res.json().data.length).toBeGreaterThan(0)
  })

  it('still needs a key', async () => {
    app = build()
    const etag = await currentEtag()
    const res = await app.inject({ url, headers: { 'if-none-match': etag } })
    expect(res.statusCode).toBe(401)
    expect(res.headers.etag).toBeUndefined()
  })
})
