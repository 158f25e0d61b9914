import { describe, expect, it } from 'vitest'
import fc from 'fast-check'
import { UniqueValues } from '../../src/repositories/unique-values.js'

describe('the values of a field seen so far', () => {
  it('answers the record a value came from first, as a Map of the strings does, thousands of values included', () => {
    // Short values of few characters repeat often; hex and text that spell the same bytes must differ.
    const value = fc.oneof(
      fc.string({ unit: fc.constantFrom('a', 'b', '0', '1', 'A', 'é', '\u0001', '\u{1F600}'), maxLength: 4 }),
      fc.constantFrom('01', '\u0001', 'ab', 'AB', '\u00ab', '', 'ff', 'ÿ')
    )
    fc.assert(fc.property(fc.array(value, { maxLength: 3000 }), (values) => {
      const unique = new UniqueValues()
      const seen = new Map<string, number>()
      values.forEach((text, record) => {
        const first = seen.get(text)
        if (first === undefined) seen.set(text, record)
        expect(unique.add(text, record)).toBe(first)
      })
    }), { numRuns: 200 })
  })

  it('finds the one value that repeats among a million SHA-256s and names', () => {
    const names = new UniqueValues()
    const hashes = new UniqueValues()
    let repeated = 0
    for (let i = 0; i < 1_000_000; i++) {
      if (names.add(`key-${i}`, i) !== undefined) repeated++
      if (hashes.add(i.toString(16).padStart(64, '0'), i) !== undefined) repeated++
    }
    expect(repeated).toBe(0)
    expect(names.add('key-123456', 1_000_000)).toBe(123_456)
    expect(hashes.add((654_321).toString(16).padStart(64, '0'), 1_000_000)).toBe(654_321)
  })
})
