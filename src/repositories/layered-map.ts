import { createSlicer } from './slices.js'
import type { MapLike } from './key-table.js'

const REMOVED: unique symbol = Symbol('removed')
type Entry<V> = V | typeof REMOVED

/**
 * Past this many changes the overlay is folded into a new base, whatever the size of the base: a
 * change copies the overlay, so a bound that grew with the base (it was an eighth of it) made a
 * change among a million keys cost in proportion to the million.
 */
const OVERLAY_MAX = 4096

/**
 * An immutable map made for a large set that changes a little at a time (a million keys, a hundred
 * thousand organizations): a large base that is never written, and a small overlay of the changes
 * since (values, or tombstones for removals). A change copies the overlay, not the base, so it costs
 * what the overlay holds, and every earlier version stays as it was for the requests that read it.
 * Once the overlay grows past OVERLAY_MAX, `compacted()` builds a new base off the
 * request path, a slice at a time (the lifecycle carries over what changed meanwhile).
 */
export class LayeredMap<K, V> {
  private constructor (
    private readonly base: MapLike<K, V>,
    private readonly overlay: ReadonlyMap<K, Entry<V>>,
    readonly size: number
  ) {}

  static of<K, V> (entries: MapLike<K, V>): LayeredMap<K, V> {
    return new LayeredMap(entries, new Map(), entries.size)
  }

  get (key: K): V | undefined {
    if (this.overlay.size > 0) {
      const entry = this.overlay.get(key)
      if (entry !== undefined) return entry === REMOVED ? undefined : entry
    }
    return this.base.get(key)
  }

  /** A new version with these changes: a value sets its key, undefined removes it. */
  with (changes: Iterable<readonly [K, V | undefined]>): LayeredMap<K, V> {
    const overlay = new Map(this.overlay)
    let size = this.size
    for (const [key, value] of changes) {
      const before = overlay.has(key) ? overlay.get(key) !== REMOVED : this.base.has(key)
      if (value === undefined) {
        if (!before) continue
        // A key the base lacks needs no tombstone.
        if (this.base.has(key)) overlay.set(key, REMOVED)
        else overlay.delete(key)
        size--
      } else {
        overlay.set(key, value)
        if (!before) size++
      }
    }
    return new LayeredMap(this.base, overlay, size)
  }

  /** Whether the overlay holds `key`: its value, or its removal. */
  overlays (key: K): boolean {
    return this.overlay.has(key)
  }

  /** The keys the overlay holds: set, or removed. */
  overlaid (): IterableIterator<K> {
    return this.overlay.keys()
  }

  /** Whether the overlay has grown enough to be folded into the base. */
  get overgrown (): boolean {
    return this.overlay.size > OVERLAY_MAX
  }

  /** The same entries over a base of their own, built a slice at a time so that requests go on meanwhile. */
  async compacted (): Promise<LayeredMap<K, V>> {
    const base = new Map<K, V>()
    const slicer = createSlicer()
    for (const [key, value] of this.base) {
      if (!this.overlay.has(key)) base.set(key, value)
      if (slicer.due()) await slicer.pause()
    }
    for (const [key, entry] of this.overlay) if (entry !== REMOVED) base.set(key, entry)
    return new LayeredMap(base, new Map(), base.size)
  }

  /** Every value, base first (in its order), then the overlay's. */
  * values (): IterableIterator<V> {
    for (const [key, value] of this.base) if (!this.overlay.has(key)) yield value
    for (const entry of this.overlay.values()) if (entry !== REMOVED) yield entry
  }
}
