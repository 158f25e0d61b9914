import { describe, expect, it } from 'vitest'
import { applyChange, compactIndex, createSnapshot, withRecords, type Snapshot } from '../../src/repositories/snapshot.js'
import { MemberList } from '../../src/repositories/member-list.js'
import type { Organization } from '../../src/repositories/records.js'
import type { ApiKey } from '../../src/schemas/keys-and-organizations.js'
import { makeData, makeMembers, recordsOf, sha256 } from '../helper.js'

const key = (i: number, overrides: Partial<ApiKey> = {}): ApiKey => ({
  name: `key-${i}`, sha256: sha256(`k${i}`), kind: i % 7 === 0 ? 'management' : 'standard', organization_id: `org_${i % 13}`, ...overrides
})
const keys = (count: number) => Array.from({ length: count }, (_, i) => key(i))

/** The snapshot a change to the keys makes of `before`, read whole. */
async function changed (before: Snapshot, next: readonly ApiKey[]) {
  return before.withIndex('keys', await applyChange(before.indexes.keys, { kind: 'keys', whole: next }), before.version + 1)
}

/** What a replica that loads these keys from scratch serves. */
const fresh = (next: ApiKey[]) => createSnapshot({ ...makeData(), keys: next })

describe('keys changed in a snapshot', () => {
  it('serves, after a change read whole, what a replica loading the same keys serves, fingerprint included', async () => {
    const before = await fresh(keys(5000))
    const next = keys(5000)
    next.splice(10, 1) // revoked
    next.push(key(9000)) // minted
    next[20] = { ...next[20]!, organization_id: 'org_moved', kind: 'management' }
    // Two keys swap hashes in one change.
    const [a, b] = [next[30]!, next[31]!]
    next[30] = { ...a, sha256: b.sha256 }
    next[31] = { ...b, sha256: a.sha256 }
    const after = await changed(before, next)
    const replica = await fresh(next)
    expect(after.fingerprint).toBe(replica.fingerprint)
    expect(after.fingerprint).not.toBe(before.fingerprint)
    expect(recordsOf(after).keys).toEqual(recordsOf(replica).keys)
    expect(after.findKey(sha256('k10'))).toBeUndefined()
    expect(after.findKey(sha256('k9000'))).toEqual(key(9000))
    expect(after.findKey(b.sha256)).toEqual({ ...a, sha256: b.sha256 })
    expect(after.counts().keys).toBe(5000)
    expect(before.findKey(sha256('k10'))).toEqual(key(10))
  })

  it('changes the fingerprint when two keys swap organizations', async () => {
    const before = await fresh(keys(100))
    const next = keys(100)
    next[1] = { ...next[1]!, organization_id: next[2]!.organization_id }
    next[2] = { ...next[2]!, organization_id: key(1).organization_id }
    expect((await changed(before, next)).fingerprint).not.toBe(before.fingerprint)
  })

  it('changes the fingerprint when a key\'s hash changes only in its last digits', async () => {
    // Placeholders such as lpad(n, 64, '0') differ nowhere else.
    const placeholders = keys(100).map((k, i) => ({ ...k, sha256: String(i).padStart(64, '0') }))
    const before = await fresh(placeholders)
    const next = placeholders.map((k, i) => i === 3 ? { ...k, sha256: String(1000).padStart(64, '0') } : k)
    const after = await changed(before, next)
    expect(after.fingerprint).not.toBe(before.fingerprint)
    expect(after.fingerprint).toBe((await fresh(next)).fingerprint)
  })

  it('makes a new table of a change too large for an overlay, the same as a fresh load', async () => {
    const before = await fresh(keys(20_000))
    const next = keys(20_000).map((k, i) => ({ ...k, sha256: sha256(`rotated${i}`) }))
    const after = await changed(before, next)
    expect(after.indexes.keys.table).not.toBe(before.indexes.keys.table)
    expect(after.fingerprint).toBe((await fresh(next)).fingerprint)
    expect(after.findKey(sha256('k5'))).toBeUndefined()
    expect(after.findKey(sha256('rotated5'))).toEqual({ ...key(5), sha256: sha256('rotated5') })
  })

  it('makes a new table when most keys are removed, not an overlay of tombstones', async () => {
    const before = await fresh(keys(20_000))
    const next = keys(100)
    const after = await changed(before, next)
    expect(after.indexes.keys.table).not.toBe(before.indexes.keys.table)
    expect(after.indexes.keys.table.size).toBe(100)
    expect(after.fingerprint).toBe((await fresh(next)).fingerprint)
    expect(after.findKey(sha256('k500'))).toBeUndefined()
  })

  it.each([
    ['a new key with the hash of a key that keeps it', (next: ApiKey[]) => next.push(key(9000, { sha256: sha256('k3') })),
      'keys: [100].sha256: the value duplicates [3].sha256'],
    ['a key given the hash of a later key that keeps it', (next: ApiKey[]) => { next[2] = { ...next[2]!, sha256: sha256('k50') } },
      'keys: [50].sha256: the value duplicates [2].sha256'],
    ['two new keys with one hash', (next: ApiKey[]) => next.push(key(9000), key(9001, { sha256: sha256('k9000') })),
      'keys: [101].sha256: the value duplicates [100].sha256'],
    ['a name twice', (next: ApiKey[]) => next.push(key(7, { sha256: sha256('other') })),
      'keys: [100].name: "key-7" duplicates [7].name'],
    ['a new name twice', (next: ApiKey[]) => next.push(key(9000), key(9000, { sha256: sha256('other') })),
      'keys: [101].name: "key-9000" duplicates [100].name']
  ])('refuses %s, naming both records and never the hash', async (_, spoil, message) => {
    const before = await fresh(keys(100))
    const next = keys(100)
    spoil(next)
    await expect(changed(before, next)).rejects.toThrow(message)
  })

  it('finds, changes and refuses keys by names outside ASCII as by any other', async () => {
    const names = ['clé-1', 'ключ-2', '🔑-3', 'key-4', 'Straße-5', 'ke-6', 'kè-7']
    const before = await fresh(names.map((name, i) => key(i, { name })))
    expect(before.findKey(sha256('k1'))?.name).toBe('ключ-2')
    expect(before.findKey(sha256('k2'))?.name).toBe('🔑-3')
    // A name of the same length in UTF-16 as another, one byte apart in UTF-8, is another name.
    const next = names.filter((name) => name !== '🔑-3').map((name) => key(names.indexOf(name), { name }))
    next.push(key(50, { name: '🔑-3b' }), key(51, { name: 'ké-6' }))
    const after = await changed(before, next)
    expect(after.findKey(sha256('k2'))).toBeUndefined()
    expect(after.findKey(sha256('k51'))?.name).toBe('ké-6')
    expect(after.findKey(sha256('k5'))?.name).toBe('ke-6')
    expect(after.fingerprint).toBe((await fresh(next)).fingerprint)
    await expect(changed(before, [...next, key(60, { name: 'clé-1' })])).rejects.toThrow('keys: [8].name: "clé-1" duplicates [0].name')
    await expect(fresh([key(0, { name: '🔑' }), key(1, { name: '🔑' })])).rejects.toThrow('keys: [1].name: "🔑" duplicates [0].name')
  })

  it('accepts a hash moved from one key to another in the same change', async () => {
    const before = await fresh(keys(100))
    const next = keys(100)
    next[4] = { ...next[4]!, sha256: sha256('k5') }
    next[5] = { ...next[5]!, sha256: sha256('new') }
    const after = await changed(before, next)
    expect(after.findKey(sha256('k5'))?.name).toBe('key-4')
    expect(after.fingerprint).toBe((await fresh(next)).fingerprint)
  })

  it('folds a grown overlay into a new table off to the side, and takes later changes onto it', async () => {
    // Names outside ASCII in the table folded: its rows are copied as bytes.
    const base = keys(1000).map((k) => ({ ...k, name: k.name.replace('key', 'clé') }))
    let snapshot = await fresh(base)
    const expected = [...base]
    // More changes than the overlay holds before it is folded (4,096), one named key at a time.
    for (let i = 0; i < 4200; i++) {
      const next = key(10_000 + i)
      expected.push(next)
      snapshot = snapshot.withIndex('keys', await applyChange(snapshot.indexes.keys, { kind: 'keys', upsert: [next], remove: [`clé-${i % 500}`] }), snapshot.version + 1)
      if (i < 500) expected.splice(expected.findIndex((k) => k.name === `clé-${i}`), 1)
    }
    const from = snapshot.indexes.keys
    const compacted = (await compactIndex<'keys'>(from))!
    expect(compacted).toBeDefined()
    // A change installed while the compaction ran, carried over onto it as the lifecycle does.
    const later = withRecords<'keys'>(compacted, [key(99_999)], ['key-10000'])
    expect(later.table).toBe(compacted.table)
    expect(later.table).not.toBe(from.table)
    const served = snapshot.withIndex('keys', later, snapshot.version + 1)
    const final = [...expected.filter((k) => k.name !== 'key-10000'), key(99_999)]
    expect(served.fingerprint).toBe((await fresh(final)).fingerprint)
    expect(recordsOf(served).keys).toEqual(recordsOf(await fresh(final)).keys)
    expect(served.findKey(sha256('k10000'))).toBeUndefined()
    expect(served.findKey(sha256('k999'))?.name).toBe('clé-999')
    expect(served.findKey(sha256('k99999'))).toEqual(key(99_999))
  })
})

