/**
 * A record's format as a Markdown table, made from its TypeBox schema: each field with its type,
 * whether the record must have it, and its description. The schema is what the server validates with,
 * so the table says what a data file may hold, and a field added to the schema shows in it.
 */
import type { TSchema } from '@sinclair/typebox'

/** The parts of a JSON Schema (which a TypeBox schema is) that a table shows. */
interface JsonSchema {
  $id?: string
  type?: string
  const?: unknown
  anyOf?: JsonSchema[]
  items?: JsonSchema
  properties?: Record<string, JsonSchema>
  required?: string[]
  description?: string
}

export const code = (text: string) => `\`${text}\``

/** A description within a sentence: "An upstream provider" as "an upstream provider", "API key" as it is. */
export const lowerFirst = (text: string) => /^[A-Z](?![A-Z])/.test(text) ? text[0]!.toLowerCase() + text.slice(1) : text

/** Text of a table's cell: a `|` would end it, `<...>` would be taken for HTML, `*` for emphasis. */
const cell = (text: string) => text.replace(/[|<>*]/g, (character) => `\\${character}`)

/** A value's type in words: `string`, `integer or null`, `array of string`, one of `a`, `b`, `Member`. */
function typeOf (schema: JsonSchema): string {
  if (schema.$id !== undefined) return code(schema.$id)
  if (schema.const !== undefined) return code(String(schema.const))
  if (schema.anyOf !== undefined) {
    const values = schema.anyOf.filter(({ type }) => type !== 'null')
    const type = values.every((value) => value.const !== undefined)
      ? `one of ${values.map(typeOf).join(', ')}`
      : values.map(typeOf).join(' or ')
    if (values.length === schema.anyOf.length) return type
    // "one of `a`, `b`, or null", "array of string, or null": null is neither one of the list nor an item.
    return type.includes(' of ') ? `${type}, or null` : `${type} or null`
  }
  if (schema.type === 'array') return `array of ${typeOf(schema.items!)}`
  return schema.type!
}

/** A field's description: its own, or that of the value a nullable field holds. */
function descriptionOf (schema: JsonSchema): string | undefined {
  return schema.description ?? schema.anyOf?.find(({ type }) => type !== 'null')?.description
}

/** The named objects (with an `$id`: `Member`) a field holds, as itself, in an array or beside null. */
function namedObjectsOf (schema: JsonSchema): JsonSchema[] {
  if (schema.$id !== undefined && schema.type === 'object') return [schema]
  if (schema.items !== undefined) return namedObjectsOf(schema.items)
  return schema.anyOf?.flatMap(namedObjectsOf) ?? []
}

/** The table of an object schema's fields; `what` names the record in a message. */
function fieldTable (schema: JsonSchema, what: string): string {
  const rows = Object.entries(schema.properties ?? {}).map(([field, value]) => {
    const description = descriptionOf(value)
    // A field without one would leave its row empty: the schema is where a field is described.
    if (description === undefined) throw new Error(`${what}: the field ${field} has no description; give it one in its TypeBox schema`)
    return `| ${code(field)} | ${cell(typeOf(value))} | ${schema.required?.includes(field) ? 'yes' : 'no'} | ${cell(description)} |`
  })
  return ['| Field | Type | Required | Description |', '|---|---|---|---|', ...rows].join('\n')
}

/**
 * The tables of a record's format: its fields, then those of each named object a field holds (an
 * organization's `Member`), each once.
 */
export function formatTables (record: TSchema, what: string): string {
  const schema = record as JsonSchema
  const named = [...new Map(Object.values(schema.properties ?? {}).flatMap(namedObjectsOf).map((object) => [object.$id, object])).values()]
  return [
    fieldTable(schema, what),
    ...named.map((object) => `Each ${code(object.$id!)}: ${lowerFirst(recordDescription(object as TSchema, object.$id!))}.\n\n${fieldTable(object, object.$id!)}`)
  ].join('\n\n')
}

/** A schema's description, which says what one record is; `what` names the record in a message. */
export function recordDescription (record: TSchema, what: string): string {
  const { description } = record as JsonSchema
  if (description === undefined) throw new Error(`${what}: the schema has no description; give it one in its TypeBox schema`)
  return description
}
