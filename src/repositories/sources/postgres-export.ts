import type pg from 'pg'
import { memberProblem, recordProblem } from '../records.js'
import { KINDS, RECORD_KINDS, type RecordKind } from '../../registry.js'
import { quoteValue } from '../../schemas/describe-error.js'
import { timestampMs, timestampText } from '../../schemas/formats.js'
import type { Member } from '../../schemas/member.js'
import { MAX_MEMBERS } from '../member-list.js'
import { copyRows } from './copy-rows.js'
import { checkSchema, inTransaction, namingColumn } from './postgres-schema.js'
import { DOCUMENT_MAX_BYTES, KEY_SELECT, keyOfRow, MEMBER_FIELDS, MEMBER_ROWS, NAME_CHARS, ORGANIZATION_COLUMNS, overProblem, rowMessage, unread } from './postgres.js'

/** Where `npm run db -- export` puts what it reads. */
export interface ExportSink {
  /** A valid record of a kind, in its file's order. */
  write(kind: RecordKind, record: unknown): Promise<void>
  /** A row a replica refuses, as the replica's message says it: table, row and field. */
  refuse(kind: RecordKind, problem: string): void
}

/**
 * The keys by name in the order of their UTF-16 code units, as JavaScript sorts strings (the order
 * export always wrote, sorting in memory). The C collation orders by code point instead, which puts
 * U+E000 to U+FFFF before the characters past U+FFFF, where UTF-16 puts them after (their surrogates
 * are below 0xE000): each character of the one is marked with U+E001 and of the other with U+E000.
 * A name of ASCII alone is its own order.
 */
const KEY_ORDER = `CASE WHEN octet_length(name) = char_length(name) THEN name ELSE
  regexp_replace(regexp_replace(name, '([\\uE000-\\uFFFF])', chr(57345) || '\\1', 'g'), '([\\U00010000-\\U0010FFFF])', chr(57344) || '\\1', 'g')
  END COLLATE "C"`

/**
 * Reads every record as a replica reads it, at one snapshot, a row at a time, and hands each valid one
 * to `sink` in its file's order: the lists and organizations by position, the keys by name. What a
 * replica refuses, and so does not serve (a row the schemas refuse, a value past its bound, which is
 * not fetched, an organization with such a member or too many), is named instead, with the replica's
 * own message. Memory is one organization with its members, however large the tables.
 */
export async function exportDirectory (client: pg.ClientBase, sink: ExportSink) {
  // No statement timeout, whatever the role's or the database's, as for a replica's reads: a COPY
  // lasts as long as its rows take to be written out.
  const begin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL statement_timeout = 0; SET LOCAL TimeZone = 'UTC'"
  await inTransaction(client, async () => {
    await checkSchema(client)
    for (const kind of RECORD_KINDS) {
      switch (KINDS[kind].index) {
        case 'list': await exportList(client, kind, sink); break
        case 'organizations': await exportOrganizations(client, sink); break
        case 'keys': await exportKeys(client, sink); break
      }
    }
  }, begin)
}

/** A list's documents, each checked as a replica checks it (postgres.ts, readList), none past its bound fetched. */
async function exportList (client: pg.ClientBase, kind: RecordKind, sink: ExportSink) {
  const { table } = KINDS[kind]
  // A unique field is a column of its own, which names a row (its document may be left unread).
  const named = namingColumn(kind)
  const query = `SELECT id::text, ${named === undefined ? 'NULL' : `left(${named}, ${NAME_CHARS})`}, document_bytes::text,
      CASE WHEN document_bytes <= ${DOCUMENT_MAX_BYTES} THEN document::text END
    FROM ${table} ORDER BY position, id`
  let index = 0
  for await (const rows of copyRows(client, query)) {
    for (const [id, name, bytes, text] of rows) {
      const document: unknown = typeof text === 'string' ? JSON.parse(text) : null
      const problem = document === null ? unread('document', bytes!, DOCUMENT_MAX_BYTES) : recordProblem(kind, document, index)
      index++
      if (problem === undefined) {
        await sink.write(kind, document)
        continue
      }
      const row = typeof name === 'string' ? `${named!} ${quoteValue(name)}` : `id ${id}`
      sink.refuse(kind, document === null ? `table ${table}, row ${row}: ${problem}` : rowMessage(problem, table, row))
    }
  }
}

