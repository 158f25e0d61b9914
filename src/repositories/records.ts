import { Type, type Static, type TSchema } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { describeErrors, quoteValue } from '../schemas/describe-error.js'
import { KINDS, RECORD_KINDS, type RecordKind } from '../registry.js'
import { MemberSchema, type Member } from '../schemas/member.js'
import { MAX_MEMBERS, MemberList } from './member-list.js'
import { DataError } from './data-error.js'
import { isApiKey } from './key-table.js'
import type { RecordCounts } from './snapshot.js'

export { DataError }

/** One record of a kind as a file or a table holds it: organizations with arrays of members. */
type RecordOf<K extends RecordKind> = Static<(typeof KINDS)[K]['schema']>

/** The records of one kind as a file or a table holds them. */
export type Records<K extends RecordKind> = Array<RecordOf<K>>

/** An organization as the snapshot holds it: its members serialized (member-list.ts). */
export interface Organization extends Omit<RecordOf<'organizations'>, 'members'> {
  readonly members: MemberList
}

/** A record as loaded: what a source hands over and the snapshot holds (an organization's members serialized). */
export type Loaded<K extends RecordKind> = K extends 'organizations' ? Organization : RecordOf<K>

/** One complete set of records, as a source reads it whole (`npm run db -- export`, `npm run check`). */
export type DirectoryData = { readonly [K in RecordKind]: ReadonlyArray<Loaded<K>> }

type Checker = ReturnType<typeof TypeCompiler.Compile<TSchema>>

/**
 * Each schema's check compiled once, when first used: checking a million records takes a fraction of
 * a second this way, and the slower error walk only runs when the data is invalid. Not at start: a
 * compiled check is code generated and compiled again by every process (no compile cache keeps it),
 * and a start with files uses only the checks of single records.
 */
function compiledOnce (schemaOf: (kind: RecordKind) => TSchema): (kind: RecordKind) => Checker {
  const compiled = new Map<RecordKind, Checker>()
  return (kind) => {
    let checker = compiled.get(kind)
    if (checker === undefined) compiled.set(kind, checker = TypeCompiler.Compile(schemaOf(kind)))
    return checker
  }
}

const checkerOf = compiledOnce((kind) => Type.Array(KINDS[kind].schema))
const recordCheckerOf = compiledOnce((kind) => KINDS[kind].schema)

/** The records of one kind, or a DataError `where: [index].field: problem`. */
export function validateRecords<K extends RecordKind> (kind: K, value: unknown, where: string): Records<K> {
  const checker = checkerOf(kind)
  if (!checker.Check(value)) {
    throw new DataError(`${where}: ${describeErrors(checker.Errors(value)) ?? 'invalid'}`)
  }
  return value as Records<K>
}

/**
 * Verdicts of a kind's schema written out where the compiled check was measured to cost too much
 * for a million records; the schema still says what is wrong. A test holds each equal to its schema.
 */
const fastChecks: { readonly [K in RecordKind]?: (value: unknown) => boolean } = { keys: isApiKey }

/**
 * The most bytes a valid value of a field takes in UTF-8, by its schema's own limits: 3 a UTF-16 code
 * unit of its maxLength (a code unit takes 3 bytes at most, and the two of a surrogate pair 4), the
 * longest of its literals, the largest of a union's branches (null takes none). Undefined where the
 * schema sets no limit. What reads a value before it is checked (PostgreSQL's rows) leaves a longer one
 * unread: whatever it holds, the schema refuses it.
 */
export function maxBytes (schema: TSchema): number | undefined {
  if (Array.isArray(schema.anyOf)) {
    const branches = (schema.anyOf as TSchema[]).map(maxBytes)
    return branches.some((bytes) => bytes === undefined) ? undefined : Math.max(...branches as number[])
  }
  if (typeof schema.const === 'string') return Buffer.byteLength(schema.const)
  if (schema.type === 'null') return 0
  if (schema.type === 'string' && typeof schema.maxLength === 'number') return 3 * schema.maxLength
  return undefined
}

/** What is wrong with record `index` of a kind (`[5].field: problem`); undefined when it is valid. */
export function recordProblem (kind: RecordKind, value: unknown, index: number): string | undefined {
  const fast = fastChecks[kind]
  if (fast === undefined ? recordCheckerOf(kind).Check(value) : fast(value)) return undefined
  return locate(`[${index}]`, describeErrors(recordCheckerOf(kind).Errors(value)))
}

function locate (at: string, described: string | undefined): string {
  const problem = described ?? '(top level): invalid'
  if (problem.startsWith('(top level)')) return at + problem.slice('(top level)'.length)
  return `${at}${problem.startsWith('[') ? '' : '.'}${problem}`
}

let memberChecker: Checker | undefined

