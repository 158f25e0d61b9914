import { randomBytes } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { Value } from '@sinclair/typebox/value'
import { KeyTable, KeyTableBuilder, isApiKey } from '../../src/repositories/key-table.js'
import { recordProblem } from '../../src/repositories/records.js'
import { ApiKeySchema } from '../../src/schemas/keys-and-organizations.js'
import { sha256 } from '../helper.js'

describe('isApiKey', () => {
  const valid = { name: 'key-1', sha256: sha256('key-1'), kind: 'standard', organization_id: 'org_1' }
  // Each field valid and invalid in each way the schema tells apart.
  const { organization_id: _, ...withoutOrganization } = valid
  const cases: Array<[string, unknown]> = [
    ['a valid key', valid],
    ['a management key', { ...valid, kind: 'management' }],
    ['a name of one character', { ...valid, name: 'k' }],
    ['a name of 256 characters', { ...valid, name: 'k'.repeat(256) }],
    ['a name of 257 characters', { ...valid, name: 'k'.repeat(257) }],
    ['an empty name', { ...valid, name: '' }],
    ['a name that is no string', { ...valid, name: 1 }],
    ['a null name', { ...valid, name: null }],
    ['a name outside ASCII', { ...valid, name: 'clé-🔑' }],
    ['a name with a lone surrogate', { ...valid, name: 'key-\ud800' }],
    ['a name with a lone low surrogate', { ...valid, name: '\udc00key' }],
    ['a hash in capitals', { ...valid, sha256: valid.sha256.toUpperCase() }],
    ['a hash with one capital', { ...valid, sha256: `A${valid.sha256.slice(1)}` }],
    ['a hash one digit short', { ...valid, sha256: valid.sha256.slice(1) }],
    ['a hash one digit long', { ...valid, sha256: `${valid.sha256}0` }],
    ['a hash with a letter past f', { ...valid, sha256: `${valid.sha256.slice(0, 63)}g` }],
    ['a hash with a space', { ...valid, sha256: ` ${valid.sha256.slice(1)}` }],
    ['a hash of 64 non-ASCII letters', { ...valid, sha256: 'é'.repeat(64) }],
    ['a null hash', { ...valid, sha256: null }],
    ['a kind that does not exist', { ...valid, kind: 'admin' }],
    ['a kind in capitals', { ...valid, kind: 'Standard' }],
    ['a null kind', { ...valid, kind: null }],
    ['an empty organization', { ...valid, organization_id: '' }],
    ['an organization of 256 characters', { ...valid, organization_id: 'o'.repeat(256) }],
    ['an organization of 257 characters', { ...valid, organization_id: 'o'.repeat(257) }],
    ['a null organization', { ...valid, organization_id: null }],
    ['an expiry', { ...valid, expires_at: '2026-12-31T23:59:59Z' }],
    ['a null expiry', { ...valid, expires_at: null }],
    ['an expiry without its time zone', { ...valid, expires_at: '2026-12-31T23:59:59' }],
    ['a key disabled', { ...valid, disabled: true }],
    ['a key not disabled', { ...valid, disabled: false }],
    ['disabled as a string', { ...valid, disabled: 'true' }],
    ['a null disabled', { ...valid, disabled: null }],
    ['a limit of its own', { ...valid, rate_limit_per_minute: 3 }],
    ['a null limit', { ...valid, rate_limit_per_minute: null }],
    ['a limit of 0', { ...valid, rate_limit_per_minute: 0 }],
    ['a limit of a billion', { ...valid, rate_limit_per_minute: 1_000_000_000 }],
    ['a limit past a billion', { ...valid, rate_limit_per_minute: 1_000_000_001 }],
    ['a limit that is no whole number', { ...valid, rate_limit_per_minute: 2.5 }],
    ['a limit as a string', { ...valid, rate_limit_per_minute: '3' }],
    ['a previous secret', { ...valid, previous: { sha256: sha256('before'), expires_at: '2026-12-31T23:59:59Z' } }],
    ['a null previous secret', { ...valid, previous: null }],
    ['a previous secret without its end', { ...valid, previous: { sha256: sha256('before') } }],
    ['a previous secret whose end is null', { ...valid, previous: { sha256: sha256('before'), expires_at: null } }],
    ['a previous secret in capitals', { ...valid, previous: { sha256: sha256('before').toUpperCase(), expires_at: '2026-12-31T23:59:59Z' } }],
    ['a previous secret with a field more', { ...valid, previous: { sha256: sha256('before'), expires_at: '2026-12-31T23:59:59Z', name: 'x' } }],
    ['a previous secret that is a string', { ...valid, previous: sha256('before') }],
    ['every field', { ...valid, expires_at: '2026-12-31T23:59:59Z', disabled: true, rate_limit_per_minute: 3, previous: { sha256: sha256('before'), expires_at: '2026-12-31T23:59:59Z' } }],
    ['every field but a required one', { name: 'k', sha256: valid.sha256, kind: 'standard', expires_at: null, disabled: true, rate_limit_per_minute: 3, previous: null }],
    ['a field more', { ...valid, owner: 'x' }],
    ['a field missing', withoutOrganization],
    ['an array', [valid.name, valid.sha256, valid.kind, valid.organization_id]],
    ['null', null],
    ['a string', valid.name]
  ]

  it.each(cases)('gives the schema\'s verdict on %s', (_case, key) => {
    expect(isApiKey(key)).toBe(Value.Check(ApiKeySchema, key))
  })

  it('leaves the message to the schema', () => {
    expect(recordProblem('keys', { ...valid, kind: 'admin' }, 3)).toBe('[3].kind: "admin" is not one of "standard", "management"')
    expect(recordProblem('keys', { ...valid, owner: 'x' }, 3)).toMatch(/^\[3\]\.owner: /)
    expect(recordProblem('keys', { ...valid, name: 'key-\ud800' }, 3)).toBe('[3].name: "key-\\ud800" is not well-formed Unicode (a lone surrogate)')
  })

  it('tells valid keys from invalid ones (the cases above are not all of one verdict)', () => {
    expect(cases.filter(([, key]) => isApiKey(key)).map(([name]) => name))
      .toEqual(['a valid key', 'a management key', 'a name of one character', 'a name of 256 characters', 'a name outside ASCII', 'an organization of 256 characters',
        'an expiry', 'a null expiry', 'a key disabled', 'a key not disabled', 'a limit of its own', 'a null limit', 'a limit of a billion', 'a previous secret',
        'a null previous secret', 'every field'])
  })
})

