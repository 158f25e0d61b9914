// Durations as a person types them on a command line: 30s, 15m, 12h, 90d.

const UNITS = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const

/** `30s`, `15m`, `12h`, `90d` (or `0`) in milliseconds; undefined for anything else. */
export function parseDuration (text: string): number | undefined {
  if (text === '0') return 0
  const match = /^([0-9]{1,9})([smhd])$/.exec(text)
  return match === null ? undefined : Number(match[1]) * UNITS[match[2] as keyof typeof UNITS]
}

/** Milliseconds in the largest unit that divides them: `1d`, `90m`, `45s`, or `0`. */
export function formatDuration (ms: number): string {
  if (ms === 0) return '0'
  const unit = (['d', 'h', 'm', 's'] as const).find((candidate) => ms % UNITS[candidate] === 0)
  return unit === undefined ? `${ms} ms` : `${ms / UNITS[unit]}${unit}`
}