/**
 * What is wrong with a member (member `index` of organization `organization`), naming where it is
 * (`[0].members[5].role: ...`); undefined when it is valid.
 */
export function memberProblem (value: unknown, organization: number, index: number): string | undefined {
  // Compiled when first used, as checkerOf's.
  memberChecker ??= TypeCompiler.Compile(MemberSchema)
  if (memberChecker.Check(value)) return undefined
  return locate(`[${organization}].members[${index}]`, describeErrors(memberChecker.Errors(value)))
}

/**
 * The members of an organization, valid, compacted (member-list.ts), or a DataError naming the first
 * member whose id repeats, or saying there are too many. `at` says where the members are in `where`.
 */
export function compactMembers (members: readonly Member[], where: string, at: string): MemberList {
  const problem = membersProblem(members, at)
  if (problem !== undefined) throw new DataError(`${where}: ${problem}`)
  return MemberList.of(members, `${where}: ${at}`)
}

/**
 * What is wrong between an organization's valid members (`at` says where they are): the first whose id
 * repeats (`[3].members[5].id: "x" duplicates [3].members[2].id`), else more than MAX_MEMBERS, as
 * MemberList.of says it; undefined when nothing is.
 */
export function membersProblem (members: readonly Member[], at: string): string | undefined {
  const seen = new Map<string, number>()
  for (const [index, { id }] of members.entries()) {
    const first = seen.get(id)
    if (first !== undefined) return `${at}[${index}].id: ${quoteValue(id, 'id')} duplicates ${at}[${first}].id`
    seen.set(id, index)
  }
  return members.length > MAX_MEMBERS ? `${at}: more than ${MAX_MEMBERS} members, the most an organization may have` : undefined
}

/**
 * The rule between the records of one kind: the fields the registry says are unique are. `where`
 * names the origin (a file, a table) in the message.
 */
export function assertUnique<K extends RecordKind> (kind: K, records: ReadonlyArray<Loaded<K>>, where: string) {
  for (const field of KINDS[kind].unique) {
    const values = records.map((record) => (record as Record<string, unknown>)[field] as string)
    // A Set answers the common case (all unique) in one pass; the duplicate is located only when there is one.
    if (new Set(values).size === values.length) continue
    const seen = new Map<string, number>()
    values.forEach((value, index) => {
      const previous = seen.get(value)
      if (previous !== undefined) {
        throw new DataError(`${where}: ${duplicateProblem(field, value, index, previous)}`)
      }
      seen.set(value, index)
    })
  }
}

/** `[5].name: "x" duplicates [2].name`: record `index` repeats record `first`'s `value` of a unique field. */
export function duplicateProblem (field: string, value: string, index: number, first: number): string {
  // Bounded, and never a key hash: say where the duplicate is.
  return `[${index}].${field}: ${quoteValue(value, field)} duplicates [${first}].${field}`
}

/** `3 providers, 2 endpoints, 2 organizations with 253 members, 4 keys`: what a command says it read or wrote. */
export function describeCounts (counts: RecordCounts): string {
  return RECORD_KINDS.map((kind) => KINDS[kind].index === 'organizations'
    ? `${counts[kind]} ${kind} with ${counts.members} members`
    : `${counts[kind]} ${kind}`).join(', ')
}

/** Keys of missing organizations listed at most: a million keys of a removed organization should not bury the verdict. */
const ORPHANS_LISTED = 10

/**
 * Keys whose organization the data does not have, a line each: npm run check warns of them, or refuses
 * them with --strict. The server serves such a key (an organization may go before its keys are
 * revoked; its member listing answers 404), but it is more often a typo. Names the key, never its hash.
 */
export function orphanKeys (data: DirectoryData): string[] {
  const [keys, organizations] = [KINDS.keys.file, KINDS.organizations.file]
  const ids = new Set(data.organizations.map((organization) => organization.id))
  const orphans = data.keys.filter((key) => !ids.has(key.organization_id))
  const lines = orphans.slice(0, ORPHANS_LISTED).map((key) =>
    `${keys}: key ${JSON.stringify(key.name)} is of organization ${JSON.stringify(key.organization_id)}, which ${organizations} does not have; its member listing answers 404`)
  if (orphans.length > ORPHANS_LISTED) lines.push(`${keys}: ${orphans.length - ORPHANS_LISTED} more keys of organizations ${organizations} does not have`)
  return lines
}

/** Records of each kind; `members` counts all organizations' members. */
export function countRecords (data: DirectoryData): RecordCounts {
  return {
    ...Object.fromEntries(RECORD_KINDS.map((kind) => [kind, data[kind].length])) as { [kind in RecordKind]: number },
    members: data.organizations.reduce((sum, organization) => sum + organization.members.length, 0)
  }
}
