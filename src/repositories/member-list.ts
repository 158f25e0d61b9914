import { createHash } from 'node:crypto'
import type { Member } from '../schemas/member.js'
import { DataError } from './data-error.js'

/**
 * The most members an organization may have (docs/data.md). Past it an organization is refused: one
 * that size already takes a whole read of its own, and each change to it reads it again.
 */
export const MAX_MEMBERS = 100_000

/** Members whose texts are joined into one buffer at a time: a few hundred KiB, made in well under a millisecond. */
const CHUNK_MEMBERS = 1024

/** A page of an organization's members. */
export interface MemberPage {
  /** `{"data": Member[], "total_count": n}` as JSON. */
  json: Buffer
  /**
   * The digest of the organization's members: the same members give the same digest on every
   * replica, and any change of a member gives another. With the offset and the limit, it names the page.
   */
  digest: string
}

const PAGE_START = Buffer.from('{"data":[')
const COMMA = Buffer.from(',')

/**
 * Makes a MemberList a member at a time, as they are read: each member's text is written when it is
 * added, a chunk of them joined into a buffer now and then, so that a reader that pauses between
 * rows never holds the event loop for the whole organization (the texts of 100,000 members took
 * longer than a request may wait when written in one go). Members are valid; their ids are not
 * checked here (compactMembers does).
 */
export class MemberListBuilder {
  private readonly chunks: Buffer[] = []
  private texts: string[] = []
  private readonly ends: number[] = []
  private end = -1
  private readonly hash = createHash('sha1')

  /** `where` names the organization in the message that refuses one past MAX_MEMBERS. */
  constructor (private readonly where: string) {}

  add (member: Member) {
    if (this.ends.length === MAX_MEMBERS) throw new DataError(`${this.where}: more than ${MAX_MEMBERS} members, the most an organization may have`)
    const text = JSON.stringify(member)
    this.texts.push(text)
    this.end += 1 + Buffer.byteLength(text)
    this.ends.push(this.end)
    if (this.texts.length === CHUNK_MEMBERS) this.flush()
  }

  finish (): MemberList {
    this.flush()
    const text = Buffer.concat(this.chunks)
    return new MemberList(text, this.ends, this.hash.digest('base64url'))
  }

  private flush () {
    if (this.texts.length === 0) return
    // A comma between chunks too: the buffer is the members' texts joined by commas, whatever the chunks.
    if (this.chunks.length > 0) this.append(COMMA)
    this.append(Buffer.from(this.texts.join(',')))
    this.texts = []
  }

  private append (bytes: Buffer) {
    this.chunks.push(bytes)
    this.hash.update(bytes)
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

  /** A page of the members: a slice of their texts between two brackets, whatever their number. */
  page (offset: number, limit: number): MemberPage {
    this.pageEnd ??= Buffer.from(`],"total_count":${this.length}}`)
    return { json: Buffer.concat([PAGE_START, this.json(offset, Math.min(offset + limit, this.length)), this.pageEnd]), digest: this.digest }
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
