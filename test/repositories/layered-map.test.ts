import { describe, expect, it } from 'vitest'
import { LayeredMap } from '../../src/repositories/layered-map.js'

describe('LayeredMap', () => {
  const base = (size: number) => new Map<string, number>(Array.from({ length: size }, (_, i) => [`key-${i}`, i]))

  it.each([100, 200_000])('asks to be folded past 4,096 changes over a base of %i entries, whatever its size', async (size) => {
    let map = LayeredMap.of(base(size))
    // One change at a time, as notices come: each copies the overlay.
    for (let i = 0; i < 4096; i++) map = map.with([[`new-${i}`, i]])
    expect(map.overgrown).toBe(false)
    map = map.with([['key-0', undefined]])
    expect(map.overgrown).toBe(true)
    const folded = await map.compacted()
    expect(folded.overgrown).toBe(false)
    expect(folded.size).toBe(size + 4096 - 1)
    expect(folded.get('key-0')).toBeUndefined()
    expect(folded.get(`key-${size - 1}`)).toBe(size - 1)
    expect(folded.get('new-4095')).toBe(4095)
  })
})
