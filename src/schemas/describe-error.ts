import type { TSchema } from '@sinclair/typebox'
import { ValueErrorType, type ValueError } from '@sinclair/typebox/errors'
import { COUNTRY_CODE_FORMAT, TIMESTAMP_FORMAT, WELL_FORMED_FORMAT } from './formats.js'
import { truncate } from '../truncate.js'
import { containsSecret } from '../secrets.js'

/** Fields whose value a message never shows: a key's hash is as good as the key to whoever holds a copy of it. */
const SECRET_FIELDS = new Set(['sha256'])

/** How much of a value a message quotes. */
const QUOTED_MAX = 80

/** Past the cut, room for the longest secret shape (an `sk-or-v1-` key): one the cut goes through is still seen. */
const SECRET_REACH = 80

/**
 * A value as a message may show it: a scalar quoted and bounded, an array or an object only named
 * (it may be the whole file, and hold key hashes), a secret field's value not at all, nor a value
 * shaped like a key or a hash in any other field (a hash put in the wrong field is as secret).
 * Checked before the value is cut: a cut hash is still most of one.
 */
export function quoteValue (value: unknown, field?: string): string {
  if (field !== undefined && SECRET_FIELDS.has(field)) return 'the value'
  if (Array.isArray(value)) return `an array of ${value.length} items`
  if (value !== null && typeof value === 'object') return 'an object'
  // Cut before it is quoted (a value may be a string of a hundred megabytes), with room past the cut
  // for a key or a hash the cut would go through: never quoted in part either.
  const kept = typeof value === 'string' ? value.slice(0, QUOTED_MAX + SECRET_REACH) : value
  const quoted = JSON.stringify(kept) ?? String(kept)
  return containsSecret(quoted) ? 'the value' : truncate(quoted, QUOTED_MAX)
}

/** The last field name of a value pointer (`/3/sha256` gives `sha256`). */
const fieldOf = (pointer: string) => pointer.slice(pointer.lastIndexOf('/') + 1)

/**
 * `/3/datacenters/1` becomes `[3].datacenters[1]`, the way a reader points into the file. A field
 * named like a key or a hash (an unknown field) is shown as `(redacted)`: brackets would read as an index.
 * A field's name is cut as a value is: an unknown field may have a name as long as the file.
 */
function formatPath (pointer: string): string {
  return pointer.split('/').slice(1).map((part) => {
    if (/^\d+$/.test(part)) return `[${part}]`
    const kept = part.slice(0, QUOTED_MAX + SECRET_REACH)
    return `.${containsSecret(kept) ? '(redacted)' : truncate(kept, QUOTED_MAX)}`
  }).join('').replace(/^\./, '')
}

/** How many of the errors after a missing field are looked through for the field it was written as. */
const SLIPS_LOOKED_AT = 100

/**
 * The first problem of a value's errors, as describeValueError tells it; undefined when there is none.
 * A required field that is missing is often there under a slip of its name (`organisation_id`), which
 * is then also an unknown field of the same record: TypeBox reports every missing field of an object
 * before its unknown ones, so those that follow the first error are looked through for it.
 */
export function describeErrors (errors: Iterable<ValueError>): string | undefined {
  const iterator = errors[Symbol.iterator]()
  const first = iterator.next()
  if (first.done === true) return undefined
  const error = first.value
  const problem = describeValueError(error)
  if (error.type !== ValueErrorType.ObjectRequiredProperty) return problem
  const parent = error.path.slice(0, error.path.lastIndexOf('/'))
  const unknown: string[] = []
  for (let looked = 0; looked < SLIPS_LOOKED_AT; looked++) {
    const next = iterator.next()
    if (next.done === true || next.value.path.slice(0, next.value.path.lastIndexOf('/')) !== parent) break
    if (next.value.type === ValueErrorType.ObjectAdditionalProperties) unknown.push(fieldOf(next.value.path))
    else if (next.value.type !== ValueErrorType.ObjectRequiredProperty) break
  }
  const field = fieldOf(error.path)
  const written = nearestOf(field, unknown)
  return written === undefined ? problem : `${problem}; the record has ${JSON.stringify(written)}, did you mean ${JSON.stringify(field)}?`
}

