import { join } from 'node:path'
import { DataError, duplicateProblem, membersProblem, recordProblem, validateRecords, type Records } from '../records.js'
import { KINDS, type RecordKind } from '../../registry.js'
import { NotAnArray, readJsonArray } from '../json-array-file.js'
import { UniqueValues } from '../unique-values.js'
import type { Member } from '../../schemas/member.js'

/**
 * The records of a kind's file in `dir`, a batch at a time, whatever the file's size: what
 * `npm run db -- import` reads, where the server reads a file whole (files.ts, at most 8 MiB). Each is
 * checked by the same rules, and a file that breaks them is refused with the DataError the server
 * gives (file, record and field), the same one when it breaks several: a syntax error wherever it is,
 * else the first record's problem, else the first value that repeats, field by field.
 *
 * Only valid records are handed over, and none after the first problem; the file is still read to
 * its end, where a syntax error would come before that problem.
 *
 * `repeats: false` leaves repeated values to the database's unique constraints: for a second reading
 * of files checked already, which then holds no index of a million values (some 90 MB) beside the
 * rows it sends.
 */
export async function * readRecordBatches<K extends RecordKind> (dir: string, kind: K, { repeats = true } = {}): AsyncGenerator<Records<K>> {
  const { file, unique } = KINDS[kind]
  const fields = (repeats ? unique : []).map((field) => ({ field, values: new UniqueValues(), duplicate: undefined as string | undefined }))
  let problem: string | undefined
  let index = 0
  try {
    for await (const records of readJsonArray(join(dir, file), file)) {
      if (problem !== undefined) continue
      for (const record of records) {
        problem = recordProblem(kind, record, index) ??
          (KINDS[kind].index === 'organizations' ? membersProblem((record as { members: Member[] }).members, `[${index}].members`) : undefined)
        if (problem !== undefined) break
        for (const unique of fields) {
          if (unique.duplicate !== undefined) continue
          const value = (record as Record<string, string>)[unique.field]!
          const first = unique.values.add(value, index)
          if (first !== undefined) unique.duplicate = duplicateProblem(unique.field, value, index, first)
        }
        index++
      }
      if (problem === undefined && fields.every(({ duplicate }) => duplicate === undefined)) yield records as Records<K>
    }
  } catch (error) {
    if (error instanceof NotAnArray) validateRecords(kind, error.value, file)
    // The file is missing, not a file, not JSON: the data is wrong, not the reading (as files.ts says it).
    throw error instanceof DataError ? error : new DataError((error as Error).message)
  }
  problem ??= fields.find(({ duplicate }) => duplicate !== undefined)?.duplicate
  if (problem !== undefined) throw new DataError(`${file}: ${problem}`)
}
