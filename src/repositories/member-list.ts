import { createHash } from 'node:crypto'
import type { Member } from '../schemas/member.js'
import { DataError } from './data-error.js'

/**
 * The most members an organization may have (docs/data.md). Past it an organization is refused: one
 * that size already takes a whole read of its own, and each change to it reads it again.
 */
export const MAX_MEMBERS = 100_000

/** The largest chunk a builder writes members into: Buffer.concat joins the chunks once, at the end. */
const CHUNK_BYTES = 128 * 1024

/**
 * The chunk a builder starts with, lent to one builder at a time: most organizations fit in it, and
 * their list is then a copy of its first bytes, packed in Buffer's shared pool. A buffer of their
 * own for the texts of each small organization, pooled too and dropped once copied, left as much
 * dead space in the pool as their lists took, held as long as the lists were: 100,000 organizations
 * of 10 members held 234 MB of buffers, and hold 113 MB.
 */
let spare: Buffer | undefined

const PAGE_START = Buffer.from('{"data":[')
const COMMA = 0x2c

/**
 * Makes a MemberList a member at a time, as they are read: each member's text is written into a
 * chunk of bytes when it is added, so that a reader that pauses between rows never holds the event
 * loop for the whole organization (the texts of 100,000 members took longer than a request may
 * wait when written in one go). Nothing of a member outlives its add() on the JavaScript heap: the
 * texts kept as strings until 1024 of them were joined outlived the young generation's collections
 * while the rows were read, and 2.3 to 3.8 MB went to the old generation each time an organization
 * of 100,000 members changed (0.2 to 1.1 MB now). Members are valid; their ids are not checked here
 * (compactMembers does).
 */
export class MemberListBuilder {
  private readonly chunks: Buffer[] = []
  /** The chunk it started with, lent to the next builder once this one is finished. */
  private readonly first: Buffer
  private chunk: Buffer
  /** Bytes written in `chunk`. */
  private used = 0
  /** Bytes of the members' texts so far, commas included. */
  private bytes = 0
  private ends = new Uint32Array(16)
  private count = 0
  private readonly hash = createHash('sha1')

  /** `where` names the organization in the message that refuses one past MAX_MEMBERS. */
  constructor (private readonly where: string) {
    this.first = this.chunk = spare ?? Buffer.allocUnsafeSlow(CHUNK_BYTES)
    spare = undefined
  }

  add (member: Member) {
    if (this.count === MAX_MEMBERS) throw new DataError(`${this.where}: more than ${MAX_MEMBERS} members, the most an organization may have`)
    const text = JSON.stringify(member)
    // A comma before every member but the first: the chunks joined are the texts joined by commas.
    const bytes = (this.count === 0 ? 0 : 1) + Buffer.byteLength(text)
    if (this.chunk.length - this.used < bytes) this.nextChunk(bytes)
    if (this.count > 0) this.chunk[this.used++] = COMMA
    this.used += this.chunk.write(text, this.used)
    this.bytes += bytes
    if (this.count === this.ends.length) {
      const wider = new Uint32Array(this.count * 2)
      wider.set(this.ends)
      this.ends = wider
    }
    this.ends[this.count++] = this.bytes
  }

  finish (): MemberList {
    this.close()
    // An array of small integers of the exact length: the least heap for the many small organizations.
    const ends = new Array<number>(this.count)
    for (let i = 0; i < this.count; i++) ends[i] = this.ends[i]!
    const list = new MemberList(Buffer.concat(this.chunks, this.bytes), ends, this.hash.digest('base64url'))
    // Copied out by concat (a builder left unfinished keeps its chunk, and the next one makes another).
    spare = this.first
    return list
  }

  private nextChunk (bytes: number) {
    this.close()
    this.chunk = Buffer.allocUnsafeSlow(Math.max(bytes, CHUNK_BYTES))
    this.used = 0
  }

  private close () {
    if (this.used === 0) return
    const written = this.chunk.subarray(0, this.used)
    this.chunks.push(written)
    this.hash.update(written)
  }
}

/**
 * The members of an organization as the snapshot holds them: their JSON texts in one buffer, joined
 * by commas, and where each ends. A page is a slice of the buffer, whatever the size of the
 * organization; member objects are made only on demand (an export, a test). Ten members are one
 * buffer and an array of ten numbers, not ten objects of five strings each.
 */
export class MemberList {
  /** The end of every page, made by the first. */
  private pageEnd: Buffer | undefined

  /** Made by a MemberListBuilder. */
  constructor (
    private readonly text: Buffer,
    /** Where each member's JSON ends in `text`. */
    private readonly ends: readonly number[],
    /** SHA-1 of the members' JSON: changes whenever a member does, and is the same on every replica. */
    readonly digest: string
  ) {}

  /** A list of these members, made in one go (a file's, a test's). */
  static of (members: Iterable<Member>, where = 'an organization'): MemberList {
    const builder = new MemberListBuilder(where)
    for (const member of members) builder.add(member)
    return builder.finish()
  }

  get length (): number {
    return this.ends.length
  }

  /**
   * A page of the members, `{"data": Member[], "total_count": n}` as JSON: a slice of their texts
   * between two brackets, whatever their number, in memory of its own (Buffer.concat would place a
   * page under 4 KiB in the shared pool, where a cache that keeps it would hold the whole slab).
   */
  page (offset: number, limit: number): Buffer {
    this.pageEnd ??= Buffer.from(`],"total_count":${this.length}}`)
    const members = this.json(offset, Math.min(offset + limit, this.length))
    const page = Buffer.allocUnsafeSlow(PAGE_START.length + members.length + this.pageEnd.length)
    PAGE_START.copy(page)
    members.copy(page, PAGE_START.length)
    this.pageEnd.copy(page, PAGE_START.length + members.length)
    return page
  }

  /** The length of page(offset, limit), without making it. */
  pageLength (offset: number, limit: number): number {
    this.pageEnd ??= Buffer.from(`],"total_count":${this.length}}`)
    const end = Math.min(offset + limit, this.length)
    const members = offset >= end ? 0 : this.ends[end - 1]! - (offset === 0 ? 0 : this.ends[offset - 1]! + 1)
    return PAGE_START.length + members + this.pageEnd.length
  }

  /** The JSON texts of members `start` to `end` (excluded), comma-separated. */
  json (start: number, end: number): Buffer {
    if (start >= end) return this.text.subarray(0, 0)
    return this.text.subarray(start === 0 ? 0 : this.ends[start - 1]! + 1, this.ends[end - 1])
  }

  /** Members `start` to `end` (excluded) as objects, as Array.prototype.slice. */
  slice (start = 0, end = this.length): Member[] {
    const from = Math.max(0, start < 0 ? this.length + start : start)
    const to = Math.min(this.length, end < 0 ? this.length + end : end)
    return JSON.parse(`[${this.json(from, to).toString()}]`) as Member[]
  }

  /** JSON.stringify writes the members as an array (the data file's form). */
  toJSON (): Member[] {
    return this.slice()
  }
}
