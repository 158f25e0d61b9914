import { hash } from 'node:crypto'
import type { Member } from '../schemas/member.js'
import { DataError } from './data-error.js'
import { createSlicer } from './slices.js'

/**
 * A run of consecutive members: their JSON texts joined by commas, and where each text ends. Its
 * last member is one whose id hashes to a boundary (or it is full): cut by content, a run of
 * members that did not change makes the same block in the next snapshot, wherever it now starts.
 */
export interface Block {
  readonly json: Buffer
  readonly ends: Uint32Array
  /** The hash of its last member's id: where to look for it in the next snapshot. */
  readonly key: number
  /** SHA-1 of `json` (base64url): what the list's version is made of. */
  readonly digest: string
}

/** A block ends after a member whose id hash has these bits clear: about 256 members a block. */
const BOUNDARY_MASK = 255
/** At most this many members a block, whatever the ids. */
const BLOCK_MAX = 8192
const COMMA = Buffer.from(',')

/**
 * The members of an organization as the snapshot holds them: serialized, in blocks (above), not as
 * objects. A million members are some 4,000 buffers (130 MB for 130 MB of JSON) instead of a million
 * objects and their five strings each (twice that, and a long walk for the garbage collector); a
 * page is a slice of them, and a snapshot that changed a few members shares every other block with
 * the one before. Member objects are made only on demand (an export, a test).
 */
export class MemberList {
  /**
   * Changes whenever a member changes, and is the same for the same members on every replica: a
   * digest of the blocks' digests, so it costs a hash per block changed, not per member.
   */
  readonly version: string

  /** Made by a MemberListBuilder. */
  constructor (
    readonly length: number,
    /** Read by the next snapshot's builder, to share them. */
    readonly blocks: readonly Block[],
    /** The index of the first member of each block. */
    private readonly starts: Uint32Array
  ) {
    this.version = blocks.length === 1 ? blocks[0]!.digest : blocks.length === 0 ? NO_MEMBERS_VERSION : hash('sha1', blocks.map((block) => block.digest).join(','), 'base64url')
  }

  /**
   * A list of these members, whose ids are known to be unique (a primary key says so); blocks equal
   * to blocks of `previous` are shared with it.
   */
  static of (members: Iterable<Member>, previous?: ReadonlyMap<number, Block>): MemberList {
    const builder = new MemberListBuilder(previous, { checkIds: false })
    for (const member of members) builder.add(member)
    return builder.finish().list
  }

  /** The JSON texts of members `start` to `end` (excluded), comma-separated, as pieces to concatenate. */
  json (start: number, end: number): Buffer[] {
    const pieces: Buffer[] = []
    // The last block starting at or before `start`.
    let low = 0
    let high = this.blocks.length - 1
    while (low < high) {
      const middle = (low + high + 1) >> 1
      if (this.starts[middle]! <= start) low = middle
      else high = middle - 1
    }
    for (let b = low; b < this.blocks.length && this.starts[b]! < end; b++) {
      const { json, ends } = this.blocks[b]!
      const first = Math.max(start - this.starts[b]!, 0)
      const last = Math.min(end - this.starts[b]!, ends.length) - 1
      if (pieces.length > 0) pieces.push(COMMA)
      pieces.push(json.subarray(first === 0 ? 0 : ends[first - 1]! + 1, ends[last]))
    }
    return pieces
  }

  /** Members `start` to `end` (excluded) as objects, as Array.prototype.slice. */
  slice (start = 0, end = this.length): Member[] {
    const from = Math.max(0, start < 0 ? this.length + start : start)
    const to = Math.min(this.length, end < 0 ? this.length + end : end)
    if (from >= to) return []
    return JSON.parse(`[${Buffer.concat(this.json(from, to)).toString()}]`) as Member[]
  }

  /** JSON.stringify writes the members as an array (the data file's form). */
  toJSON (): Member[] {
    return this.slice()
  }
}

/** Where a member id first repeats: member `index` has the id of member `first`. */
interface DuplicateId {
  index: number
  first: number
  id: string
}

/** The most members an organization may have (the offsets of a list are 32-bit). */
const MAX_MEMBERS = 1 << 24

/**
 * The `ends` of small blocks are cut from shared slabs: an organization of ten members would
 * otherwise pay for an ArrayBuffer of its own, several times the size of its ends.
 */
const ENDS_SLAB = 16 * 1024
let endsSlab = new Uint32Array(ENDS_SLAB)
let endsUsed = 0

