/**
 * What a secret looks like in text that a client or a data file wrote: an API key (`sk-or-v1-` and 64
 * hex digits as `npm run key` mints them, or another vendor's `sk-…`), or a long run of hex digits (a
 * key's SHA-256, a key without its prefix), in either case. A run counts from 48 digits: longer than
 * the ids that travel in URLs and request ids (a UUID or a trace id is 32 digits, a SHA-1 40), and
 * short enough that a hash cut by a truncation or a lost digit is still caught. The lookbehinds keep
 * it linear: a run is tried from its start only, and `sk-` not inside a word (`task-…`).
 */
const SECRET = '(?<![A-Za-z])sk-[A-Za-z0-9_-]{16,}|(?<![0-9A-Fa-f])[0-9A-Fa-f]{48,}'
const SECRETS = new RegExp(SECRET, 'g')
const ANY_SECRET = new RegExp(SECRET)

/** Whether `text` holds something shaped like a key or a key's hash. */
export function containsSecret (text: string): boolean {
  return ANY_SECRET.test(text)
}

/** `text` with everything shaped like a key or a key's hash replaced by `[redacted]` (as pino's censor writes). */
export function redactSecrets (text: string): string {
  return text.replace(SECRETS, '[redacted]')
}
