import { isUtf8 } from 'node:buffer'
import type { FileHandle } from 'node:fs/promises'
import { MAX_RECORD_BYTES, carryOver, openRegularFile, readRefusedFile } from './json-file.js'
import { MAX_DEPTH, UTF8_BOM } from './json-syntax.js'
import { MemberListBuilder, type Block } from './member-list.js'
import type { Member } from '../schemas/member.js'
import { DataError, compactMembers, finishMembers, memberProblem, recordProblem, validateRecords, type Organization } from './records.js'
import { createSlicer } from './slices.js'

/** Read this much of the file at a time (more when one member is larger). */
const WINDOW_BYTES = 1024 * 1024
/**
 * Members are parsed this many bytes at a time: one JSON.parse a batch, small enough to die young.
 * A batch's objects are alive while it is validated and compacted, so a young-generation collection
 * (every few MB allocated: --max-semi-space-size in `npm start`) copies them; 64 KiB batches copy a quarter of what
 * 256 KiB did, and started 1,000,000 members in 1.4 s instead of 1.7 s (one core, 3 starts each).
 */
const BATCH_BYTES = 64 * 1024

const MEMBERS = Buffer.from('members')

/** The file is not what the scan expects: readRefusedFile says why, as for any file. */
class NotPlainJson extends Error {}

/** One `members` array of the file, compacted as it is read, and finished as soon as it ends. */
interface MembersArray {
  builder: MemberListBuilder
  finished?: ReturnType<MemberListBuilder['finish']>
  count: number
  /** The first member that is not valid, where and why. */
  problem?: string
}

/**
 * Reads organizations.json as readJsonFile and validateRecords would, with the same messages, but
 * without ever holding the whole file or a million member objects: the file is read a slice at a
 * time, each organization's `members` array is parsed and validated a batch of members at a time
 * and compacted into a MemberList as it goes, and the rest of the file (the organizations without
 * their members: a few bytes each) is parsed once at the end. Blocks of members equal to blocks of
 * `shared` (blockIndex) are shared with them, so a reload that changed a few members allocates a few blocks.
 *
 * The scan only cuts the file where JSON.parse will judge it; any problem it meets (bad syntax, bad
 * UTF-8, nesting too deep, not an array) is handed to readRefusedFile, which locates it.
 */
export async function readOrganizationsFile (path: string, label: string, shared?: ReadonlyMap<number, Block>): Promise<Organization[]> {
  const handle = await openRegularFile(path, label)
  let result: { skeleton: unknown, arrays: Map<number, MembersArray> }
  try {
    result = await scan(handle, label, shared)
  } catch (error) {
    if (!(error instanceof NotPlainJson)) throw error
    // Throws with the line and column of the fault, or answers what stands for a value that is not
    // an array, which the schema names below.
    result = { skeleton: await readRefusedFile(handle, label), arrays: new Map() }
  } finally {
    await handle.close()
  }
  const { skeleton, arrays } = result
  if (!Array.isArray(skeleton)) validateRecords('organizations', skeleton, label)
  const records = skeleton as unknown[]
  const organizations: Organization[] = []
  // A hundred thousand organizations are checked and finished a slice at a time.
  const slicer = createSlicer()
  for (let index = 0; index < records.length; index++) {
    const record = records[index]
    const problem = recordProblem('organizations', record, index)
    if (problem !== undefined) throw new DataError(`${label}: ${problem}`)
    const array = arrays.get(index)
    if (array?.problem) throw new DataError(`${label}: ${array.problem}`)
    const { id, name, members } = record as { id: string, name: string, members: Member[] }
    const at = `[${index}].members`
    organizations.push({ id, name, members: array?.finished ? finishMembers(array.finished, label, at) : compactMembers(members, label, at, shared) })
    if (slicer.due()) await slicer.pause()
  }
  return organizations
}

/**
 * Members cut from the file and not parsed yet: where each starts and ends in the window, and
 * whether its text is already what JSON.stringify writes (then it is copied, not serialized again).
 */
class MemberBatch {
  private starts: number[] = []
  private ends: number[] = []
  private canonical: boolean[] = []
  private colons: number[] = []

  /** Adds a member; parses the batch once it is large enough. Answers -1, for the next member's start. */
  add (window: Buffer, array: MembersArray, organization: number, start: number, end: number, canonical: boolean, colons: number) {
    this.starts.push(start)
    this.ends.push(end)
    this.canonical.push(canonical)
    this.colons.push(colons)
    if (end - this.starts[0]! >= BATCH_BYTES) this.parse(window, array, organization)
    return -1
  }