describe('KeyTable', () => {
  const COUNT = 60000
  const keysOf = (shas: string[]) => shas.map((sha256, i) => ({ name: `key-${i}`, sha256, kind: 'standard' as const, organization_id: 'org_1' }))
  const randomHex = (digits: number) => randomBytes(digits / 2).toString('hex')
  // Random hashes give runs of some tens of slots at this size. A run as long as the set is what made
  // building take time quadratic in its size, and a lookup that landed in it slow.
  const SHORT_RUN = 200

  it.each([
    ['placeholders, lpad(n, 64, \'0\')', () => Array.from({ length: COUNT }, (_, i) => String(i).padStart(64, '0'))],
    ['values that share their first 32 bits, the rest random', () => Array.from({ length: COUNT }, () => `0f1e2d3c${randomHex(56)}`)],
    ['random values', () => Array.from({ length: COUNT }, () => randomHex(64))]
  ])('keeps every lookup by SHA-256 short, found or not, with hashes that are %s', (_case, shas) => {
    const keys = keysOf(shas())
    const table = KeyTable.of(keys, 'keys.json')
    expect(table.longestShaRun()).toBeLessThan(SHORT_RUN)
    for (const key of [keys[0]!, keys[COUNT / 2]!, keys[COUNT - 1]!]) expect(table.bySha.get(key.sha256)).toEqual(key)
    expect(table.bySha.get(String(COUNT).padStart(64, '0'))).toBeUndefined()
    expect(table.bySha.get(`0f1e2d3c${randomHex(56)}`)).toBeUndefined()
  })
})

