import { FormatRegistry } from '@sinclair/typebox'
// The library without its 80 locale files (its Node entry loads them all: 4 MB and 15 ms for
// names we never show); the codes are all we need.
import countries from 'i18n-iso-countries/index.js'

// TypeBox ships no string formats; these are the ones our schemas use. Fastify's Ajv
// learns the same predicates through `ajvFormats`, so both validators agree.
const isoAlpha2Codes = new Set(Object.keys(countries.getAlpha2Codes()))

export const COUNTRY_CODE_FORMAT = 'iso-3166-alpha-2'

export const ajvFormats: Record<string, (value: string) => boolean> = {
  [COUNTRY_CODE_FORMAT]: (value) => isoAlpha2Codes.has(value),
  uri: (value) => /^https?:\/\/[^\s/?#]+[^\s]*$/.test(value) && URL.canParse(value),
  email: (value) => /^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(value)
}

for (const [name, check] of Object.entries(ajvFormats)) {
  FormatRegistry.Set(name, check)
}
