/**
 * `compute`, remembered for each argument: for a result that depends on a string only and costs more
 * than a Map lookup (a regular expression, a header parsed). At most `max` are kept: past that the
 * memory starts again empty, so that arguments chosen by clients cannot grow it without end.
 */
export function memoize<T> (compute: (argument: string) => T, max: number): (argument: string) => T {
  const results = new Map<string, T>()
  return (argument) => {
    let result = results.get(argument)
    if (result === undefined) {
      result = compute(argument)
      if (results.size >= max) results.clear()
      results.set(argument, result)
    }
    return result
  }
}
