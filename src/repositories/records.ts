import { Type, type Static } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { describeValueError, quoteValue } from '../schemas/describe-error.js'
import { ProviderSchema } from '../schemas/provider.js'
import { EndpointSchema } from '../schemas/endpoint.js'
import { OrganizationSchema, ApiKeySchema } from '../schemas/fixtures.js'
import { MemberSchema, type Member } from '../schemas/member.js'
import { MemberList, MemberListBuilder } from './member-list.js'

/**
 * The records of the directory, whatever their source (files, PostgreSQL): one schema per kind,
 * and the rules that span records. Both sources validate with these, so they accept exactly the
 * same data.
 */
const recordSchemas = {
  providers: Type.Array(ProviderSchema),
  endpoints: Type.Array(EndpointSchema),
  organizations: Type.Array(OrganizationSchema),
  keys: Type.Array(ApiKeySchema)
}

export type RecordKind = keyof typeof recordSchemas

export const RECORD_KINDS = Object.keys(recordSchemas) as RecordKind[]

/** The records of one kind as a file or a table holds them: organizations with arrays of members. */
export type Records<K extends RecordKind> = Static<(typeof recordSchemas)[K]>

/** An organization as the snapshot holds it: its members serialized (member-list.ts). */
export interface Organization extends Omit<Records<'organizations'>[number], 'members'> {
  readonly members: MemberList
}

/** One complete, validated set of records. Never mutated: a change makes a new one. */
export type DirectoryData = { readonly [kind in Exclude<RecordKind, 'organizations'>]: Records<kind> } & {
  readonly organizations: readonly Organization[]
}

/** Data that breaks a rule; its message is one line naming where (file or table), record and field. */
export class DataError extends Error {
  override name = 'DataError'
}

// Compiled once: checking a million members takes a fraction of a second this way,
// and the slower error walk only runs when the data is invalid.
const checkers = Object.fromEntries(
  Object.entries(recordSchemas).map(([kind, schema]) => [kind, TypeCompiler.Compile(schema)])
) as { [kind in RecordKind]: ReturnType<typeof TypeCompiler.Compile<(typeof recordSchemas)[kind]>> }

/** The records of one kind, or a DataError `where: [index].field: problem`. */
export function validateRecords<K extends RecordKind> (kind: K, value: unknown, where: string): Records<K> {
  const checker = checkers[kind]
  if (!checker.Check(value)) {
    const first = checker.Errors(value).First()
    throw new DataError(`${where}: ${first ? describeValueError(first) : 'invalid'}`)
  }
  return value as Records<K>
}

const memberChecker = TypeCompiler.Compile(MemberSchema)

/**
 * What is wrong with a member (member `index` of organization `organization`), naming where it is
 * (`[0].members[5].role: ...`); undefined when it is valid.
 */
export function memberProblem (value: unknown, organization: number, index: number): string | undefined {
  if (memberChecker.Check(value)) return undefined
  const at = `[${organization}].members[${index}]`
  const first = memberChecker.Errors(value).First()
  const problem = first ? describeValueError(first) : '(top level): invalid'
  if (problem.startsWith('(top level)')) return at + problem.slice('(top level)'.length)
  return `${at}${problem.startsWith('[') ? '' : '.'}${problem}`
}

/**
 * The members of an organization whose records are valid, compacted, or a DataError naming the
 * first member whose id repeats. `at` says where the members are in `where`.
 */
export function compactMembers (members: Iterable<Member>, where: string, at: string, previous?: Iterable<MemberList>): MemberList {
  const builder = new MemberListBuilder(previous)
  for (const member of members) builder.add(member)
  return finishMembers(builder, where, at)
}

/** The list a builder holds, or a DataError naming the first member whose id repeats. */
export function finishMembers (builder: MemberListBuilder, where: string, at: string): MemberList {
  const { list, duplicate } = builder.finish()
  if (duplicate) {
    throw new DataError(`${where}: ${at}[${duplicate.index}].id: ${quoteValue(duplicate.id, 'id')} duplicates ${at}[${duplicate.first}].id`)
  }
  return list
}

/**
 * The rules between records, once each kind is valid: what must be unique. `where` names the
 * origin of each kind (a file, a table) in the message.
 */
export function validateDirectory (data: DirectoryData, where: { [kind in RecordKind]: string }): DirectoryData {
  assertUnique(where.providers, data.providers.map((provider) => provider.slug), 'slug')
  assertUnique(where.organizations, data.organizations.map((organization) => organization.id), 'id')
  assertUnique(where.keys, data.keys.map((key) => key.sha256), 'sha256')
  // Operators revoke a key by its name: a name must say which record.
  assertUnique(where.keys, data.keys.map((key) => key.name), 'name')
  // (Member ids are checked as their lists are built: compactMembers.)
  return data
}

function assertUnique (where: string, values: string[], field: string) {
  // A Set answers the common case (all unique) in one pass; the duplicate is located only when there is one.
  if (new Set(values).size === values.length) return
  const seen = new Map<string, number>()
  values.forEach((value, index) => {
    const previous = seen.get(value)
    if (previous !== undefined) {
      // Bounded, and never a key hash: say where the duplicate is.
      throw new DataError(`${where}: [${index}].${field}: ${quoteValue(value, field)} duplicates [${previous}].${field}`)
    }
    seen.set(value, index)
  })
}
