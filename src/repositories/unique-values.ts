/**
 * The values of one field seen so far, to find the first that repeats, for a million records without
 * a million strings: each value's bytes in one growing buffer (a lowercase hex value, a SHA-256, as
 * the bytes it spells: half the room), behind an open-addressed index of 4 bytes a slot. A million
 * names and a million SHA-256s take some 90 MB here, where two Sets of their strings took twice that.
 */
export class UniqueValues {
  private bytes = Buffer.allocUnsafeSlow(1 << 16)
  /** Where value n's bytes end (they start where value n - 1's end). */
  private ends = new Uint32Array(1024)
  private hashes = new Uint32Array(1024)
  /** The record each value came from. */
  private records = new Uint32Array(1024)
  /** Value n + 1 per slot, 0 for none: a power of two, at most half full. */
  private slots = new Int32Array(2048)
  private size = 0

  /** Adds the value of record `record`; answers the record it came from first when it is there already, else undefined. */
  add (value: string, record: number): number | undefined {
    const start = this.size === 0 ? 0 : this.ends[this.size - 1]!
    // A tag byte, then the value's bytes: a value that spells hex is never equal to one that does not.
    this.room(start, 1 + value.length * 3)
    const hex = value.length % 2 === 0 && HEX.test(value)
    this.bytes[start] = hex ? 1 : 0
    const end = start + 1 + this.bytes.write(value, start + 1, hex ? 'hex' : 'utf8')
    const hash = hashOf(this.bytes, start, end)
    const mask = this.slots.length - 1
    let slot = hash & mask
    for (let entry = this.slots[slot]!; entry !== 0; entry = this.slots[slot]!) {
      const other = entry - 1
      if (this.hashes[other] === hash && this.bytes.compare(this.bytes, other === 0 ? 0 : this.ends[other - 1], this.ends[other], start, end) === 0) {
        return this.records[other]
      }
      slot = (slot + 1) & mask
    }
    if (this.size === this.ends.length) this.grow()
    this.ends[this.size] = end
    this.hashes[this.size] = hash
    this.records[this.size] = record
    this.size++
    if (this.size * 2 > this.slots.length) this.index(this.slots.length * 2)
    else this.slots[slot] = this.size
    return undefined
  }

  /** Room for `length` bytes from `start`, the buffer doubled (or more) when short. */
  private room (start: number, length: number) {
    if (this.bytes.length - start >= length) return
    const wider = Buffer.allocUnsafeSlow(Math.max(start + length, this.bytes.length * 2))
    this.bytes.copy(wider, 0, 0, start)
    this.bytes = wider
  }

  private grow () {
    const widen = (array: Uint32Array) => {
      const wider = new Uint32Array(array.length * 2)
      wider.set(array)
      return wider
    }
    this.ends = widen(this.ends)
    this.hashes = widen(this.hashes)
    this.records = widen(this.records)
  }

  /** The index built again with `slots` slots, from the values' hashes. */
  private index (slots: number) {
    this.slots = new Int32Array(slots)
    const mask = slots - 1
    for (let n = 0; n < this.size; n++) {
      let slot = this.hashes[n]! & mask
      while (this.slots[slot] !== 0) slot = (slot + 1) & mask
      this.slots[slot] = n + 1
    }
  }
}

const HEX = /^[0-9a-f]+$/

/** FNV-1a over the bytes, then MurmurHash3's finalizer, so that every bit of the slot depends on every byte. */
function hashOf (bytes: Buffer, start: number, end: number): number {
  let h = 0x811c9dc5
  for (let i = start; i < end; i++) h = Math.imul(h ^ bytes[i]!, 0x01000193)
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b)
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35)
  return (h ^ (h >>> 16)) >>> 0
}
