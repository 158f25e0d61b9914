import { join } from 'node:path'
import { DataError, duplicateProblem, membersProblem, recordProblem, validateRecords, type Records } from '../records.js'
import { KINDS, type RecordKind } from '../../registry.js'
import { NotAnArray, readJsonArray } from '../json-array-file.js'
import type { Member } from '../../schemas/member.js'

/**
 * The records of a kind's file in `dir`, a batch at a time, whatever the file's size: what
 * `npm run db -- import` reads, where the server reads a file whole (files.ts, at most 8 MiB). Each is
 * checked by the same rules, and a file that breaks them is refused with the DataError the server
 * gives (file, record and field): a syntax error wherever it is, else the first record's problem.
 * Values repeated between records are left to the database's unique constraints (refuseRepeat).
 *
 * Only valid records are handed over, and none after the first problem; the file is still read to
 * its end, where a syntax error would come before that problem.
 */
export async function * readRecordBatches<K extends RecordKind> (dir: string, kind: K): AsyncGenerator<Records<K>> {
  const { file } = KINDS[kind]
  let problem: string | undefined
  let index = 0
  try {
    for await (const records of readJsonArray(join(dir, file), file)) {
      if (problem !== undefined) continue
      for (const record of records) {
        problem = recordProblem(kind, record, index) ??
          (KINDS[kind].index === 'organizations' ? membersProblem((record as { members: Member[] }).members, `[${index}].members`) : undefined)
        if (problem !== undefined) break
        index++
      }
      if (problem === undefined) yield records as Records<K>
    }
  } catch (error) {
    if (error instanceof NotAnArray) validateRecords(kind, error.value, file)
    // The file is missing, not a file, not JSON: the data is wrong, not the reading (as files.ts says it).
    throw error instanceof DataError ? error : new DataError((error as Error).message)
  }
  if (problem !== undefined) throw new DataError(`${file}: ${problem}`)
}

/**
 * Throws the DataError the server gives for a kind's file in `dir` whose value the database refused
 * as a repeat: the file's own problem if it has one (it comes first), else the first value that
 * repeats, field by field. Read again only then, a field at a time, so that an import that succeeds
 * reads each file once and keeps none of its values. Returns when the file has no repeat (changed since).
 */
export async function refuseRepeat (dir: string, kind: RecordKind) {
  const { file, unique } = KINDS[kind]
  for (const field of unique) {
    const seen = new Map<string, number>()
    let repeat: string | undefined
    let index = 0
    for await (const records of readRecordBatches(dir, kind)) {
      for (const record of records) {
        const value = (record as Record<string, unknown>)[field] as string
        const first = seen.get(value)
        if (first !== undefined) repeat ??= duplicateProblem(field, value, index, first)
        else if (repeat === undefined) seen.set(value, index)
        index++
      }
    }
    if (repeat !== undefined) throw new DataError(`${file}: ${repeat}`)
  }
}
