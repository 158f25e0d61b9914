import type { TSchema } from '@sinclair/typebox'
import { ValueErrorType, type ValueError } from '@sinclair/typebox/errors'
import { COUNTRY_CODE_FORMAT } from './formats.js'

/** `/3/datacenters/1` becomes `[3].datacenters[1]`, the way a reader points into the file. */
function formatPath (pointer: string): string {
  return pointer.split('/').slice(1).map((part) => /^\d+$/.test(part) ? `[${part}]` : `.${part}`).join('').replace(/^\./, '')
}

/** One line a person can act on: where the value is, what it is, what was expected. */
export function describeValueError (error: ValueError): string {
  // An enumeration lists its choices; a nullable field reports its non-null branch.
  if (error.type === ValueErrorType.Union) {
    const choices = (error.schema.anyOf as TSchema[]).map((branch) => branch.const)
    if (choices.every((choice) => choice !== undefined)) {
      return `${formatPath(error.path)}: ${JSON.stringify(error.value)} is not one of ${choices.map((c) => JSON.stringify(c)).join(', ')}`
    }
    const branches = error.errors.map((iterator) => iterator.First()).filter((e): e is ValueError => e !== undefined)
    const informative = branches.find((e) => e.type !== ValueErrorType.Null) ?? branches[0]
    if (informative) return describeValueError(informative)
  }
  const where = formatPath(error.path) || '(top level)'
  return `${where}: ${explain(error)}`
}

function explain (error: ValueError): string {
  const value = JSON.stringify(error.value)
  switch (error.type) {
    case ValueErrorType.ObjectRequiredProperty:
      return 'is required'
    case ValueErrorType.ObjectAdditionalProperties:
      return 'is not a known field'
    case ValueErrorType.StringFormat:
      return formatMessage(error.schema, value)
    default:
      return `${value}: ${error.message.charAt(0).toLowerCase()}${error.message.slice(1)}`
  }
}

function formatMessage (schema: TSchema, value: string): string {
  switch (schema.format) {
    case COUNTRY_CODE_FORMAT: return `${value} is not an ISO 3166-1 alpha-2 code`
    case 'uri': return `${value} is not an http(s) URL`
    case 'email': return `${value} is not an e-mail address`
    default: return `${value} does not match format ${schema.format}`
  }
}
