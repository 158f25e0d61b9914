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

export const ajvFormats: Record<string, (value: string) => boolean> = {
  [COUNTRY_CODE_FORMAT]: (value) => isoAlpha2Codes.has(value),
  [WELL_FORMED_FORMAT]: (value) => value.isWellFormed(),
  uri: (value) => /^https?:\/\/[^\s/?#]+[^\s]*$/.test(value) && URL.canParse(value),
  email: (value) => /^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(value)
}

for (const [name, check] of Object.entries(ajvFormats)) {
  FormatRegistry.Set(name, check)
}
