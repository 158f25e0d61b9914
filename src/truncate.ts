/**
 * `text` cut to `max` characters, an ellipsis marking the cut: whatever a client or a data file
 * sends ends up bounded in a log line or an error message.
 */
export function truncate (text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}…`
}
