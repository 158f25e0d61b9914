import { createHash } from 'node:crypto'
import { afterAll, describe, expect, it } from 'vitest'
import { createLifecycle } from '../../src/repositories/lifecycle.js'
import { MAX_MEMBERS, MemberList, MemberListBuilder } from '../../src/repositories/member-list.js'
import { createPostgresSource } from '../../src/repositories/sources/postgres.js'
import type { Member } from '../../src/schemas/member.js'
import { KEYS, bearer, build, makeData, watchLifecycle } from '../helper.js'
import { databaseWith, sharedPostgres } from '../postgres.js'

const members = (count: number, prefix = 'user'): Member[] => Array.from({ length: count }, (_, i) => ({
  id: `${prefix}_${i}`, email: `${prefix}${i}@example.com`, first_name: i % 3 === 0 ? null : `First ${i}`, last_name: 'Ünïcode', role: i === 0 ? 'org:admin' : 'org:member'
}))

describe('a member list written a chunk at a time', () => {
  it('holds the members\' JSON joined by commas, pages across its chunks, and is versioned by its SHA-1 whatever the chunks', () => {
    const all = members(2500)
    const list = MemberList.of(all)
    const text = all.map((member) => JSON.stringify(member)).join(',')
    expect(list.digest).toBe(createHash('sha1').update(text).digest('base64url'))
    expect(list.length).toBe(2500)
    expect(list.slice()).toEqual(all)
    // Every page, those across the end of a chunk (128 KiB, some 1,100 of these members) among them.
    for (let offset = 0; offset < 2500; offset += 7) {
      expect(JSON.parse(list.page(offset, 7).json.toString())).toEqual({ data: all.slice(offset, offset + 7), total_count: 2500 })
    }
    expect(list.slice(2040, 2060)).toEqual(all.slice(2040, 2060))
    expect(MemberList.of([]).page(0, 10).json.toString()).toBe('{"data":[],"total_count":0}')
  })

  it('keeps each list as it was made while the builders after it write theirs, one left unfinished among them', () => {
    const first = MemberList.of(members(10, 'first'))
    const left = new MemberListBuilder('an organization refused halfway')
    for (const member of members(5, 'left')) left.add(member)
    const large = MemberList.of(members(3000, 'large'))
    const last = MemberList.of(members(10, 'last'))
    expect(first.slice()).toEqual(members(10, 'first'))
    expect(large.slice()).toEqual(members(3000, 'large'))
    expect(last.slice()).toEqual(members(10, 'last'))
    expect(left.finish().slice()).toEqual(members(5, 'left'))
  })

  it(`refuses an organization of more than ${MAX_MEMBERS} members, naming it`, () => {
    expect(() => MemberList.of(members(MAX_MEMBERS + 1), 'organizations.json: [0].members'))
      .toThrow(`organizations.json: [0].members: more than ${MAX_MEMBERS} members, the most an organization may have`)
  })
})

describe('an organization past the most members, in PostgreSQL', () => {
  const server = sharedPostgres()
  afterAll(() => server.close())

  it('is refused alone in one line while the others keep changing, and is served again once back under it', async () => {
    const { url, client: admin } = await databaseWith(server, makeData())
    const lifecycle = createLifecycle(createPostgresSource({ url, connectTimeoutMs: 0 }))
    try {
      await lifecycle.load()
      const watch = watchLifecycle(lifecycle, 60_000)
      const app = build({ snapshots: lifecycle })
      const page = async (key: string) => (await app.inject({ url: '/v1/organization/members?limit=1', headers: bearer(key) })).json()
      expect((await page(KEYS.alphaManagement)).total_count).toBe(250)
      // org_alpha grows past the bound in one statement; org_beta changes afterwards.
      await admin.query(`INSERT INTO members (organization_id, id, email, role, position)
        SELECT 'org_alpha', 'bulk_' || n, 'bulk' || n || '@example.com', 'org:member', 1000 + n FROM generate_series(1, ${MAX_MEMBERS}) AS n`)
      expect(await watch.refusal()).toEqual({ kind: 'organizations', problem: `table members, organization_id "org_alpha": more than ${MAX_MEMBERS} members, the most an organization may have` })
      await admin.query("UPDATE members SET email = 'changed@example.com' WHERE organization_id = 'org_beta' AND id = (SELECT min(id) FROM members WHERE organization_id = 'org_beta')")
      await watch.until((data) => data.organizations.some((organization) => organization.id === 'org_beta' && organization.members.slice().some((member) => member.email === 'changed@example.com')))
      // Not served while it is refused, on every replica alike, as any refused organization.
      expect(await page(KEYS.alphaManagement)).toEqual({ error: { code: 404, message: 'Organization org_alpha not found' } })
      await admin.query("DELETE FROM members WHERE organization_id = 'org_alpha' AND position > 1001")
      await watch.until((data) => data.organizations.some((organization) => organization.id === 'org_alpha' && organization.members.length === 251))
      expect((await page(KEYS.alphaManagement)).total_count).toBe(251)
    } finally {
      await lifecycle.close()
      await admin.end()
    }
  })
})
