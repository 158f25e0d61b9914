/**
 * What the code walks, derived from the registry of kinds (kinds.ts): the kinds, those served as whole
 * lists, and the public operations.
 */
import { KINDS, type Operation } from './kinds.js'

export { KINDS }
export type { ListOperation, Operation } from './kinds.js'

export type RecordKind = keyof typeof KINDS

export const RECORD_KINDS = Object.keys(KINDS) as RecordKind[]

/** The kinds served as a whole list, each by an operation of its own. */
export type ListKind = { [K in RecordKind]: (typeof KINDS)[K]['index'] extends 'list' ? K : never }[RecordKind]

export const LIST_KINDS = RECORD_KINDS.filter((kind) => KINDS[kind].index === 'list') as ListKind[]

/** What a route's schema says of its operation, as the OpenAPI document shows it. */
export function describeOperation ({ operationId, tag, summary, description }: Operation) {
  return { operationId, tags: [tag.name], summary, description }
}

/** Every public operation of the API, in the registry's order. */
export const OPERATIONS: readonly Operation[] = RECORD_KINDS.flatMap((kind) => {
  const { operation } = KINDS[kind] as { operation?: Operation }
  return operation === undefined ? [] : [operation]
})
