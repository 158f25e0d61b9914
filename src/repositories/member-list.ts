import { createHash, hash, type Hash } from 'node:crypto'
import { EMAIL_MAX, IDENTIFIER_MAX, NAME_MAX } from '../schemas/common.js'
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

/** A member's JSON as JSON.stringify writes it, around its fields: addBytes writes these and the fields' bytes. */
const ID_BEFORE = Buffer.from('{"id":"')
const EMAIL_BEFORE = Buffer.from('","email":"')
const FIRST_NAME_BEFORE = Buffer.from('","first_name":')
const LAST_NAME_BEFORE = Buffer.from(',"last_name":')
const NULL = Buffer.from('null')
const QUOTE = 0x22
/** Each role as its bytes, and the end of a member's JSON with it. */
const ROLES = (['org:admin', 'org:member'] as const).map((role) => ({ bytes: Buffer.from(role), after: Buffer.from(`,"role":"${role}"}`) }))
/** What a member's JSON takes besides its fields' bytes, at most: the texts above, two quotes, a comma. */
const MEMBER_TEXT_BYTES = ID_BEFORE.length + EMAIL_BEFORE.length + FIRST_NAME_BEFORE.length + LAST_NAME_BEFORE.length + 2 * NULL.length +
  Math.max(...ROLES.map(({ after }) => after.length)) + 3

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
  /** The SHA-1 of the chunks closed so far, made only once there is more than one: most lists are one chunk, hashed in one go. */
  private hash: Hash | undefined

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

  /**
   * Adds a member given as UTF-8 in `bytes`, without a string for its fields: its id, email,
   * first_name, last_name and role as (start, length) pairs from fields[at] on, in that order (a
   * length of -1 for NULL). Answers false, having added nothing, for a member it cannot take from
   * the bytes alone: a field MemberSchema may refuse, or text that is not printable ASCII free of
   * quotes and backslashes (which JSON escapes, and whose length in characters is not its bytes').
   * The caller then checks the member as a record (memberProblem), which says what is wrong, and
   * adds it if valid.
   */
  addBytes (bytes: Buffer, fields: Int32Array, at: number): boolean {
    const idLength = fields[at + 1]!
    const email = fields[at + 2]!
    const emailLength = fields[at + 3]!
    const firstLength = fields[at + 5]!
    const lastLength = fields[at + 7]!
    const role = roleOfBytes(bytes, fields[at + 8]!, fields[at + 9]!)
    if (role === undefined || this.count === MAX_MEMBERS || idLength < 1 || idLength > IDENTIFIER_MAX || emailLength > EMAIL_MAX ||
      firstLength > NAME_MAX || lastLength > NAME_MAX || !isEmailBytes(bytes, email, emailLength)) return false
    const most = MEMBER_TEXT_BYTES + idLength + emailLength + Math.max(firstLength, 0) + Math.max(lastLength, 0)
    if (this.chunk.length - this.used < most) this.nextChunk(most)
    // Written past `used`, which moves only once the whole member is: a byte found wrong leaves nothing behind.
    const chunk = this.chunk
    let to = this.used
    if (this.count > 0) chunk[to++] = COMMA
    to = put(chunk, to, ID_BEFORE)
    to = putText(chunk, to, bytes, fields[at]!, idLength)
    if (to < 0) return false
    to = putText(chunk, put(chunk, to, EMAIL_BEFORE), bytes, email, emailLength)
    if (to < 0) return false
    to = putNullable(chunk, put(chunk, to, FIRST_NAME_BEFORE), bytes, fields[at + 4]!, firstLength)
    if (to < 0) return false
    to = putNullable(chunk, put(chunk, to, LAST_NAME_BEFORE), bytes, fields[at + 6]!, lastLength)
    if (to < 0) return false
    to = put(chunk, to, ROLES[role]!.after)
    this.bytes += to - this.used
    this.used = to
    if (this.count === this.ends.length) {
      const wider = new Uint32Array(this.count * 2)
      wider.set(this.ends)
      this.ends = wider
    }
    this.ends[this.count++] = this.bytes
    return true
  }

  finish (): MemberList {
    this.close()
    // The texts, their digest and their ends in one buffer (MemberList), pooled as Buffer.concat's
    // result was for the many small organizations.
    const held = Buffer.allocUnsafe(this.bytes + DIGEST_BYTES + 4 * this.count)
    let at = 0
    for (const chunk of this.chunks) at += chunk.copy(held, at)
    // A Hash object for each of 100,000 organizations took longer than hashing their texts. The
    // digest comes as a character a byte ('binary', latin1), and the bytes are written here, as are
    // the ends: as a Buffer, the digest took 1.3 us longer each, and Buffer's write and
    // writeUInt32LE cost some 400 and 40 ns a call.
    const digest = this.hash === undefined ? hash('sha1', held.subarray(0, at), 'binary') : this.hash.digest('binary')
    for (let i = 0; i < DIGEST_BYTES; i++) held[at++] = digest.charCodeAt(i)
    for (let i = 0; i < this.count; i++) {
      const end = this.ends[i]!
      held[at++] = end
      held[at++] = end >>> 8
      held[at++] = end >>> 16
      held[at++] = end >>> 24
    }
    // Copied out (a builder left unfinished keeps its chunk, and the next one makes another).
    spare = this.first
    return new MemberList(held, this.bytes)
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
    // More than one chunk: hashed a chunk at a time, never the whole of a large list in one go.
    if (this.hash === undefined && this.chunk !== this.first) {
      this.hash = createHash('sha1')
      for (const chunk of this.chunks.slice(0, -1)) this.hash.update(chunk)
    }
    this.hash?.update(written)
  }
}