describe('organizations changed in a snapshot', () => {
  const organization = (i: number, overrides: Partial<Organization> = {}): Organization =>
    ({ id: `org_${i}`, name: `Organization ${i}`, members: makeMembers(`o${i}`, 10), ...overrides })
  const organizations = () => Array.from({ length: 50 }, (_, i) => organization(i))
  const withOrganizations = (next: Organization[]) => createSnapshot({ ...makeData(), organizations: next })

  it.each([
    ['an organization\'s name changes', (next: Organization[]) => { next[3] = { ...next[3]!, name: 'Organization 3b' } }],
    ['two organizations swap names', (next: Organization[]) => { next[3] = { ...next[3]!, name: next[4]!.name }; next[4] = { ...next[4]!, name: organization(3).name } }],
    ['an organization\'s id changes', (next: Organization[]) => { next[3] = { ...next[3]!, id: 'org_3b' } }],
    ['a member\'s first name changes', (next: Organization[]) => {
      const members = next[3]!.members.slice()
      next[3] = { ...next[3]!, members: MemberList.of(members.map((member, i) => i === 9 ? { ...member, first_name: 'Other' } : member)) }
    }],
    ['two organizations swap members', (next: Organization[]) => { next[3] = { ...next[3]!, members: next[4]!.members }; next[4] = { ...next[4]!, members: organization(3).members } }]
  ])('changes the fingerprint when %s, to what a replica loading the same organizations shows', async (_, spoil) => {
    const before = await withOrganizations(organizations())
    const next = organizations()
    spoil(next)
    const removed = organizations().filter(({ id }) => !next.some((other) => other.id === id)).map(({ id }) => id)
    const after = before.withIndex('organizations', withRecords<'organizations'>(before.indexes.organizations, next, removed), before.version + 1)
    expect(after.fingerprint).not.toBe(before.fingerprint)
    expect(after.fingerprint).toBe((await withOrganizations(next)).fingerprint)
    expect((await withOrganizations(organizations())).fingerprint).toBe(before.fingerprint)
  })
})

