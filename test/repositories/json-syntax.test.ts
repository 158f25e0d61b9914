import { describe, expect, it } from 'vitest'
import { JsonChecker } from '../../src/repositories/json-syntax.js'

/** The fault the checker finds in `text` written in chunks of `size` bytes. */
function faultOf (text: string | Buffer, size: number) {
  const bytes = Buffer.from(text)
  const checker = new JsonChecker()
  for (let at = 0; at < bytes.length && checker.write(bytes.subarray(at, at + size)); at += size);
  return checker.end()
}

const texts = [
  '[{"name": "a",\n  "slug": "b"\n  "x": 1}]',
  '[{"a": "é", "b": [1, -0.5, 2.5e3, 1E-2, null, true, false, "\\u00e9\\n\\""]}]',
  '[1, 2,]',
  '{"a" 1}',
  '["abc',
  '["a\\x"]',
  '["a\\u12x4"]',
  '[01]',
  '[1.]',
  '[1e+]',
  '[-]',
  '[tru]',
  '[true false]',
  '[1] // done',
  '',
  '   ',
  '[{"a": [1, 2',
  '["ééé" x]',
  '["🦊" x]',
  '[{"two\\nlines": }]',
  `[{"${'n'.repeat(100)}": }]`,
  Buffer.from([0x5b, 0x22, 0xe2, 0x82, 0xac, 0xed, 0xa0, 0x80, 0x22, 0x5d]),
  Buffer.from([0x5b, 0x22, 0xf0, 0x9f, 0xa6]),
  Buffer.from([0x5b, 0xff, 0x5d]),
  `${'['.repeat(70)}${']'.repeat(70)}`
]

describe('checking a JSON text a chunk at a time', () => {
  it.each(texts.map((text) => [text.toString().slice(0, 40), text]))('finds the same fault in %j however the text is cut', (_name, text) => {
    const whole = faultOf(text, Infinity)
    for (const size of [1, 2, 3, 7]) expect(faultOf(text, size)).toBe(whole)
  })

  it('accepts what JSON.parse accepts, and refuses what it refuses', () => {
    for (const text of texts) {
      let parsed = true
      try {
        JSON.parse(text.toString())
      } catch {
        parsed = false
      }
      // JSON.parse reads bytes that are not UTF-8 as U+FFFD: the checker refuses them.
      if (Buffer.isBuffer(text) && !Buffer.from(text.toString()).equals(text)) parsed = false
      // Nesting is bounded (MAX_DEPTH) where JSON.parse has no bound.
      if (text.toString().startsWith('['.repeat(70))) parsed = false
      expect({ text: text.toString(), valid: faultOf(text, Infinity) === undefined }).toEqual({ text: text.toString(), valid: parsed })
    }
  })
})