/** The index in ROLES of the role at bytes[start, start + length), or undefined. */
function roleOfBytes (bytes: Buffer, start: number, length: number): number | undefined {
  for (let role = 0; role < ROLES.length; role++) {
    const expected = ROLES[role]!.bytes
    if (expected.length !== length) continue
    let i = 0
    while (i < length && bytes[start + i] === expected[i]) i++
    if (i === length) return role
  }
  return undefined
}

/**
 * Whether the ASCII at bytes[start, start + length) is an e-mail address as the schema's format says
 * (`^[^\s@]+@[^\s@]+\.[^\s@]+$`: one @ with something before it, and a dot with something on each side
 * after it); false too for anything not printable ASCII, left to the format itself.
 */
function isEmailBytes (bytes: Buffer, start: number, length: number): boolean {
  let atSign = -1
  for (let i = 0; i < length; i++) {
    const byte = bytes[start + i]!
    if (byte === 0x40) {
      if (atSign !== -1) return false
      atSign = i
    } else if (byte <= 0x20 || byte >= 0x7f) return false
  }
  if (atSign < 1) return false
  for (let i = atSign + 2; i < length - 1; i++) if (bytes[start + i] === 0x2e) return true
  return false
}

/** `text` written at `to`; answers where it ends. */
function put (chunk: Buffer, to: number, text: Buffer): number {
  for (let i = 0; i < text.length; i++) chunk[to + i] = text[i]!
  return to + text.length
}

/**
 * The bytes at bytes[start, start + length) written at `to` as they are in a JSON string: printable
 * ASCII but a quote or a backslash, the characters JSON.stringify writes as they are, a byte each.
 * Answers where they end, or -1 at a byte that is not one of them.
 */
function putText (chunk: Buffer, to: number, bytes: Buffer, start: number, length: number): number {
  for (let i = 0; i < length; i++) {
    const byte = bytes[start + i]!
    if (byte < 0x20 || byte >= 0x7f || byte === QUOTE || byte === 0x5c) return -1
    chunk[to + i] = byte
  }
  return to + length
}

/** putText between quotes, or null for a length of -1 (NULL); -1 at a byte putText does not take. */
function putNullable (chunk: Buffer, to: number, bytes: Buffer, start: number, length: number): number {
  if (length === -1) return put(chunk, to, NULL)
  chunk[to] = QUOTE
  const end = putText(chunk, to + 1, bytes, start, length)
  if (end < 0) return -1
  chunk[end] = QUOTE
  return end + 1
}

/** The members' digest (SHA-1) as MemberList holds it, after their texts. */
const DIGEST_BYTES = 20

/**
 * The members of an organization as the snapshot holds them: in one buffer, their JSON texts joined
 * by commas, then the SHA-1 of those texts, then where each text ends (32 bits each). A page is a
 * slice of the buffer, whatever the size of the organization; member objects are made only on demand
 * (an export, a test). Ten members are this object and one buffer: the ends in an array of their own
 * and the digest as a string were three more objects an organization, 300,000 of the 1,050,000 a
 * start at gateway scale left on the heap.
 */
export class MemberList {
  /** The end of every page, made by the first. */
  private pageEnd: Buffer | undefined

  /** Made by a MemberListBuilder: `held` as above, whose texts are its first `bytes`. */
  constructor (private readonly held: Buffer, private readonly bytes: number) {}

  /** The digest as text, made for the first page asked for (the page cache's key), then kept. */
  private digestText: string | undefined

  /** SHA-1 of the members' JSON: changes whenever a member does, and is the same on every replica. */
  get digest (): string {
    return (this.digestText ??= this.held.toString('base64url', this.bytes, this.bytes + DIGEST_BYTES))
  }

  /** Whether `other` holds the same members: their digests' bytes compared, without a string for either. */
  sameMembers (other: MemberList): boolean {
    return this.held.compare(other.held, other.bytes, other.bytes + DIGEST_BYTES, this.bytes, this.bytes + DIGEST_BYTES) === 0
  }

  /** Word `i` (0 to 4) of the digest, for a hash of the list without a string. */
  digestWord (i: number): number {
    return this.held.readInt32LE(this.bytes + 4 * i)
  }

  /** A list of these members, made in one go (a file's, a test's). */
  static of (members: Iterable<Member>, where = 'an organization'): MemberList {
    const builder = new MemberListBuilder(where)
    for (const member of members) builder.add(member)
    return builder.finish()
  }

  get length (): number {
    return (this.held.length - this.bytes - DIGEST_BYTES) / 4
  }

  /** Where member `i`'s JSON ends. */
  private end (i: number): number {
    return this.held.readUInt32LE(this.bytes + DIGEST_BYTES + 4 * i)
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
    const members = offset >= end ? 0 : this.end(end - 1) - (offset === 0 ? 0 : this.end(offset - 1) + 1)
    return PAGE_START.length + members + this.pageEnd.length
  }

  /** The JSON texts of members `start` to `end` (excluded), comma-separated. */
  json (start: number, end: number): Buffer {
    if (start >= end) return this.held.subarray(0, 0)
    return this.held.subarray(start === 0 ? 0 : this.end(start - 1) + 1, this.end(end - 1))
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