/**
 * The organizations with their members, in one pass over both tables joined in page order, each value
 * within its bound (postgres.ts, readOrganizations): an organization is written once its last member
 * is read and found valid, and refused past MAX_MEMBERS as a replica refuses it.
 */
async function exportOrganizations (client: pg.ClientBase, sink: ExportSink) {
  // The raw ids join and order the rows; only the bounded columns are sent.
  const query = `SELECT o.id, o.name, o.over, m.id, m.email, m.first_name, m.last_name, m.role, m.over
    FROM (SELECT position, id, ${ORGANIZATION_COLUMNS.select}, ${ORGANIZATION_COLUMNS.over} FROM organizations)
      AS o (position, key, id, name, over)
    LEFT JOIN (SELECT organization_id, position, id, ${MEMBER_FIELDS.select}, ${MEMBER_FIELDS.over} FROM ${MEMBER_ROWS})
      AS m (organization_id, position, key, id, email, first_name, last_name, role, over) ON m.organization_id = o.key
    ORDER BY o.position, o.key, m.position, m.key`
  let index = 0
  let current = { id: undefined as string | null | undefined, name: '', members: [] as Member[] }
  let refused = false
  const finish = async () => {
    if (current.id !== undefined && !refused) await sink.write('organizations', current)
  }
  const refuse = (problem: string) => {
    refused = true
    sink.refuse('organizations', problem)
  }
  for await (const rows of copyRows(client, query)) {
    for (const [id, name, over, memberId, email, firstName, lastName, role, memberOver] of rows) {
      if (id !== current.id) {
        await finish()
        current = { id, name: name!, members: [] }
        refused = false
        const problem = overProblem(over) ?? recordProblem('organizations', { id, name, members: [] }, index)
        index++
        if (problem !== undefined) refuse(rowMessage(problem, 'organizations', `id ${quoteValue(id)}`))
      }
      // An organization without members, or one refused already (by its own row or a member's).
      if (memberId === null || memberId === undefined || refused) continue
      const member = { id: memberId, email: email!, first_name: firstName!, last_name: lastName!, role: role as Member['role'] }
      const problem = overProblem(memberOver) ?? memberProblem(member, 0, 0)?.replace(/^\[0\]\.members\[0\]\.?/, '')
      if (problem !== undefined) {
        refuse(rowMessage(problem, 'members', `organization_id ${quoteValue(id)}, id ${quoteValue(memberId)}`))
      } else if (current.members.length === MAX_MEMBERS) {
        // As the replica's MemberListBuilder says it.
        refuse(`table members, organization_id ${quoteValue(id)}: more than ${MAX_MEMBERS} members, the most an organization may have`)
      } else {
        current.members.push(member)
      }
    }
  }
  await finish()
}

/** The keys, each checked as a replica checks it (postgres.ts, readKeys), its expiry written as a replica's key table writes it. */
async function exportKeys (client: pg.ClientBase, sink: ExportSink) {
  const query = `${KEY_SELECT} ORDER BY ${KEY_ORDER}`
  let index = 0
  for await (const rows of copyRows(client, query)) {
    for (const row of rows) {
      const { key, over } = keyOfRow(row)
      const problem = overProblem(over) ?? recordProblem('keys', key, index)
      index++
      if (problem !== undefined) {
        sink.refuse('keys', rowMessage(problem, 'keys', `name ${quoteValue(key.name)}`))
        continue
      }
      // To the millisecond, `.000` left out, as the key table a replica reads keys into gives it.
      if (key.expires_at != null) key.expires_at = timestampText(timestampMs(key.expires_at))
      if (key.previous != null) key.previous.expires_at = timestampText(timestampMs(key.previous.expires_at))
      await sink.write('keys', key)
    }
  }
}