  /** Parses, validates and compacts the members of the batch, in one JSON.parse. */
  parse (window: Buffer, array: MembersArray, organization: number) {
    if (this.starts.length === 0) return
    const bytes = window.subarray(this.starts[0], this.ends.at(-1))
    if (!isUtf8(bytes)) throw new NotPlainJson()
    let values: unknown[]
    try {
      values = JSON.parse(`[${bytes.toString()}]`) as unknown[]
    } catch {
      throw new NotPlainJson()
    }
    if (values.length !== this.starts.length) throw new NotPlainJson()
    for (let k = 0; k < values.length; k++) {
      const index = array.count++
      if (array.problem !== undefined) continue
      const value = values[k]
      array.problem = memberProblem(value, organization, index)
      if (array.problem !== undefined) continue
      // Two keys of the same name make one field of the object, and its text could not be copied.
      let keys = 0
      for (const _ in value as object) keys++
      if (this.canonical[k] && this.colons[k] === keys) array.builder.add(value as Member, window, this.starts[k], this.ends[k])
      else array.builder.add(value as Member)
    }
    this.starts = []
    this.ends = []
    this.canonical = []
    this.colons = []
  }
}

/**
 * One pass over the file. It tracks strings, nesting, and where it is: the top-level array, an
 * organization's keys, inside a `members` array. The bytes outside `members` arrays (their brackets
 * included) are kept as the skeleton; the members are cut one by one and parsed in batches. A
 * member, or an organization without its members, of more than MAX_RECORD_BYTES is a DataError.
 */
