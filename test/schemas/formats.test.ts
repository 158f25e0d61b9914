import countries from 'i18n-iso-countries'
import { describe, expect, it } from 'vitest'
import { COUNTRY_CODE_FORMAT, ajvFormats } from '../../src/schemas/formats.js'

const isCountryCode = ajvFormats[COUNTRY_CODE_FORMAT]!

describe('the country code format', () => {
  // formats.ts reads the codes from the package's core file, without its locales; the package's
  // documented entry (imported here) loads them all. This fails if an upgrade moves or changes that file.
  it('accepts exactly the ISO 3166-1 alpha-2 codes of i18n-iso-countries', () => {
    const letters = [...'ABCDEFGHIJKLMNOPQRSTUVWXYZ']
    const accepted = letters.flatMap((first) => letters.map((second) => first + second)).filter(isCountryCode)
    expect(accepted).toEqual(Object.keys(countries.getAlpha2Codes()).sort())
    expect(accepted).toContain('US')
    for (const value of ['us', 'ZZ', 'EU', 'USA', '']) expect(isCountryCode(value), value).toBe(false)
  })
})
