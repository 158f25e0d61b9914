import { truncate } from './truncate.js'

/**
 * What a secret looks like in text that a client or a data file wrote: an API key (`sk-or-v1-` and 64
 * hex digits as `npm run key` mints them, or another vendor's `sk-…`), or a long run of hex digits (a
 * key's SHA-256, a key without its prefix), in either case. A run counts from 48 digits: longer than
 * the ids that travel in URLs and request ids (a UUID or a trace id is 32 digits, a SHA-1 40), and
 * short enough that a hash cut by a truncation or a lost digit is still caught. The lookbehinds keep
 * it linear: a run is tried from its start only, and `sk-` not inside a word (`task-…`).
 */
const KEY = /(?<![A-Za-z])sk-[A-Za-z0-9_-]{16,}/
const HASH = /(?<![0-9A-Fa-f])[0-9A-Fa-f]{48,}/
const SECRETS = new RegExp(`${KEY.source}|${HASH.source}`, 'g')
/** The shortest text SECRETS matches (`sk-` and 16 characters): shorter ones are not searched. */
const SHORTEST = 19
/** How far past a cut a secret is looked for: a run of hex digits the cut goes through is still found. */
const REACH = 48
/** What stands for a secret, as pino's censor writes the Authorization header. */
const REDACTED = '[redacted]'

/**
 * Whether `text` holds something shaped like a key or a key's hash. The two shapes are looked for
 * apart, `sk-` first as a plain substring: the alternation of SECRETS costs several times more on a
 * URL that holds neither, and the access line of every request asks.
 */
export function containsSecret (text: string): boolean {
  return text.length >= SHORTEST && ((text.includes('sk-') && KEY.test(text)) || HASH.test(text))
}

/** `text` with everything shaped like a key or a key's hash replaced by `[redacted]`. */
export function redactSecrets (text: string): string {
  return text.length < SHORTEST ? text : text.replace(SECRETS, REDACTED)
}

/**
 * `text` cut to `max` characters as truncate() cuts it, with everything shaped like a key or a key's
 * hash that starts before the cut replaced by `[redacted]`, one the cut goes through included (cutting
 * first would keep its start; redacting first would let what follows a redaction move in before the
 * cut). Only the first `max` characters, and REACH past them, are searched: a URL of 16 KiB costs what
 * one of `max` characters does.
 */
export function redactAndTruncate (text: string, max: number): string {
  const searched = text.length > max + REACH ? text.slice(0, max + REACH) : text
  if (!containsSecret(searched)) return truncate(text, max)
  let kept = ''
  let from = 0
  for (const match of searched.matchAll(SECRETS)) {
    if (match.index >= max) break
    kept += searched.slice(from, match.index) + REDACTED
    from = match.index + match[0].length
  }
  if (from < max) kept += searched.slice(from, max)
  return text.length > max ? `${kept}…` : kept
}
