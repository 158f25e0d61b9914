/** Data that breaks a rule; its message is one line naming where (file or table), record and field. */
export class DataError extends Error {
  override name = 'DataError'
}
