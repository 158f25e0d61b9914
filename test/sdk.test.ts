import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { OpenRouter } from '@openrouter/sdk'
import { KEYS, build, makeData, makeMembers } from './helper.js'

// The official client, unchanged, against a listening server: the compatibility promise.
describe('the official @openrouter/sdk client', () => {
  const data = makeData()
  data.organizations[0]!.members = makeMembers('alpha', 345)
  const app = build({ data })
  let serverURL: string
  const client = (apiKey: string) => new OpenRouter({ apiKey, serverURL, retryConfig: { strategy: 'none' } })

  beforeAll(async () => {
    const address = await app.listen({ host: '127.0.0.1', port: 0 })
    serverURL = `${address}/v1`
  })
  afterAll(() => app.close())

  it('lists providers', async () => {
    const res = await client(KEYS.alphaStandard).providers.list()
    expect(res.data.map((p) => p.slug)).toEqual(data.providers.map((p) => p.slug))
    expect(res.data[0]).toMatchObject({ name: 'Provider 1', privacyPolicyUrl: 'https://provider-1.example/privacy', headquarters: 'US', datacenters: ['US', 'DE'] })
  })

  it('lists ZDR endpoints', async () => {
    const res = await client(KEYS.alphaStandard).endpoints.listZdrEndpoints()
    expect(res.data).toHaveLength(data.endpoints.length)
    expect(res.data[0]).toMatchObject({ modelId: 'vendor/model-1', contextLength: 131072, pricing: { prompt: '0.0000003' }, supportsToolChoice: { required: false } })
  })

  it.each([undefined, 100, 7])('pages through all members with its own pager (limit %s)', async (limit) => {
    const pages = await client(KEYS.alphaManagement).organization.listMembers(limit === undefined ? {} : { limit })
    const ids: string[] = []
    for await (const page of pages) {
      expect(page.result.totalCount).toBe(345)
      ids.push(...page.result.data.map((member) => member.id))
    }
    expect(ids).toEqual(data.organizations[0]!.members.map((member) => member.id))
  })

  it('raises its error classes for a bad key and a missing organization', async () => {
    await expect(client('wrong').organization.listMembers()).rejects.toMatchObject({ name: 'UnauthorizedResponseError', statusCode: 401 })
    await expect(client(KEYS.orphanManagement).organization.listMembers()).rejects.toMatchObject({ name: 'NotFoundResponseError', statusCode: 404 })
  })
})