describe('previous secrets changed by name', () => {
  it('authenticate, after any change, as on a replica that loads the same keys (current first, else the one key alone that names it)', async () => {
    // Keys that share a handful of secrets as current and previous ones, changed a few at a time by
    // name: after each change, every secret answers as it does from a fresh load of the same keys.
    let seed = 7
    const random = (n: number) => {
      seed = (Math.imul(seed, 1103515245) + 12345) & 0x7fffffff
      // The high bits: the low ones of this generator repeat with a short period.
      return Math.floor(seed / 0x80000000 * n)
    }
    const secrets = Array.from({ length: 6 }, (_, i) => sha256(`shared-${i}`))
    const next = (i: number): ApiKey => {
      const current = random(3) === 0 ? secrets[random(secrets.length)]! : sha256(`own-${i}-${random(1000)}`)
      const previous = random(2) === 0 ? { sha256: secrets[random(secrets.length)]!, expires_at: '2099-01-01T00:00:00.000Z' } : undefined
      return key(i, previous === undefined ? { sha256: current } : { sha256: current, previous })
    }
    /** Current secrets are unique: a key whose current another has already takes its own. */
    const unique = (all: ApiKey[]) => {
      const seen = new Set<string>()
      return all.map((k) => {
        const own = seen.has(k.sha256) ? { ...k, sha256: sha256(`own-${k.name}`) } : k
        seen.add(own.sha256)
        return own
      })
    }
    let current = unique(Array.from({ length: 12 }, (_, i) => next(i)))
    let snapshot = await fresh(current)
    for (let step = 0; step < 300; step++) {
      const edited = unique(current.map((k, i) => random(4) === 0 ? next(i) : k))
      const upsert = edited.filter((k, i) => k !== current[i])
      snapshot = snapshot.withIndex('keys', await applyChange(snapshot.indexes.keys, { kind: 'keys', upsert, remove: [] }), snapshot.version + 1)
      current = edited
      const replica = await fresh(current)
      // By their fields: a key of the table is an object of its own class, whose fields toEqual does not see.
      const seen = (found: ApiKey | undefined) => found && { name: found.name, kind: found.kind, organization: found.organization_id, expires_at: found.expires_at }
      for (const secret of [...secrets, ...current.map((k) => k.sha256)]) {
        expect(seen(snapshot.findKey(secret)), `step ${step}`).toEqual(seen(replica.findKey(secret)))
      }
    }
  })
})

