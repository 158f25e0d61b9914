import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { readJsonFile } from '../../src/repositories/json-file.js'
import { readOrganizationsFile } from '../../src/repositories/organizations-file.js'
import { createSnapshot } from '../../src/repositories/snapshot.js'
import { blockIndex } from '../../src/repositories/member-list.js'
import { makeData } from '../helper.js'

let dir: string
beforeEach(async () => { dir = await mkdtemp(join(tmpdir(), 'organizations-file-')) })
afterEach(() => rm(dir, { recursive: true, force: true }))

async function write (content: string | Buffer) {
  const path = join(dir, 'organizations.json')
  await writeFile(path, content)
  return path
}

/** What a member page of the organization at `index` holds, as the server sends it. */
async function page (path: string, index: number, offset: number, limit: number) {
  const organizations = await readOrganizationsFile(path, 'organizations.json')
  const snapshot = await createSnapshot(makeData({ organizations }))
  return snapshot.memberPage(organizations[index]!.id, offset, limit)!.json.toString()
}

/** Members with long names: 3,000 of them make 1.5 MB, more than one read, batch and block. */
function manyMembers (count: number) {
  return Array.from({ length: count }, (_, i) => ({
    id: `user_${i}`,
    email: `person${i}@big.example`,
    first_name: `First ${i} ${'x'.repeat(200)}`,
    last_name: i % 3 === 0 ? null : `Last ${i} ${'y'.repeat(200)}`,
    role: i === 0 ? 'org:admin' : 'org:member'
  }))
}

describe('reading organizations.json', () => {
  it('serves every member as JSON.stringify writes it, whatever the file\'s spacing and escapes', async () => {
    const text = `\ufeff[ { "name": "Odd", "members" : [
      {"id": "a", "email": "a@o.example", "first_name": "Zo\\u00eb", "last_name": "\\/slash\\"", "role": "org:admin"} ,
      {"id":"b","email":"b@o.example","first_name":"li\\n","last_name":null,"role":"org:member","role":"org:admin"},
      {"id":"c","email":"c@o.example","first_name":"🦊","last_name":"tab\\t\\/","role":"org:member"}
    ], "id": "org_odd" } ]`
    const path = await write(text)
    const members = JSON.parse(text.slice(1))[0].members
    expect(await page(path, 0, 0, 100)).toBe(JSON.stringify({ data: members, total_count: 3 }))
    expect(await page(path, 0, 1, 1)).toBe(JSON.stringify({ data: members.slice(1, 2), total_count: 3 }))
    expect((await readOrganizationsFile(path, 'organizations.json'))[0]).toStrictEqual({ name: 'Odd', members: expect.anything(), id: 'org_odd' })
  })

  it('reads a large organization across reads, batches and blocks, every page exact', async () => {
    const members = manyMembers(3000)
    const path = await write(JSON.stringify([{ id: 'org_small', name: 'Small', members: members.slice(0, 2) }, { id: 'org_big', name: 'Big', members }]))
    const organizations = await readOrganizationsFile(path, 'organizations.json')
    expect(organizations.map((organization) => organization.members.length)).toEqual([2, 3000])
    expect(organizations[1]!.members.slice()).toEqual(members)
    for (const [offset, limit] of [[0, 100], [1020, 100], [2950, 100], [2999, 5], [3000, 1]] as const) {
      expect(await page(path, 1, offset, limit)).toBe(JSON.stringify({ data: members.slice(offset, offset + limit), total_count: 3000 }))
    }
  })

  it('names a member whose id repeats, however far apart', async () => {
    const members = manyMembers(3000)
    members[2500] = { ...members[2500]!, id: 'user_7' }
    const path = await write(JSON.stringify([{ id: 'org_big', name: 'Big', members }]))
    await expect(readOrganizationsFile(path, 'organizations.json')).rejects.toThrow('organizations.json: [0].members[2500].id: "user_7" duplicates [0].members[7].id')
  })

  it.each([
    ['a member that is not an object', '[{"id":"o","name":"O","members":[5]}]', 'organizations.json: [0].members[0]: 5: expected object'],
    ['a bad field of a member', '[{"id":"o","name":"O","members":[{"id":"u","email":"u@o.example","first_name":null,"last_name":null,"role":"owner"}]}]',
      'organizations.json: [0].members[0].role: "owner" is not one of "org:admin", "org:member"'],
    ['an organization without a name', '[{"id":"o","members":[]}]', 'organizations.json: [0].name: is required'],
    ['members that are not an array', '[{"id":"o","name":"O","members":{}}]', 'organizations.json: [0].members: an object: expected array'],
    ['a file that is not an array', '{"members":[1]}', 'organizations.json: (top level): an object: expected array']
  ])('refuses %s, naming organization, member and field', async (_case, text, message) => {
    await expect(readOrganizationsFile(await write(text), 'organizations.json')).rejects.toThrow(message)
  })

  it.each([
    ['a member', `[{"id":"o","name":"O","members":[{"id":"a","email":"a@o.example","first_name":null,"last_name":null,"role":"org:admin"},{"id":"${'b'.repeat(3 * 1024 * 1024)}"}]}]`,
      'organizations.json: [0].members[1]: a member of more than 1 MiB'],
    ['an organization besides its members', `[{"id":"o","name":"O","members":[]},{"id":"p","members":[],"name":"${'P'.repeat(3 * 1024 * 1024)}"}]`,
      'organizations.json: [1]: an organization of more than 1 MiB besides its members']
  ])('refuses %s of more than 1 MiB before it parses it', async (_case, text, message) => {
    await expect(readOrganizationsFile(await write(text), 'organizations.json')).rejects.toThrow(message)
  })

  it.each([
    ['a trailing comma among members', '[{"id":"o","name":"O","members":[{"id":"a"},]}]'],
    ['a missing comma between members', '[{"id":"o","name":"O","members":[{"id":"a"} {"id":"b"}]}]'],
    ['a member cut short', '[{"id":"o","name":"O","members":[{"id":"a",}]}]'],
    ['a file cut short', '[{"id":"o","name":"O","members":[{"id":"a"}'],
    ['bytes that are not UTF-8', Buffer.concat([Buffer.from('[{"id":"o","name":"O","members":[{"id":"'), Buffer.from([0xff]), Buffer.from('"}]}]')])],
    ['nesting too deep in a member', `[{"id":"o","name":"O","members":[${'['.repeat(80)}${']'.repeat(80)}]}]`]
  ])('locates %s as for any data file', async (_case, text) => {
    const path = await write(text)
    const expected = await readJsonFile(path, 'organizations.json').then(() => 'read', (error: Error) => error.message)
    expect(expected).not.toBe('read')
    await expect(readOrganizationsFile(path, 'organizations.json')).rejects.toThrow(expected)
  })

  it('reads a change made to a large organization, the data read before unchanged', async () => {
    const members = manyMembers(3000)
    const path = await write(JSON.stringify([{ id: 'org_big', name: 'Big', members }]))
    const before = await readOrganizationsFile(path, 'organizations.json')
    members[1500] = { ...members[1500]!, email: 'changed@big.example' }
    await write(JSON.stringify([{ id: 'org_big', name: 'Big', members }]))
    const after = await readOrganizationsFile(path, 'organizations.json', await blockIndex(before))
    expect(after[0]!.members.slice()).toEqual(members)
    expect(before[0]!.members.slice(1500, 1501)[0]!.email).toBe('person1500@big.example')
  })
})