function endsOf (ends: number[]): Uint32Array {
  if (ends.length * 4 > ENDS_SLAB) return Uint32Array.from(ends)
  if (endsUsed + ends.length > ENDS_SLAB) {
    endsSlab = new Uint32Array(ENDS_SLAB)
    endsUsed = 0
  }
  const view = endsSlab.subarray(endsUsed, endsUsed + ends.length)
  view.set(ends)
  endsUsed += ends.length
  return view
}

// Shared by every list of no block or of one: an organization of no member would otherwise pay for a
// typed array of its own and a version string, several times what its record takes.
const NO_BLOCK = new Uint32Array(0)
const FIRST_BLOCK_ONLY = Uint32Array.of(0)
const NO_MEMBERS_VERSION = hash('sha1', '', 'base64url')

const NO_BLOCKS: ReadonlyMap<number, Block> = new Map()

const SCRATCH_BYTES = 16 * 1024
/**
 * The scratch a finished builder leaves for the next: a read builds a hundred thousand lists one
 * after the other, and a scratch each would be that many short-lived buffers (1.6 GB of them).
 */
let spareScratch: Buffer | undefined
/** The same for the id hashes. */
let spareHashes: Float64Array | undefined
const HASHES = 64

/**
 * The blocks of these organizations' lists by key, for the builders of the lists that replace them
 * to share: one index for a whole read, however many organizations it builds. Made a slice at a
 * time: a hundred thousand organizations take longer than a request should wait.
 */
export async function blockIndex (organizations: Iterable<{ readonly members: MemberList } | undefined>): Promise<ReadonlyMap<number, Block>> {
  const index = new Map<number, Block>()
  const slicer = createSlicer()
  for (const organization of organizations) {
    for (const block of organization?.members.blocks ?? []) index.set(block.key, block)
    if (slicer.due()) await slicer.pause()
  }
  return index
}

/**
 * Builds a MemberList one member at a time, without holding the members: each is serialized into
 * the block being filled (or its JSON text copied, when the caller has it already), and only the
 * finished blocks stay. Unless told not to, it also finds an id that repeats, from a 53-bit hash of
 * each id (8 bytes a member, not a set of a million strings; ids whose hashes collide are compared
 * for real). Blocks equal to blocks of `previous` (blockIndex of the lists this one may replace)
 * are shared with them.
 */
export class MemberListBuilder {
  private readonly previous: ReadonlyMap<number, Block>
  private readonly blocks: Block[] = []
  private readonly starts: number[] = []
  private count = 0
  private scratch: Buffer
  private used = 0
  private ends: number[] = []
  private hashes: Float64Array | undefined
  /** The id hash of the last member added: the key of the block it closes. */
  private lastKey = 0

  constructor (previous: ReadonlyMap<number, Block> = NO_BLOCKS, { checkIds = true } = {}) {
    this.previous = previous
    this.scratch = spareScratch ?? Buffer.allocUnsafe(SCRATCH_BYTES)
    spareScratch = undefined
    if (checkIds) {
      this.hashes = spareHashes ?? new Float64Array(HASHES)
      spareHashes = undefined
    }
  }

  /**
   * Adds a valid member. `text`, when given, holds between `start` and `end` its JSON exactly as
   * JSON.stringify would write it, which is copied instead.
   */
  add (member: Member, text?: Buffer, start = 0, end = text?.length ?? 0) {
    if (this.count === MAX_MEMBERS) throw new DataError(`more than ${MAX_MEMBERS} members in one organization`)
    // Serialized straight into the scratch: a Buffer of its own for each member is garbage a million times over.
    const json = text === undefined ? JSON.stringify(member) : undefined
    // A UTF-16 code unit is at most 3 bytes of UTF-8: room enough, before the exact length is known.
    this.reserve(1 + (json === undefined ? end - start : json.length * 3))
    if (this.ends.length > 0) this.scratch[this.used++] = 0x2c
    this.used += json === undefined ? text!.copy(this.scratch, this.used, start, end) : this.scratch.write(json, this.used)
    this.ends.push(this.used)
    const hash = hashId(member.id)
    if (this.hashes) {
      if (this.count === this.hashes.length) {
        const larger = new Float64Array(this.hashes.length * 2)
        larger.set(this.hashes)
        this.hashes = larger
      }
      this.hashes[this.count] = hash
    }
    this.count++
    this.lastKey = hash
    if (closesBlock(hash) || this.ends.length === BLOCK_MAX) this.closeBlock(hash)
  }