describe('organizations refused in a snapshot', () => {
  it('tells one refused from one that does not exist, through a start, a change by name and a whole read, until a change serves it again', async () => {
    const data = makeData()
    const [alpha, beta] = data.organizations as [Organization, Organization]
    const problem = 'table members, organization_id "org_beta": more than 100000 members, the most an organization may have'
    const started = await createSnapshot({ ...data, organizations: [alpha] }, 1, { organizations: new Map([['org_beta', problem]]) })
    expect(started.members('org_beta')).toBeUndefined()
    expect(started.isRefused('org_beta')).toBe(true)
    expect(started.isRefused('org_nope')).toBe(false)
    // A change that refuses another and removes one keeps the first refused.
    const named = started.withIndex('organizations', withRecords(started.indexes.organizations, [], ['org_alpha'], new Map([['org_alpha', 'a bad row']])), 2)
    expect([named.isRefused('org_alpha'), named.isRefused('org_beta')]).toEqual([true, true])
    // A change that names it and does not refuse it serves it.
    const served = named.withIndex('organizations', withRecords(named.indexes.organizations, [beta], []), 3)
    expect(served.isRefused('org_beta')).toBe(false)
    expect(JSON.parse(served.members('org_beta')!.page(0, 10).toString()).total_count).toBe(beta.members.length)
    expect(served.isRefused('org_alpha')).toBe(true)
    // A whole read says all there is: none refused but those it refuses.
    const whole = served.withIndex('organizations', await applyChange(served.indexes.organizations, { kind: 'organizations', whole: [alpha, beta] }), 4)
    expect([whole.isRefused('org_alpha'), whole.isRefused('org_beta')]).toEqual([false, false])
    expect(started.isRefused('org_beta')).toBe(true)
  })
})