async function scan (handle: FileHandle, label: string, shared: ReadonlyMap<number, Block> | undefined) {
  let window = Buffer.allocUnsafe(WINDOW_BYTES)
  let filled = 0
  let pos = 0
  let first = true
  const skeleton: Buffer[] = []
  let runStart = 0
  /** The bytes of the skeleton so far, and where in them the organization being read starts. */
  let skeletonBytes = 0
  let organizationStart = 0
  const arrays = new Map<number, MembersArray>()

  let depth = 0
  let inString = false
  let escaped = false
  let expectTopValue = false
  let organization = -1
  // Keys of an organization: 0 expecting a key, 1 in it, 2 expecting ':', 3 expecting a value, 4 in or after a value.
  let keyState = 4
  let keyMatch = 0
  let membersKey = false
  // Inside a members array: 0 after '[', 1 after a member, 2 after ','.
  let array: MembersArray | undefined
  let memberState = 0
  let memberStart = -1
  let inScalar = false
  let canonical = true
  let colons = 0
  // The scan's state lives in locals that no function captures: it stays in registers, which the
  // loop over every byte of the file needs (twice as fast as in a closure's context).
  const batch = new MemberBatch()

  for (;;) {
    const { bytesRead } = await handle.read(window, filled, window.length - filled, null)
    if (bytesRead === 0) break
    filled += bytesRead
    if (first) {
      first = false
      if (UTF8_BOM.every((byte, i) => window[i] === byte)) pos = runStart = UTF8_BOM.length
    }
    for (; pos < filled; pos++) {
      let c = window[pos]!
      if (inString) {
        if (escaped) {
          escaped = false
          // JSON.stringify writes no \u escape but for control characters, and never \/.
          if (c === 0x75 || c === 0x2f) canonical = false
          continue
        }
        if (keyState !== 1) {
          // Most of the file: the inside of a string, up to its closing quote.
          while (c !== 0x22 && c !== 0x5c) {
            if (++pos === filled) break
            c = window[pos]!
          }
          if (pos === filled) break
        }
        if (c === 0x5c) {
          escaped = true
          if (keyState === 1 && array === undefined) keyMatch = -1
        } else if (c === 0x22) {
          inString = false
          if (array !== undefined) {
            if (depth === 3) memberStart = batch.add(window, array, organization, memberStart, pos + 1, canonical, colons)
          } else if (keyState === 1 && depth === 2) {
            keyState = 2
            membersKey = keyMatch === MEMBERS.length
          }
        } else if (keyState === 1 && array === undefined && depth === 2 && keyMatch >= 0) {
          keyMatch = keyMatch < MEMBERS.length && MEMBERS[keyMatch] === c ? keyMatch + 1 : -1
        }
        continue
      }
      if (array !== undefined) {
        if (memberStart >= 0 && depth >= 4) {
          if (c === 0x22) inString = true
          else if (c === 0x7b || c === 0x5b) {
            if (++depth > MAX_DEPTH) throw new NotPlainJson()
          } else if (c === 0x7d || c === 0x5d) {
            if (--depth === 3) memberStart = batch.add(window, array, organization, memberStart, pos + 1, canonical, colons)
          } else if (c === 0x3a) {
            if (depth === 4) colons++
          } else if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09 || (c >= 0x2b && c <= 0x39 && c !== 0x2c && c !== 0x2f)) {
            // Spaces, or a number (whose form JSON.stringify may write otherwise).
            canonical = false
          }
          continue
        }
        const space = c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09
        if (inScalar) {
          if (!space && c !== 0x2c && c !== 0x5d) continue
          inScalar = false
          memberStart = batch.add(window, array, organization, memberStart, pos, canonical, colons)
        }
        if (space) continue
        if (c === 0x2c) {
          if (memberState !== 1) throw new NotPlainJson()
          memberState = 2
        } else if (c === 0x5d) {
          if (memberState === 2) throw new NotPlainJson()
          batch.parse(window, array, organization)
          array.finished = array.builder.finish()
          array = undefined
          depth = 2
          runStart = pos
        } else {
          if (memberState === 1) throw new NotPlainJson()
          memberState = 1
          memberStart = pos
          canonical = true
          colons = 0
          if (c === 0x7b || c === 0x5b) depth = 4
          else if (c === 0x22) inString = true
          else {
            inScalar = true
            canonical = false
          }
        }
        continue
      }
      // The skeleton: everything outside the members arrays.
      const space = c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09
      if (space) continue
      // Anything but an array would be held whole as the skeleton: readRefusedFile reads it instead.
      if (depth === 0 && c !== 0x5b) throw new NotPlainJson()
      if (depth === 1 && expectTopValue && c !== 0x5d && c !== 0x2c) {
        organization++
        organizationStart = skeletonBytes + pos - runStart
        expectTopValue = false
      }
      const value = depth === 2 && keyState === 3
      if (value) keyState = 4
      if (c === 0x22) {
        inString = true
        if (depth === 2 && keyState === 0) {
          keyState = 1
          keyMatch = 0
        }
      } else if (c === 0x7b || c === 0x5b) {
        if (c === 0x5b && value && membersKey) {
          skeleton.push(Buffer.from(window.subarray(runStart, pos + 1)))
          skeletonBytes += pos + 1 - runStart
          array = { builder: new MemberListBuilder(shared), count: 0 }
          arrays.set(organization, array)
          memberState = 0
          depth = 3
          membersKey = false
          continue
        }
        if (depth === 0) expectTopValue = true
        if (++depth > MAX_DEPTH) throw new NotPlainJson()
        if (depth === 2 && c === 0x7b) keyState = 0
      } else if (c === 0x7d || c === 0x5d) {
        if (--depth < 0) throw new NotPlainJson()
      } else if (c === 0x2c) {
        if (depth === 1) expectTopValue = true
        else if (depth === 2) keyState = 0
      } else if (c === 0x3a) {
        if (depth === 2 && keyState === 2) keyState = 3
      }
    }
    // Parse what is whole; keep the member being cut (and the bytes of the skeleton) for the next read.
    if (array !== undefined) batch.parse(window, array, organization)
    if (array === undefined) {
      skeleton.push(Buffer.from(window.subarray(runStart, filled)))
      skeletonBytes += filled - runStart
      if (organization >= 0 && skeletonBytes - organizationStart > MAX_RECORD_BYTES) {
        throw new DataError(`${label}: [${organization}]: an organization of more than ${MAX_RECORD_BYTES / 1024 / 1024} MiB besides its members`)
      }
      filled = pos = runStart = 0
    } else {
      if (memberStart >= 0 && filled - memberStart > MAX_RECORD_BYTES) {
        throw new DataError(`${label}: [${organization}].members[${array.count}]: a member of more than ${MAX_RECORD_BYTES / 1024 / 1024} MiB`)
      }
      const keep = memberStart >= 0 ? memberStart : filled
      const carried = filled - keep
      window = carryOver(window, keep, filled)
      if (memberStart >= 0) memberStart = 0
      filled = pos = carried
    }
  }
  if (inString || array !== undefined || depth !== 0) throw new NotPlainJson()
  const text = Buffer.concat(skeleton)
  if (!isUtf8(text)) throw new NotPlainJson()
  try {
    return { skeleton: JSON.parse(text.toString()) as unknown, arrays }
  } catch {
    throw new NotPlainJson()
  }
}
