import { describe, expect, it } from 'vitest'
import { KEYS, bearer, build, makeData, makeProvider } from '../../helper.js'

describe('GET /v1/providers', () => {
  it('lists the providers of the data, in order, as JSON', async () => {
    const data = makeData()
    const app = build({ data })
    const res = await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8')
    expect(res.json()).toEqual({ data: data.providers })
  })

  it('keeps absent optional fields absent and null values null', async () => {
    const sparse = { name: 'Sparse', slug: 'sparse', privacy_policy_url: null }
    const nulls = makeProvider(9, { status_page_url: null, terms_of_service_url: null, headquarters: null, datacenters: null })
    const app = build({ data: makeData({ providers: [sparse, nulls] }) })
    const res = await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })
    const [first, second] = res.json().data
    expect(first).toStrictEqual(sparse)
    expect(Object.keys(first)).toEqual(['name', 'slug', 'privacy_policy_url'])
    expect(second).toStrictEqual(nulls)
  })

  it('answers an empty list when there are no providers', async () => {
    const app = build({ data: makeData({ providers: [] }) })
    const res = await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })
    expect(res.json()).toEqual({ data: [] })
  })

  it('needs a key', async () => {
    const app = build()
    const res = await app.inject({ url: '/v1/providers' })
    expect(res.statusCode).toBe(401)
    expect(res.json().error.code).toBe(401)
  })
})
