/**
 * How much of a path or a value a message echoes back: enough to recognise it, never a flood; a key in
 * it is not echoed (secrets.ts, redactAndTruncate), since answers end up in logs and tickets too.
 */
export const ECHO_MAX = 200

/**
 * `text` cut to `max` characters, an ellipsis marking the cut: whatever a client or a data file
 * sends ends up bounded in a log line or an error message.
 */
export function truncate (text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}…`
}
