import { hash } from 'node:crypto'
import type { Member } from '../schemas/member.js'
import { DataError } from './data-error.js'

/** The most members an organization may have. */
const MAX_MEMBERS = 1 << 24

/** A page of an organization's members. */
export interface MemberPage {
  /** `{"data": Member[], "total_count": n}` as JSON. */
  json: Buffer
  /**
   * The version of the organization's members: the same members give the same version on every
   * replica, and any change of a member gives another. With the offset and the limit, it names the page.
   */
  version: string
}

const PAGE_START = Buffer.from('{"data":[')

/**
 * The members of an organization as the snapshot holds them: their JSON texts in one buffer, joined
 * by commas, and where each ends. A page is a slice of the buffer, whatever the size of the
 * organization; member objects are made only on demand (an export, a test). Ten members are one
 * buffer and an array of ten numbers, not ten objects of five strings each.
 */
export class MemberList {
  /** SHA-1 of the members' JSON: changes whenever a member does, and is the same on every replica. */
  readonly version: string
  /** The end of every page, made by the first. */
  private pageEnd: Buffer | undefined

  private constructor (
    private readonly text: Buffer,
    /** Where each member's JSON ends in `text`. */
    private readonly ends: readonly number[]
  ) {
    this.version = hash('sha1', text, 'base64url')
  }

  /** A list of these members (valid; their ids are not checked here: compactMembers does). */
  static of (members: Iterable<Member>): MemberList {
    const texts: string[] = []
    const ends: number[] = []
    let end = -1
    for (const member of members) {
      if (texts.length === MAX_MEMBERS) throw new DataError(`more than ${MAX_MEMBERS} members in one organization`)
      const text = JSON.stringify(member)
      texts.push(text)
      end += 1 + Buffer.byteLength(text)
      ends.push(end)
    }
    return new MemberList(Buffer.from(texts.join(',')), ends)
  }

  get length (): number {
    return this.ends.length
  }

  /** A page of the members: a slice of their texts between two brackets, whatever their number. */
  page (offset: number, limit: number): MemberPage {
    this.pageEnd ??= Buffer.from(`],"total_count":${this.length}}`)
    return { json: Buffer.concat([PAGE_START, this.json(offset, Math.min(offset + limit, this.length)), this.pageEnd]), version: this.version }
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
