import { FormatRegistry } from '@sinclair/typebox'
// The library's core file (the entry it gives browsers), without the 80 locale files its Node entry
// loads at every start for names we never show: the codes are all we need. test/schemas/formats.test.ts
// holds them equal to the documented entry's, and fails on the upgrade that moves or changes this file.
import countries from 'i18n-iso-countries/index.js'

// TypeBox ships no string formats; these are the ones our schemas use. The same predicates,
// `ajvFormats`, let Ajv check responses against the OpenAPI document (test/conformance.ts), so both
// validators agree. (Fastify's own Ajv validates only the member query, which has no format.)
const isoAlpha2Codes = new Set(Object.keys(countries.getAlpha2Codes()))

export const COUNTRY_CODE_FORMAT = 'iso-3166-alpha-2'
/** Text without a lone surrogate (JSON can write one, UTF-8 cannot hold one: key names are held as UTF-8). */
export const WELL_FORMED_FORMAT = 'well-formed-unicode'

/** An RFC 3339 timestamp with its time zone (`Z` or an offset), a year of four digits, a day the calendar has. */
export const TIMESTAMP_FORMAT = 'rfc3339-timestamp'

const TIMESTAMP = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-](\d{2}):(\d{2}))$/

/** The instant an RFC 3339 timestamp names, in ms since the epoch, or NaN when it is not one. */
export function timestampMs (value: string): number {
  const match = TIMESTAMP.exec(value)
  if (match === null) return NaN
  const [, year, month, day, hour, minute, second, , , offsetHours, offsetMinutes] = match.map(Number)
  // Date takes 31 February for 3 March: the day must come back as given (setUTCFullYear, since Date.UTC takes 0-99 for 1900-1999).
  const date = new Date(0)
  date.setUTCFullYear(year!, month! - 1, day!)
  // A leap second (:60) is refused: JavaScript has none to compare with.
  if (date.getUTCMonth() !== month! - 1 || date.getUTCDate() !== day! || hour! > 23 || minute! > 59 || second! > 59) return NaN
  if (match[8]!.length > 1 && (offsetHours! > 23 || offsetMinutes! > 59)) return NaN
  return Date.parse(value.replace(' ', 'T').toUpperCase())
}

/** An instant as the data holds it: RFC 3339 in UTC, to the millisecond, without `.000` (2026-12-31T23:59:59Z). */
export function timestampText (ms: number): string {
  return new Date(ms).toISOString().replace('.000Z', 'Z')
}

/**
 * An instant as the commands print it: RFC 3339 in UTC to the second (2026-12-31T23:59:59Z), whatever
 * offset or fraction the data holds it with, so that a key's expiry reads the same from either store.
 * Truncated: a key printed to expire at :59 works until then at least.
 */
export function instantText (ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z')
}

export const ajvFormats: Record<string, (value: string) => boolean> = {
  [TIMESTAMP_FORMAT]: (value) => !Number.isNaN(timestampMs(value)),
  [COUNTRY_CODE_FORMAT]: (value) => isoAlpha2Codes.has(value),
  [WELL_FORMED_FORMAT]: (value) => value.isWellFormed(),
  uri: (value) => /^https?:\/\/[^\s/?#]+[^\s]*$/.test(value) && URL.canParse(value),
  email: (value) => /^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(value)
}

for (const [name, check] of Object.entries(ajvFormats)) {
  FormatRegistry.Set(name, check)
}