/** One line a person can act on: where the value is, what it is, what was expected. */
function describeValueError (error: ValueError): string {
  // An enumeration lists its choices; a nullable field reports its non-null branch.
  if (error.type === ValueErrorType.Union) {
    const choices = (error.schema.anyOf as TSchema[]).map((branch) => branch.const)
    if (choices.every((choice) => choice !== undefined)) {
      return `${formatPath(error.path)}: ${quoteValue(error.value, fieldOf(error.path))} is not one of ${choices.map((c) => JSON.stringify(c)).join(', ')}`
    }
    const branches = error.errors.map((iterator) => iterator.First()).filter((e): e is ValueError => e !== undefined)
    const informative = branches.find((e) => e.type !== ValueErrorType.Null) ?? branches[0]
    if (informative) return describeValueError(informative)
  }
  const where = formatPath(error.path) || '(top level)'
  return `${where}: ${explain(error)}`
}

function explain (error: ValueError): string {
  const value = quoteValue(error.value, fieldOf(error.path))
  switch (error.type) {
    case ValueErrorType.ObjectRequiredProperty:
      return 'is required'
    case ValueErrorType.ObjectAdditionalProperties:
      // A map's keys are names of a form, not fields to pick from (native_tools: openrouter:*).
      if (error.schema.patternProperties !== undefined) return `is not a known field; names here match ${Object.keys(error.schema.patternProperties).join(' or ')}`
      return unknownFieldMessage(fieldOf(error.path), Object.keys(error.schema.properties ?? {}))
    case ValueErrorType.StringFormat:
      return formatMessage(error.schema, value)
    case ValueErrorType.StringPattern:
      // A pattern is for the validator; a person reads what it stands for, where the schema says.
      if (typeof error.schema.expected === 'string') return `${value} is not ${error.schema.expected}`
      return `${value}: ${error.message.charAt(0).toLowerCase()}${error.message.slice(1)}`
    default:
      return `${value}: ${error.message.charAt(0).toLowerCase()}${error.message.slice(1)}`
  }
}

/**
 * A typo is the usual unknown field (`headquarter`), and refusing it without saying what was meant
 * leaves the reader to compare it with the documentation by eye: the nearest known field is named when
 * it is a slip away (at most two edits, and fewer than a third of the name's letters).
 */
function unknownFieldMessage (field: string, known: string[]): string {
  const best = nearestOf(field, known)
  return best !== undefined ? `is not a known field; did you mean "${best}"?` : 'is not a known field'
}

/** The candidate a slip away from `field`, if any: the nearest, at most two edits and fewer than a third of its letters. */
const nearestOf = (field: string, candidates: readonly string[]) =>
  nearest(field, candidates, (name) => name.toLowerCase(), () => Math.min(2, Math.ceil(field.length / 3)))

/**
 * The candidate nearest to `word` as `bare` spells both (case, underscores), if it is at most
 * `maxEdits(candidate)` edits away (editDistance).
 */
export function nearest (word: string, candidates: readonly string[], bare: (name: string) => string, maxEdits: (candidate: string) => number): string | undefined {
  let best: string | undefined
  let bestDistance = Infinity
  for (const candidate of candidates) {
    // Further apart than a slip whatever their letters: not worth a comparison of every letter with every other.
    if (Math.abs(bare(candidate).length - bare(word).length) > 2) continue
    const distance = editDistance(bare(word), bare(candidate))
    if (distance < bestDistance) [best, bestDistance] = [candidate, distance]
  }
  return best !== undefined && bestDistance <= maxEdits(best) ? best : undefined
}

/**
 * Edits from `a` to `b`: insertions, deletions, substitutions, and two neighbours swapped (`PROT` for
 * `PORT`), which a typist makes as one slip, not two (the optimal string alignment distance).
 */
function editDistance (a: string, b: string): number {
  let before: number[] = []
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const row = [i]
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1))
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) row[j] = Math.min(row[j]!, before[j - 2]! + 1)
    }
    before = previous
    previous = row
  }
  return previous[b.length]!
}

function formatMessage (schema: TSchema, value: string): string {
  switch (schema.format) {
    case COUNTRY_CODE_FORMAT: return `${value} is not an ISO 3166-1 alpha-2 code`
    case WELL_FORMED_FORMAT: return `${value} is not well-formed Unicode (a lone surrogate)`
    case TIMESTAMP_FORMAT: return `${value} is not an RFC 3339 timestamp with a time zone (2026-12-31T23:59:59Z)`
    case 'uri': return `${value} is not an http(s) URL`
    case 'email': return `${value} is not an e-mail address`
    default: return `${value} does not match format ${schema.format}`
  }
}
