import { describe, expect, it } from 'vitest'
import { KEYS, bearer, build, makeData } from '../../helper.js'
import { MemberList } from '../../../src/repositories/member-list.js'

const members = (query: string, key = KEYS.alphaManagement) => ({ url: `/v1/organization/members${query}`, headers: bearer(key) })

describe('GET /v1/organization/members', () => {
  it('answers the first 50 members and the total when no query is given', async () => {
    const data = makeData()
    const app = build({ data })
    const res = await app.inject(members(''))
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8')
    expect(res.json()).toEqual({ data: data.organizations[0]!.members.slice(0, 50), total_count: 250 })
  })

  it('answers the page that offset and limit select', async () => {
    const data = makeData()
    const app = build({ data })
    const res = await app.inject(members('?offset=100&limit=100'))
    expect(res.json()).toEqual({ data: data.organizations[0]!.members.slice(100, 200), total_count: 250 })
  })

  it('keeps null names null', async () => {
    const app = build()
    const [first] = (await app.inject(members('?limit=1'))).json().data
    expect(first).toStrictEqual({ id: 'user_alpha_0', email: 'person0@alpha.example', first_name: null, last_name: null, role: 'org:admin' })
  })

  it('pages concatenate to the whole list in fixture order, with no gap and no duplicate', async () => {
    const data = makeData()
    const app = build({ data })
    for (const limit of [1, 7, 50, 100]) {
      const seen = []
      for (let offset = 0; ; offset += limit) {
        const page = (await app.inject(members(`?offset=${offset}&limit=${limit}`))).json()
        expect(page.total_count).toBe(250)
        if (page.data.length === 0) break
        seen.push(...page.data)
      }
      expect(seen).toEqual(data.organizations[0]!.members.slice())
    }
  })

  it('pages members whose names are not ASCII, byte for byte', async () => {
    const names = ['Zoë', '李', 'Ångström', '🦊 Fox', 'O\'Brien "Quote"', 'back\\slash']
    const intl = names.map((name, i) => ({ id: `user_${i}`, email: `u${i}@intl.example`, first_name: name, last_name: name.toUpperCase(), role: 'org:member' as const }))
    const data = makeData({ organizations: [{ id: 'org_alpha', name: 'Alpha', members: MemberList.of(intl) }] })
    const app = build({ data })
    for (const [offset, limit] of [[0, 100], [1, 2], [3, 1], [5, 5]] as const) {
      const res = await app.inject(members(`?offset=${offset}&limit=${limit}`))
      expect(res.json()).toEqual({ data: intl.slice(offset, offset + limit), total_count: names.length })
    }
  })

  it('answers an empty page with the true total past the end', async () => {
    const app = build()
    const res = await app.inject(members('?offset=250'))
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({ data: [], total_count: 250 })
    expect((await app.inject(members('?offset=99999999999999999999'))).json()).toEqual({ data: [], total_count: 250 })
  })

  it('answers 400 to a limit of hundreds of digits (Infinity as a number), not the whole organization', async () => {
    const app = build()
    const res = await app.inject(members(`?limit=${'9'.repeat(400)}`))
    expect(res.statusCode).toBe(400)
    expect(res.json()).toEqual({ error: { code: 400, message: "Invalid query parameter 'limit': must be <= 100" } })
  })

  it('accepts the bounds of limit', async () => {
    const app = build()
    expect((await app.inject(members('?limit=1'))).json().data).toHaveLength(1)
    expect((await app.inject(members('?limit=100'))).json().data).toHaveLength(100)
    expect((await app.inject(members('?offset=0&limit=100'))).statusCode).toBe(200)
  })

  const badQueries: Array<[string, string]> = [
    ['limit=0', 'limit'], ['limit=101', 'limit'], ['limit=-1', 'limit'], ['limit=abc', 'limit'],
    ['limit=1.5', 'limit'], ['limit=', 'limit'], ['limit', 'limit'], ['limit=1e2', 'limit'], ['limit=1E1', 'limit'],
    ['limit=0x10', 'limit'], ['limit=+5', 'limit'], ['limit=%205', 'limit'], ['limit=5.0', 'limit'],
    ['limit=1000000000000000000000', 'limit'], ['limit=0100', 'limit'], ['limit=5&limit=6', 'limit'], ['limit=5&limit=5', 'limit'],
    ['offset=-1', 'offset'], ['offset=abc', 'offset'], ['offset=1.5', 'offset'], ['offset=', 'offset'],
    ['offset=1e3', 'offset'], ['offset=Infinity', 'offset'], ['offset=0&offset=1', 'offset']
  ]
  it.each(badQueries)('rejects ?%s with 400 naming the parameter', async (query, parameter) => {
    const app = build()
    const res = await app.inject(members(`?${query}`))
    expect(res.statusCode).toBe(400)
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8')
    const body = res.json()
    expect(body.error.code).toBe(400)
    expect(body.error.message).toContain(`'${parameter}'`)
    expect(Object.keys(body)).toEqual(['error'])
  })

  it('shows a key only the members of its own organization', async () => {
    const data = makeData()
    const app = build({ data })
    const alpha = (await app.inject(members('?limit=100', KEYS.alphaManagement))).json()
    const beta = (await app.inject(members('?limit=100', KEYS.betaManagement))).json()
    expect(beta).toEqual({ data: data.organizations[1]!.members.slice(), total_count: 3 })
    expect(alpha.total_count).toBe(250)
    const betaIds = new Set(beta.data.map((m: { id: string }) => m.id))
    expect(alpha.data.some((m: { id: string }) => betaIds.has(m.id))).toBe(false)
  })

  it('refuses a standard key with 403', async () => {
    const app = build()
    const res = await app.inject(members('', KEYS.alphaStandard))
    expect(res.statusCode).toBe(403)
    expect(res.json()).toEqual({ error: { code: 403, message: 'Only management keys can perform this operation' } })
  })

  it('refuses a standard key with 403 even when the query is also wrong', async () => {
    const app = build()
    expect((await app.inject(members('?limit=0', KEYS.alphaStandard))).statusCode).toBe(403)
  })

  it('answers 404 for a management key whose organization does not exist', async () => {
    const app = build()
    const res = await app.inject(members('', KEYS.orphanManagement))
    expect(res.statusCode).toBe(404)
    expect(res.json()).toEqual({ error: { code: 404, message: 'Organization org_gone not found' } })
  })

  it('answers 401 without a key', async () => {
    const app = build()
    const res = await app.inject({ url: '/v1/organization/members' })
    expect(res.statusCode).toBe(401)
    expect(res.json()).toEqual({ error: { code: 401, message: 'Missing Authentication header: send Authorization: Bearer <key>' } })
  })
})
