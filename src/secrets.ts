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

/**
 * A percent escape of an unreserved character (RFC 3986: letters, digits, `-`, `.`, `_`, `~`), every
 * character a key is made of. Decoding these is the normalization RFC 3986 (6.2.2.2) allows: the URL
 * means the same and reads better, whereas a reserved or non-ASCII escape keeps its meaning only encoded.
 */
const UNRESERVED_ESCAPE = /%(2[dDeE]|3[0-9]|[46][1-9a-fA-F]|[57][0-9aA]|5[fF]|7[eE])/g

/**
 * `url` cut to `max` characters with everything shaped like a key or a key's hash replaced by
 * `[redacted]`, as redactAndTruncate() does, after the escapes of unreserved characters are decoded:
 * a client may encode any character of a key (`%73k-or-v1-…`, `%61` for a hex `a`), and the server
 * reads the key the same. Escapes are decoded one at a time, so a malformed one (`%zz`, `%E0%A4%A`)
 * stays as it is and cannot stop the rest being searched. A decoded character comes from at most three
 * of the URL, so three times the part searched is all that is decoded.
 */
export function redactUrl (url: string, max: number): string {
  const decodedMax = 3 * (max + REACH)
  return redactAndTruncate(decodeUnreserved(url.length > decodedMax ? url.slice(0, decodedMax) : url), max)
}

function decodeUnreserved (text: string): string {
  return text.includes('%') ? text.replace(UNRESERVED_ESCAPE, (_escape, hex: string) => String.fromCharCode(parseInt(hex, 16))) : text
}

/**
 * `text` with everything shaped like a key or a key's hash replaced by `[redacted]`, escapes of
 * unreserved characters decoded first as redactUrl() does: what this cleans (an error's message and
 * stack, for the log) may quote a URL as the client wrote it.
 */
export function redactSecrets (text: string): string {
  if (text.length < SHORTEST) return text
  return decodeUnreserved(text).replace(SECRETS, REDACTED)
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