  /** Room for `bytes` more bytes in the scratch. */
  private reserve (bytes: number) {
    const needed = this.used + bytes
    if (needed <= this.scratch.length) return
    const larger = Buffer.allocUnsafe(Math.max(needed, this.scratch.length * 2))
    larger.set(this.scratch.subarray(0, this.used))
    this.scratch = larger
  }

  /** Whether the last member added closed a block (or none was added yet): the next starts a block. */
  get atBlockEnd (): boolean {
    return this.ends.length === 0
  }

  /**
   * Adds blocks of a list whole (a run of members a change left as they were), between members
   * added at block ends: a list changed in one place copies none of the rest.
   */
  addBlocks (blocks: readonly Block[]) {
    if (blocks.length === 0) return
    if (!this.atBlockEnd) throw new Error('blocks are added at a block end')
    if (this.hashes) throw new Error('blocks are added to lists whose ids are not checked')
    for (const block of blocks) {
      if (this.count + block.ends.length > MAX_MEMBERS) throw new DataError(`more than ${MAX_MEMBERS} members in one organization`)
      this.blocks.push(block)
      this.starts.push(this.count)
      this.count += block.ends.length
    }
  }

  /** The list, and the first member (in order) whose id an earlier member has, if checked. Call once. */
  finish (): { list: MemberList, duplicate?: DuplicateId } {
    if (this.ends.length > 0) this.closeBlock(this.lastKey)
    if (this.scratch.length === SCRATCH_BYTES) spareScratch = this.scratch
    const starts = this.blocks.length === 0 ? NO_BLOCK : this.blocks.length === 1 ? FIRST_BLOCK_ONLY : Uint32Array.from(this.starts)
    const list = new MemberList(this.count, this.blocks, starts)
    const duplicate = this.hashes ? this.duplicateId(list, this.hashes) : undefined
    if (this.hashes?.length === HASHES) spareHashes = this.hashes
    this.hashes = undefined
    return duplicate ? { list, duplicate } : { list }
  }

  private duplicateId (list: MemberList, hashes: Float64Array): DuplicateId | undefined {
    const sorted = hashes.subarray(0, this.count).sort()
    const colliding = new Set<number>()
    for (let i = 1; i < sorted.length; i++) if (sorted[i] === sorted[i - 1]) colliding.add(sorted[i]!)
    if (colliding.size === 0) return undefined
    // Rare (a repeated id, or a one-in-a-billion collision): the ids of those hashes, in order.
    const seen = new Map<string, number>()
    for (let start = 0; start < list.length; start += BLOCK_MAX) {
      const members = list.slice(start, start + BLOCK_MAX)
      for (let k = 0; k < members.length; k++) {
        const { id } = members[k]!
        if (!colliding.has(hashId(id))) continue
        const first = seen.get(id)
        if (first !== undefined) return { index: start + k, first, id }
        seen.set(id, start + k)
      }
    }
    return undefined
  }

  private closeBlock (key: number) {
    const json = this.scratch.subarray(0, this.used)
    const shared = this.previous.get(key)
    if (shared && shared.ends.length === this.ends.length && shared.json.equals(json)) {
      this.blocks.push(shared)
    } else {
      // A copy of its own size (small ones cut from Node.js's shared pool): the scratch is reused.
      const own = Buffer.allocUnsafe(json.length)
      own.set(json)
      this.blocks.push({ json: own, ends: endsOf(this.ends), key, digest: hash('sha1', own, 'base64url') })
    }
    this.starts.push(this.count - this.ends.length)
    this.used = 0
    this.ends = []
  }
}

/** Whether a member whose id has this hash (hashId) ends a block. */
export function closesBlock (hash: number): boolean {
  return hash % (BOUNDARY_MASK + 1) === 0
}

/** Two 32-bit FNV-1a-style hashes of the UTF-16 code units, as one 53-bit integer. */
export function hashId (id: string): number {
  let a = 0x811c9dc5
  let b = 0x01000193
  for (let i = 0; i < id.length; i++) {
    const c = id.charCodeAt(i)
    a = Math.imul(a ^ c, 0x01000193)
    b = Math.imul(b ^ c, 0x5bd1e995) ^ (b >>> 15)
  }
  return (a >>> 0) * 0x200000 + ((b >>> 0) & 0x1fffff)
}