describe('KeyTableBuilder', () => {
  const key = (i: number) => ({ name: `key-${i}`, sha256: sha256(`k${i}`), kind: 'standard' as const, organization_id: `org_${i % 7}` })
  const COUNT = 5000
  /** A builder of the first COUNT keys (and `more` after them), sized for `expected`, some rows given room ahead as a reader of rows does. */
  const built = async (expected: number, more: Array<ReturnType<typeof key>> = []) => {
    const builder = new KeyTableBuilder('table keys', expected)
    const all = [...Array.from({ length: COUNT }, (_, i) => key(i)), ...more]
    for (const [i, k] of all.entries()) {
      if (i % 1000 === 0) await builder.makeRoom(500)
      builder.add(k)
    }
    return await builder.finish()
  }

  it.each([
    ['sized for far fewer rows than came', 16],
    ['sized for a few fewer rows than came', COUNT - 10],
    ['sized for its rows', COUNT],
    ['sized for far more rows than came', COUNT * 10]
  ])('finds every key by name and by SHA-256, %s', async (_case, expected) => {
    const table = await built(expected)
    expect(table.size).toBe(COUNT)
    for (let i = 0; i < COUNT; i++) {
      expect(table.byName.get(`key-${i}`)).toEqual(key(i))
      expect(table.bySha.get(sha256(`k${i}`))).toEqual(key(i))
    }
    expect(table.byName.get(`key-${COUNT}`)).toBeUndefined()
    expect(table.bySha.get(sha256(`k${COUNT}`))).toBeUndefined()
    expect([...table.values()]).toEqual(Array.from({ length: COUNT }, (_, i) => key(i)))
  })

  it.each([16, COUNT - 10, COUNT * 10])('refuses a name or a SHA-256 met twice, naming both rows, sized for %i rows', async (expected) => {
    await expect(built(expected, [{ ...key(COUNT), name: 'key-10' }])).rejects.toThrow(`table keys: [${COUNT}].name: "key-10" duplicates [10].name`)
    await expect(built(expected, [{ ...key(COUNT), sha256: sha256('k4321') }])).rejects.toThrow(`table keys: [${COUNT}].sha256: the value duplicates [4321].sha256`)
  })

  it('sums the same keys to the same fingerprint however it was sized', async () => {
    const sums = await Promise.all([16, COUNT, COUNT * 10].map(async (expected) => (await built(expected)).sum))
    expect(new Set(sums).size).toBe(1)
    expect(KeyTable.of(Array.from({ length: COUNT }, (_, i) => key(i)), 'keys').sum).toBe(sums[0])
  })
})

describe('a previous secret several keys name', () => {
  const shared = { sha256: sha256('shared'), expires_at: '2099-01-01T00:00:00.000Z' }
  const alpha = { name: 'alpha', sha256: sha256('alpha'), kind: 'standard' as const, organization_id: 'org_a', previous: shared }
  const beta = { name: 'beta', sha256: sha256('beta'), kind: 'management' as const, organization_id: 'org_b', previous: shared }

  it('authenticates neither key, whatever their order (it gave the secret to the first)', () => {
    for (const keys of [[alpha, beta], [beta, alpha]]) {
      const table = KeyTable.of(keys, 'keys.json')
      expect(table.bySha.get(shared.sha256)).toBeUndefined()
      expect(table.bySha.size).toBe(2)
      expect(table.byPrevious.get(shared.sha256)).toEqual(keys.map((key) => key.name))
    }
  })

  it('authenticates the one key that alone names it, unless it is another key\'s current secret', () => {
    expect(KeyTable.of([alpha], 'keys.json').bySha.get(shared.sha256)).toMatchObject({ name: 'alpha', kind: 'standard' })
    const holder = { name: 'holder', sha256: shared.sha256, kind: 'standard' as const, organization_id: 'org_c' }
    expect(KeyTable.of([beta, holder], 'keys.json').bySha.get(shared.sha256)).toMatchObject({ name: 'holder', organization_id: 'org_c' })
  })
})
