import { randomUUID } from 'node:crypto'
import net from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import type { TObject, TSchema } from '@sinclair/typebox'
import { DataError, assertUnique, maxBytes, memberProblem, recordProblem, type Organization } from '../records.js'
import { KINDS, RECORD_KINDS, type RecordKind } from '../../registry.js'
import { createSlicer } from '../slices.js'
import { MemberList, MemberListBuilder } from '../member-list.js'
import { KeyTableBuilder, type KeyOptions } from '../key-table.js'
import { quoteValue } from '../../schemas/describe-error.js'
import { backoff, type Batch, type Change, type FollowMode, type ReadRequest, type Refusal, type Source, type SourceEvents, type SourceMeasures } from '../source.js'
import { ApiKeySchema, OrganizationSchema, type ApiKey } from '../../schemas/keys-and-organizations.js'
import { MemberSchema, type Member } from '../../schemas/member.js'
import { MAX_FILE_BYTES } from '../json-file.js'
import { CHANNEL, checkSchema, namingColumn } from './postgres-schema.js'
import { copyFields, copyRows, fieldText, textRow, type FieldRows, type TextRow } from './copy-rows.js'

/**
 * The listening connection is asked for a round trip this often, and given as long to answer: a
 * connection the network froze without closing it (a NAT or load balancer that dropped the flow) is
 * found within twice this, then every connection is dropped, and the replica reconnects and reads
 * what it missed.
 */
const CHECK_EVERY_MS = 5000

/** TCP keep-alive probes start after this long idle: the kernel's own bound on a dead peer. */
const KEEP_ALIVE_DELAY_MS = 10_000

/**
 * How long a notification sent to itself may take to come back on the listening connection: past
 * it, notifications do not reach this replica (a transaction pooler hands LISTEN to a server
 * connection the replica does not keep), and it polls the change log instead.
 */
const PROBE_MS = 1000

/** Where notifications arrive, the log is read this often all the same. */
const SAFETY_POLL_MS = 60_000

/** How many records of a kind the changes read by name at most; more, and the kind is read whole. */
const NAMED_MAX = 10_000

/** How the replica's connections show in pg_stat_activity: the listening one, the reads', the commands'. */
const APPLICATION_NAME = 'model-gateway-directory'

// bigint columns (context lengths, token counts, positions) as numbers, as the files have them.
const types = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === pg.types.builtins.INT8 ? Number : pg.types.getTypeParser(oid, format)) as typeof pg.types.getTypeParser
}

/** The database's URL without its password, for the logs. */
export function locationOf (url: string) {
  try {
    const parsed = new URL(url)
    if (parsed.password) parsed.password = ''
    // pg takes a password from the query too.
    for (const name of ['password', 'sslpassword']) parsed.searchParams.delete(name)
    return parsed.toString()
  } catch {
    return '(DATABASE_URL)'
  }
}

function describe (error: unknown): string {
  const err = error as Error & { code?: string, errors?: Error[] }
  // A refused connection to a name with several addresses is an AggregateError without a message.
  return err.message || err.errors?.[0]?.message || err.code || String(error)
}

// Worth retrying: anything short of an answer from the server (refused, reset, timed out, a
// proxy that hangs up), and the server's own "not now" (starting, shutting down, too many
// connections). A wrong password or database name will not fix itself.
function isTransient (error: unknown) {
  const { severity, code = '' } = error as { severity?: string, code?: string }
  return severity === undefined || code.startsWith('08') || code.startsWith('53') || code.startsWith('57P')
}

/**
 * A client whose socket is at hand (pg's public `stream` option): a connection the network froze is
 * destroyed at once, where ending it would wait for an answer that never comes.
 */
class SocketClient extends pg.Client {
  readonly socket: net.Socket
  /** What ended the connection, when the server said (a FATAL): the query after it only says the client is not queryable. */
  lastError: unknown

  constructor (config: pg.ClientConfig = {}) {
    const socket = new net.Socket()
    super({ ...config, stream: () => socket })
    this.socket = socket
    // Armed by reads only (setTimeout): an idle connection is silent by right. The timer also fires as
    // the process resumes from a pause of its own (its CPU share spent, a stop), before the loop's poll
    // phase has read what PostgreSQL sent meanwhile: the connection is dropped only if that turn of the
    // loop reads nothing either.
    socket.on('timeout', () => {
      const read = socket.bytesRead
      setImmediate(() => {
        if (socket.bytesRead === read) socket.destroy(new Error(`no answer from PostgreSQL within ${socket.timeout} ms`))
      })
    })
    // A connection ended by the server as it opens (pg_terminate_backend, a restart) can say so in the
    // packet that completes it: pg emits 'error' before whoever connected it has listened, and an
    // 'error' nobody hears ends the process (seen once in the suite at load 4). Whoever holds the
    // client listens too; here the loss is left to the next query, which fails.
    this.on('error', (error) => { this.lastError = error })
  }
}

interface ConnectOptions {
  /** How the connection shows in pg_stat_activity. */
  applicationName?: string
  /** Told of each failed try that is retried, in one line: a wait of up to `timeoutMs` is not a silent one. */
  onRetry?: (line: string) => void
}

/**
 * A connected client, retried while the server cannot be reached, for `timeoutMs` at most;
 * then an error naming the database (without its password) and the last cause.
 */
export async function connectPostgres (url: string, timeoutMs: number, { applicationName = APPLICATION_NAME, onRetry }: ConnectOptions = {}): Promise<SocketClient> {
  const deadline = Date.now() + timeoutMs
  for (let attempt = 0; ; attempt++) {
    // One attempt takes a second at least, even when less time is left: a shorter one would fail
    // against a server that is merely far away.
    const client = new SocketClient({
      connectionString: url,
      types,
      keepAlive: true,
      keepAliveInitialDelayMillis: KEEP_ALIVE_DELAY_MS,
      connectionTimeoutMillis: Math.min(Math.max(deadline - Date.now(), 1000), 10000),
      application_name: applicationName
    })
    try {
      await client.connect()
      return client
    } catch (error) {
      await client.end().catch(() => {})
      const left = deadline - Date.now()
      if (!isTransient(error) || left <= 0) {
        throw new Error(`cannot connect to PostgreSQL at ${locationOf(url)}${isTransient(error) ? ` within ${timeoutMs} ms` : ''}: ${describe(error)}`)
      }
      const wait = Math.min(backoff(attempt), left)
      onRetry?.(`cannot connect to PostgreSQL at ${locationOf(url)} (try ${attempt + 1}: ${describe(error)}); trying again in ${Math.round(wait)} ms, for ${Math.max(0, Math.round(left - wait))} ms more (DATABASE_CONNECT_TIMEOUT_MS)`)
      await sleep(wait)
    }
  }
}

/**
 * A read a hot standby cancelled to replay its primary's changes (VACUUM removed rows the read could
 * still see, after max_standby_streaming_delay): said with what to set, since every whole read longer
 * than that delay will be cancelled again while the primary churns.
 */
function explainConflict (error: unknown, client?: { lastError?: unknown }) {
  const isConflict = (candidate: unknown) => {
    const { code, message } = (candidate ?? {}) as { code?: string, message?: string }
    return code === '40001' && message?.includes('conflict with recovery') === true
  }
  // A standby may end the session rather than cancel the statement (FATAL: terminating connection due
  // to conflict with recovery): the read then fails as a client no longer queryable, and the cause is
  // what the server said last.
  const cause = isConflict(error) ? error : isConflict(client?.lastError) ? client!.lastError : undefined
  if (cause === undefined) return error
  const { message } = cause as { message: string }
  return new Error(`${message}: the hot standby cancelled the read to replay its primary's changes; set hot_standby_feedback = on on the standby (or raise its max_standby_streaming_delay past the longest whole read), see docs/postgresql.md#hot-standbys`)
}

/** A bad row's message: `table t, row key "x": field: problem`, from recordProblem's `[3].field: problem`. */
export function rowMessage (problem: string, table: string, row: string): string {
  let rest = problem.replace(/^\[\d+\]\.?/, '')
  // A key hash is a secret, whatever it holds: never echoed.
  if (table === 'keys' && rest.startsWith('sha256:')) rest = 'sha256: is not a lowercase hex SHA-256'
  return `table ${table}, row ${row}: ${rest}`
}

/** Where a read puts the records it refuses one by one, by key: none of them is served. */
type Refusals = Map<string, string>

/**
 * Text columns of a table read with their bounds (maxBytes of their fields): a value past its bound
 * stays in the database, and its record is refused. octet_length is the length PostgreSQL keeps with
 * a value, read without the value, however large: a value of 50 MB held every whole read of its
 * table past the statement timeout of the time, and one of 600 MB made a string no replica could hold. The column
 * that names a row (`naming`) gives the start of such a value instead, to name it by: longer than the
 * bound too, it is no valid name, and is never taken for one served.
 */
function boundedColumns (schema: TSchema, columns: readonly string[], naming: string) {
  const bounds = columns.map((column) => [column, boundOf(schema, column)] as const)
  return {
    /** The columns, each null past its bound (the naming one, its start). */
    select: bounds.map(([column, bytes]) =>
      `CASE WHEN octet_length(${column}) <= ${bytes} THEN ${column}${column === naming ? ` ELSE left(${column}, ${bytes + 1})` : ''} END`).join(', '),
    /** The first value past its bound, as `field bytes limit`; null when none is. */
    over: `coalesce(${bounds.map(([column, bytes]) =>
      `CASE WHEN octet_length(${column}) > ${bytes} THEN '${column} ' || octet_length(${column}) || ' ${bytes}' END`).join(', ')})`
  }
}

/** The most bytes a valid value of a field of a record takes (maxBytes): every field a read takes has a bound. */
function boundOf (schema: TSchema, field: string): number {
  const bytes = maxBytes((schema as TObject).properties[field]!)
  if (bytes === undefined) throw new Error(`${field}: its schema sets no limit to bound its reads by`)
  return bytes
}

/** What is wrong with a value left unread: `field: 50000000 bytes, over the limit of 768 (not read)`. */
export function unread (field: string, bytes: number | string, limit: number | string) {
  return `${field}: ${bytes} bytes, over the limit of ${limit} (not read)`
}

/** A bounded read's `over` column as a problem, or undefined when every value was read. */
export const overProblem = (over: string | null | undefined) => {
  if (over === null || over === undefined) return undefined
  const [field = '', bytes = '', limit = ''] = over.split(' ')
  return unread(field, bytes, limit)
}

/**
 * The largest document a list's row is read with: the largest data file (json-file.ts), the most
 * one record of a file can take. Its size is the row's generated column document_bytes (schema 7),
 * written with the document: json has no length PostgreSQL keeps apart from its text.
 */
export const DOCUMENT_MAX_BYTES = MAX_FILE_BYTES

/** As many characters of a list's key a read takes to name a row whose document it leaves unread: more than a message quotes. */
export const NAME_CHARS = 200

/**
 * A kind served as a whole list: every document of its table, in list order, validated with the
 * kind's compiled schema, as a file's records are. A bad one is refused alone, named by its row: the
 * list is served without it.
 */
async function readList (client: pg.ClientBase, kind: RecordKind): Promise<Change> {
  const { table } = KINDS[kind]
  // A unique field is a column of its own, which names a row whose document is left unread.
  const named = namingColumn(kind)
  const { rows } = await client.query<{ id: number | string, name: string | null, bytes: number, document: unknown }>(`SELECT id,
      ${named === undefined ? 'NULL' : `left(${named}, ${NAME_CHARS})`} AS name, document_bytes AS bytes,
      CASE WHEN document_bytes <= ${DOCUMENT_MAX_BYTES} THEN document END AS document
    FROM ${table} ORDER BY position, id`)
  const slicer = createSlicer()
  const records: unknown[] = []
  const refused: Refusals = new Map()
  for (const [index, { id, name, bytes, document }] of rows.entries()) {
    const row = name === null ? `id ${id}` : `${named} ${quoteValue(name)}`
    const problem = document === null ? unread('document', bytes, DOCUMENT_MAX_BYTES) : recordProblem(kind, document, index)
    if (problem === undefined) records.push(document)
    else refused.set(row, document === null ? `table ${table}, row ${row}: ${problem}` : rowMessage(problem, table, row))
    if (slicer.due()) await slicer.pause()
  }
  try {
    assertUnique(kind, records as never, table)
  } catch (error) {
    throw new DataError(`table ${(error as Error).message}`)
  }
  return { kind, whole: records, rowsRead: rows.length, refused } as Change
}

/**
 * `ARRAY['a','b']::text[]`, each value quoted by the driver: a read of the records a change names
 * streams by COPY as a whole read does, and COPY takes no parameters. (An organization of 100,000
 * members read through a query would arrive as one array of rows.)
 */
function textArray (client: pg.ClientBase, values: readonly string[]): string {
  return `ARRAY[${values.map((value) => client.escapeLiteral(value)).join(',')}]::text[]`
}

/** The key columns a read takes, bounded; a key's expiry is a timestamptz, of a size of its own. */
const KEY_COLUMNS = boundedColumns(ApiKeySchema, ['name', 'sha256', 'kind', 'organization_id'], 'name')

/**
 * What a read of table keys selects, for keyOfRow: the bounded columns, the instants as RFC 3339 text
 * in UTC (the transaction's TimeZone), a previous hash cut past the 64 digits a valid one has, and
 * the first value past its bound. Every column as text: COPY's binary form is read as text alone.
 */
export const KEY_SELECT = `SELECT ${KEY_COLUMNS.select}, to_json(expires_at) #>> '{}', disabled::text, rate_limit_per_minute::text,
  left(previous_sha256, 65), to_json(previous_expires_at) #>> '{}', ${KEY_COLUMNS.over} FROM keys`

/** An instant as PostgreSQL's to_json gives it in UTC, `+00:00` written `Z` as the files and the key table write it. */
const utc = (text: string) => text.replace(/\+00:00$/, 'Z')

/** A row of KEY_SELECT as the key record a file holds, with only the fields it has; `over` names a value left unread. */
export function keyOfRow (row: ReadonlyArray<string | null | undefined>) {
  const [name, sha256, kind, organization, expiresAt, disabled, limit, previousSha, previousEnd, over] = row
  const key: ApiKey = { name: name!, sha256: sha256!, kind: kind as ApiKey['kind'], organization_id: organization! }
  return { key: withOptions(key, expiresAt, disabled, limit, previousSha, previousEnd), over }
}

/** `key` given the fields a row of KEY_SELECT has of a key's options (its columns 4 to 8, as texts). */
function withOptions<T extends KeyOptions> (key: T, expiresAt: string | null | undefined, disabled: string | null | undefined,
  limit: string | null | undefined, previousSha: string | null | undefined, previousEnd: string | null | undefined): T {
  if (expiresAt != null) key.expires_at = utc(expiresAt)
  if (disabled === 'true') key.disabled = true
  // NULL, written where NOT NULL was dropped: refused by the key's schema, as "disabled": null in a file.
  else if (disabled === null) (key as { disabled?: unknown }).disabled = null
  if (limit != null) key.rate_limit_per_minute = Number(limit)
  // Either without the other is refused by the key's schema (keys_previous_check refuses it first).
  if (previousSha != null || previousEnd != null) key.previous = { sha256: previousSha ?? '', expires_at: previousEnd == null ? '' : utc(previousEnd) }
  return key
}

/** Where KEY_SELECT's columns are in a row of FieldRows: a field's (start, length) pair is at 2 × its column. */
const KEY_OPTIONS_COLUMN = 4
const KEY_OVER_COLUMN = 9

/**
 * Row `row`'s options (KEY_SELECT's columns 4 to 8), undefined when it has none: most keys have none,
 * and are read without a string. `false` is the only text of five bytes a boolean has; a NULL is
 * read as text, and refused.
 */
function keyOptionsOf (batch: FieldRows, row: number): KeyOptions | undefined {
  const { fields, columns } = batch
  const at = 2 * (row * columns + KEY_OPTIONS_COLUMN)
  const disabled = fields[at + 3]!
  if (fields[at + 1] === -1 && disabled === 5 && fields[at + 5] === -1 && fields[at + 7] === -1 && fields[at + 9] === -1) return undefined
  const text = (column: number) => fieldText(batch, row, KEY_OPTIONS_COLUMN + column)
  return withOptions({}, text(0), text(1), text(2), text(3), text(4))
}

/**
 * Keys, all or those of these names, validated; a bad row is refused alone. Every key is built
 * into a KeyTable as it is read (key-table.ts): never a million objects at once.
 */
async function readKeys (client: pg.ClientBase, names: readonly string[] | 'all'): Promise<Change<'keys'>> {
  const refused: Refusals = new Map()
  let index = 0
  /** A row's key as its record, or undefined when it is refused (put in `refused`, with what is wrong). */
  const checked = (row: TextRow) => {
    const { key, over } = keyOfRow(row)
    const problem = overProblem(over) ?? recordProblem('keys', key, index)
    if (problem === undefined) return key
    refused.set(key.name, rowMessage(problem, 'keys', `name ${quoteValue(key.name)}`))
  }
  if (names === 'all') {
    // Sized once for the rows PostgreSQL expects, instead of growing from nothing.
    const table = new KeyTableBuilder('table keys', await estimatedKeys(client))
    // In no order: a key table has none, and reading the table in its own order spares an index scan.
    for await (const batch of copyFields(client, KEY_SELECT)) {
      await table.makeRoom(batch.count)
      const { bytes, fields, columns } = batch
      for (let row = 0; row < batch.count; row++, index++) {
        // Taken from COPY's bytes where it can (no value left unread, every field one it reads without
        // text); else as the texts of the row, checked as a file's record is, so that a bad row is named.
        const at = 2 * row * columns
        if (fields[at + 2 * KEY_OVER_COLUMN + 1] === -1 && table.addBytes(bytes, fields, at, keyOptionsOf(batch, row))) continue
        const key = checked(textRow(batch, row))
        if (key !== undefined) table.add(key)
      }
    }
    return { kind: 'keys', whole: await table.finish(), rowsRead: index, refused }
  }
  const found: ApiKey[] = []
  for await (const rows of copyRows(client, `${KEY_SELECT} WHERE name = ANY(${textArray(client, names)})`)) {
    for (const row of rows) {
      const key = checked(row)
      index++
      if (key !== undefined) found.push(key)
    }
  }
  const present = new Set(found.map((key) => key.name))
  return { kind: 'keys', upsert: found, remove: (names as readonly string[]).filter((name) => !present.has(name) && !refused.has(name)), rowsRead: index, refused }
}

/** The most keys a whole read sizes its table for before reading them: 4 times the gateway's million. */
const ESTIMATE_TRUSTED = 4_000_000

/**
 * The rows of table keys as PostgreSQL last estimated them (ANALYZE, autovacuum), with an eighth more,
 * or undefined when it never did (-1) or when the estimate is past what is trusted with the memory it
 * would take at once. An estimate falls short of the rows (ANALYZE counts a sample; autovacuum
 * analyzes again only once a tenth of the rows changed): the eighth spares the columns' doubling and
 * copy then, and costs little memory where it goes unused (pages never written).
 */
async function estimatedKeys (client: pg.ClientBase): Promise<number | undefined> {
  const { rows: [row] } = await client.query<{ rows: string }>("SELECT reltuples::bigint AS rows FROM pg_class WHERE oid = 'keys'::regclass")
  const estimate = Number(row?.rows)
  return estimate > 0 && estimate <= ESTIMATE_TRUSTED ? Math.ceil(estimate * 1.125) : undefined
}

/** An organization's columns and a member's, bounded; a member's organization id is bounded by the rows read. */
export const ORGANIZATION_COLUMNS = boundedColumns(OrganizationSchema, ['id', 'name'], 'id')
export const MEMBER_FIELDS = boundedColumns(MemberSchema, ['id', 'email', 'first_name', 'last_name', 'role'], 'id')
/** A member row, in array mode: organization_id, id, email, first_name, last_name, role, and what was left unread. */
const MEMBER_COLUMNS = `organization_id, ${MEMBER_FIELDS.select}, ${MEMBER_FIELDS.over}`
/** Where MEMBER_COLUMNS' `over` is in a row of FieldRows (its pair at 2 × the column). */
const MEMBER_OVER_COLUMN = 6
/**
 * The members of organizations whose ids are within their bound: one past it is refused on its own
 * row, and its members are never read.
 */
export const MEMBER_ROWS = `members WHERE octet_length(organization_id) <= ${boundOf(OrganizationSchema, 'id')}`
const PAGE_ORDER = 'ORDER BY organization_id, position, id'

/**
 * Organizations and their members, all or those of these ids, validated; an organization with a bad
 * row (its own or a member's) is refused alone. Members are read in page order a batch at a time,
 * and each organization's are compacted into its MemberList (member-list.ts) as soon as they are
 * all read: a million members are never all rows or objects at once.
 */
async function readOrganizations (client: pg.ClientBase, ids: readonly string[] | 'all'): Promise<Change<'organizations'>> {
  const refused: Refusals = new Map()
  /** The organizations read, by id, in their order; each given its members once they are read. */
  const records = new Map<string, { id: string, name: string, members: MemberList }>()
  const named = ids === 'all' ? undefined : textArray(client, ids)
  const only = (column: string) => named === undefined ? '' : `WHERE ${column} = ANY(${named})`
  let rows = 0
  for await (const batch of copyRows(client, `SELECT ${ORGANIZATION_COLUMNS.select}, ${ORGANIZATION_COLUMNS.over} FROM organizations ${only('id')} ORDER BY position, id`)) {
    for (const [id, name, over] of batch as Array<[string, string, string | null]>) {
      const problem = overProblem(over) ?? recordProblem('organizations', { id, name, members: [] }, rows)
      rows++
      if (problem === undefined) records.set(id, { id, name, members: EMPTY })
      else refused.set(id, rowMessage(problem, 'organizations', `id ${quoteValue(id)}`))
    }
  }
  // Each organization's members are written into its list as they are read, in page order; none
  // for an organization refused (undefined).
  let list: MemberListBuilder | undefined
  let of: string | undefined
  const finish = () => {
    // Ids are unique within their organization by the primary key (organization_id, id).
    const record = of === undefined || list === undefined ? undefined : records.get(of)
    if (record !== undefined) record.members = list!.finish()
    list = undefined
  }
  const slicer = createSlicer()
  // The organization's id as bytes too: rows come in page order, and a row of the same organization
  // as the last is known by comparing bytes, its id made a string once per organization.
  let ofBytes = Buffer.alloc(0)
  for await (const batch of copyFields(client, `SELECT ${MEMBER_COLUMNS} FROM ${MEMBER_ROWS} ${named === undefined ? '' : `AND organization_id = ANY(${named})`} ${PAGE_ORDER}`)) {
    rows += batch.count
    const { bytes, fields, columns } = batch
    for (let row = 0; row < batch.count; row++) {
      const at = 2 * row * columns
      if (of === undefined || !bytesAre(bytes, fields[at]!, fields[at + 1]!, ofBytes)) {
        finish()
        of = fieldText(batch, row, 0)!
        ofBytes = Buffer.from(of)
        list = refused.has(of) ? undefined : new MemberListBuilder(`table members, organization_id ${quoteValue(of)}`)
      }
      const organization = of
      if (list === undefined) continue
      // Written into the list from COPY's bytes where it can (no value left unread, every field one it
      // takes without text); else as texts, checked as a file's member is, so that a bad row is named.
      if (fields[at + 2 * MEMBER_OVER_COLUMN + 1] !== -1 || !list.addBytes(bytes, fields, at + 2)) {
        const [, id, email, firstName, lastName, role, over] = textRow(batch, row)
        const member = { id: id!, email: email!, first_name: firstName!, last_name: lastName!, role: role as Member['role'] }
        const problem = overProblem(over) ?? memberProblem(member, 0, 0)?.replace(/^\[0\]\.members\[0\]\.?/, '')
        if (problem !== undefined) {
          refused.set(organization, rowMessage(problem, 'members', `organization_id ${quoteValue(organization)}, id ${quoteValue(member.id)}`))
          list = undefined
        } else {
          try {
            list.add(member)
          } catch (error) {
            // Past the most members an organization may have: refused alone, and its other rows skipped.
            if (!(error instanceof DataError)) throw error
            refused.set(organization, error.message)
            list = undefined
          }
        }
      }
      // A batch is a chunk of a COPY, however many organizations it holds.
      if (slicer.due()) await slicer.pause()
    }
  }
  finish()
  const organizations: Organization[] = []
  for (const record of records.values()) {
    if (!refused.has(record.id)) organizations.push(record)
    if (slicer.due()) await slicer.pause()
  }
  if (ids === 'all') return { kind: 'organizations', whole: organizations, rowsRead: rows, refused }
  return { kind: 'organizations', upsert: organizations, remove: ids.filter((id) => !records.has(id) && !refused.has(id)), rowsRead: rows, refused }
}

const EMPTY = MemberList.of([])

/** Whether bytes[start, start + length) are `expected`: compared here, for a few bytes, rather than by a call into Buffer's native code. */
function bytesAre (bytes: Buffer, start: number, length: number, expected: Buffer): boolean {
  if (length !== expected.length) return false
  for (let i = 0; i < length; i++) if (bytes[start + i] !== expected[i]) return false
  return true
}

/** The longest name of a record, by the bounds of the kinds' keys, that the change log's entries are read with. */
const NAME_MAX_BYTES = Math.max(...RECORD_KINDS.filter((kind) => KINDS[kind].index !== 'list').map((kind) => boundOf(KINDS[kind].schema, KINDS[kind].key!)))

/** The kind whose records a table's change-log entries name: a member's change is its organization's. */
const KIND_OF_TABLE = new Map<string, RecordKind>([...RECORD_KINDS.map((kind) => [KINDS[kind].table, kind] as const), ['members', 'organizations']])

/**
 * Which history the database is, in one value: the cluster (its system identifier: a restore or a new
 * cluster has another), its timeline (a promotion makes a new one, and a standby promoted may lack the
 * last transactions its primary committed), the database and its change log (a restore into the same
 * cluster makes new ones). A physical standby shares its primary's cluster; during recovery its timeline
 * is its last restartpoint's (pg_walfile_name is refused then). Readable by any role.
 */
const HISTORY = `(SELECT system_identifier FROM pg_control_system())::text || '.' ||
  CASE WHEN pg_is_in_recovery() THEN (SELECT timeline_id FROM pg_control_checkpoint())
    ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END || '.' ||
  (SELECT oid FROM pg_database WHERE datname = current_database()) || '.' || 'directory_changes'::regclass::oid`

/**
 * On a hot standby, the transactions at or past the snapshot's xmin whose entries it sees: a standby's
 * snapshot keeps the transactions in progress out of its list (pg_current_snapshot() shows none), so
 * the cut is made by what was read. Past SEEN_MAX (a transaction held open, which pins the xmin, while
 * thousands commit), `*`: the next read is a whole one, and the list is not carried.
 */
const SEEN_MAX = 10_000
const SEEN = `CASE WHEN pg_is_in_recovery() THEN (SELECT CASE WHEN count(*) > ${SEEN_MAX} THEN '*' ELSE coalesce(string_agg(txid::text, ',' ORDER BY txid), '') END
  FROM (SELECT DISTINCT txid FROM directory_changes WHERE txid >= pg_snapshot_xmin(pg_current_snapshot()) AND txid < pg_snapshot_xmax(pg_current_snapshot())) AS seen) END`

/**
 * How far what a standby serves is behind its primary, in ms: none while it has replayed all it
 * received from a primary it streams from; else since the last transaction it replayed was committed
 * (paused, lagging, or cut off from its primary), null when it never replayed one. 0 on a primary.
 */
const REPLAY_LAG = `CASE WHEN NOT pg_is_in_recovery() THEN 0
  WHEN EXISTS (SELECT 1 FROM pg_stat_wal_receiver) AND pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn() THEN 0
  ELSE extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()) * 1000 END`

/** What every read asks first, in its transaction: where it reads, and what it measures of the database. */
const STATE = `${HISTORY} AS history, pg_current_snapshot()::text AS snapshot, ${SEEN} AS seen,
  ${REPLAY_LAG} AS lag_ms, extract(epoch FROM clock_timestamp()) * 1000 AS clock_ms`

/**
 * A position: the history, the snapshot (`xmin:xmax:xip`), and on a standby the transactions it saw
 * past the xmin (SEEN), `|` between them. The cut (PgQ's) reads the entries of the transactions the
 * position did not see and the read's snapshot does: on a primary those at or past the snapshot's xmax
 * or in its list in progress; on a standby those at or past its xmin it did not see.
 */
interface Position {
  history: string
  snapshot: string
  xmin: number
  xmax: number
  inProgress: string[]
  /** On a standby: the transactions seen past the xmin, or `*` when past SEEN_MAX. */
  seen?: string[] | '*'
}

function parsePosition (position: string): Position {
  const [history = '', snapshot = '', seen] = position.split('|')
  const [xmin = '', xmax = '', xip = ''] = snapshot.split(':')
  return { history, snapshot, xmin: Number(xmin), xmax: Number(xmax), inProgress: xip === '' ? [] : xip.split(','), seen: seen === undefined ? undefined : seen === '*' ? '*' : seen === '' ? [] : seen.split(',') }
}

/** The position in the words of the logs: its horizon and a count, never its lists, which grow with a transaction held open. */
function labelOf ({ history, xmin, xmax, inProgress, seen }: Position) {
  const count = seen === undefined ? `${inProgress.length} in progress` : seen === '*' ? `over ${SEEN_MAX} seen past the xmin` : `${seen.length} seen past the xmin`
  return `${xmin}:${xmax} (${count}) of history ${history}`
}

/** The entries the position `since` did not read, with parameters $n and $n+1 from cutOf; visible to the read's snapshot. */
function unreadSql (since: Position, n: number) {
  const [bound, list] = [`$${n}::xid8`, `$${n + 1}::xid8[]`]
  const cut = since.seen === undefined ? `(txid >= ${bound} OR txid = ANY(${list}))` : `(txid >= ${bound} AND NOT txid = ANY(${list}))`
  // An entry whose id the snapshot does not see (a restored row of another cluster's) waits until it does.
  return `${cut} AND pg_visible_in_snapshot(txid, pg_current_snapshot())`
}

/** unreadSql's parameters: on a primary, the xmax and the transactions in progress; on a standby, the xmin and those seen. */
const cutOf = (since: Position) => since.seen === undefined || since.seen === '*'
  ? [String(since.xmax), since.inProgress]
  : [String(since.xmin), since.seen]

/** What the state query answers. */
interface State {
  history: string
  snapshot: string
  seen: string | null
  lag_ms: number | null
  clock_ms: number
}

/** What the entries past a position say of one table, grouped by the database. */
interface Pending {
  table_name: string
  entries: string
  /** Null when an entry named no records (a list, a TRUNCATE, a bulk statement) or too many to read by name. */
  names: string[] | null
  age: number
}

/**
 * The directory in a PostgreSQL database (the schema of postgres-schema.ts). A replica lists every
 * table in one REPEATABLE READ transaction and keeps its snapshot as its position; from there it
 * reads the change log's entries of the transactions that position did not see, and the records
 * they name, in one transaction again: each batch is a state the database had. A NOTIFY on the
 * channel only wakes it (its payload is not read); where notifications cannot arrive (a hot standby,
 * a transaction pooler), it polls the log every `pollIntervalMs`. A lost connection costs what was
 * missed: the next read starts from the position. It holds two connections at most: the listening
 * one, where notifications arrive, and one for reads; no session state outside a transaction.
 */
export interface PostgresSourceOptions {
  url: string
  /** How long an unreachable database is retried at start (DATABASE_CONNECT_TIMEOUT_MS). */
  connectTimeoutMs: number
  /** How often the change log is read where notifications cannot arrive (POLL_INTERVAL_MS). */
  pollIntervalMs?: number
  /**
   * How long a read's connection may stay silent before it is dropped and the read tried again
   * (DATABASE_READ_STALL_MS): a read is watched for progress, not given a deadline (a slow replica
   * reads a whole table for as long as it needs, while PostgreSQL keeps sending).
   */
  readStallMs?: number
  /** How often the listening connection is checked, and how long a check may take (CHECK_EVERY_MS). */
  checkEveryMs?: number
  onRetry?: ConnectOptions['onRetry']
}

export function createPostgresSource ({ url, connectTimeoutMs, pollIntervalMs = 1000, readStallMs = 30_000, checkEveryMs = CHECK_EVERY_MS, onRetry }: PostgresSourceOptions): Source {
  const location = locationOf(url)
  // One read at a time (the lifecycle reads in order): one connection.
  const pool = new pg.Pool({
    connectionString: url,
    types,
    Client: SocketClient,
    max: 1,
    // Kept open: the first read after a quiet spell (a revocation) does not wait for a new connection.
    idleTimeoutMillis: 0,
    keepAlive: true,
    keepAliveInitialDelayMillis: KEEP_ALIVE_DELAY_MS,
    connectionTimeoutMillis: 10000,
    application_name: `${APPLICATION_NAME} (reads)`
  })
  // An idle connection cut by the server: the pool drops it; the next read says what it means.
  pool.on('error', () => {})
  const pooled = new Set<SocketClient>()
  pool.on('connect', (client) => pooled.add(client as unknown as SocketClient))
  pool.on('remove', (client) => pooled.delete(client as unknown as SocketClient))

  let events: SourceEvents | undefined
  /**
   * The first connection, made before the first read, retried while the database cannot be reached
   * (for connectTimeoutMs): the listening one, once the changes are followed.
   */
  let first: Promise<SocketClient> | undefined
  let listening: SocketClient | undefined
  let mode: FollowMode = 'poll'
  /** Why the replica polls, once it knows it must: then it does not try to listen again. */
  let pollOnly: string | undefined
  let pollTimer: NodeJS.Timeout | undefined
  let closed = false

  function setMode (next: FollowMode, reason: string) {
    mode = next
    clearInterval(pollTimer)
    pollTimer = undefined
    if (!closed) {
      // Notified, a read a minute all the same: a notification lost in a way nobody saw costs a minute, not forever.
      pollTimer = setInterval(() => events?.wake(), next === 'poll' ? pollIntervalMs : SAFETY_POLL_MS)
      pollTimer.unref()
    }
    events?.mode(next, reason)
  }

  /**
   * Connects the listening connection and finds out whether notifications reach it: on a hot standby
   * they cannot (LISTEN is refused during recovery), and through a transaction pooler a NOTIFY sent
   * to itself never comes back. Answers the mode and why.
   */
  const connectListening = (timeoutMs: number) => connectPostgres(url, timeoutMs, { applicationName: `${APPLICATION_NAME} (listening)`, onRetry })

  async function listen (timeoutMs: number): Promise<[FollowMode, string]> {
    const spare = first
    first = undefined
    const client = await (spare ?? connectListening(timeoutMs))
    let lost: Error | undefined
    const lose = (error: Error) => {
      lost ??= error
      connectionLost(client, error)
    }
    client.on('error', lose)
    client.on('end', () => lose(new Error('the connection was closed')))
    try {
      const { rows: [row] } = await client.query<{ recovery: boolean }>('SELECT pg_is_in_recovery() AS recovery')
      if (row?.recovery === true) {
        client.socket.destroy()
        return ['poll', 'the database is a hot standby, where notifications do not arrive']
      }
      const token = `probe ${randomUUID()}`
      let came = () => {}
      const arrival = new Promise<true>((resolve) => { came = () => resolve(true) })
      client.on('notification', (message) => {
        if (message.payload === token) came()
        // Any notice on the channel is a wake-up, whatever it says: the log says what changed.
        events?.wake()
      })
      // Waited for from the moment the probe was sent and acknowledged.
      const arrived = () => Promise.race([arrival, sleep(PROBE_MS, false, { ref: false })])
      await client.query(`LISTEN ${CHANNEL}`)
      await sendProbe(token)
      if (!await arrived()) {
        client.socket.destroy()
        return ['poll', `a notification sent to itself did not arrive within ${PROBE_MS} ms (a transaction pooler such as PgBouncer)`]
      }
    } catch (error) {
      client.socket.destroy()
      throw error
    }
    if (closed || lost !== undefined) {
      client.socket.destroy()
      if (closed) return ['poll', 'closed']
      throw lost!
    }
    listening = client
    checkAlive(client)
    return ['notify', 'notifications arrive on the listening connection']
  }

  /** A round trip on the listening connection every checkEveryMs; no answer within as long is a lost connection. */
  function checkAlive (client: SocketClient) {
    const timer = setTimeout(() => {
      if (closed || client !== listening) return
      const deadline = setTimeout(() => connectionLost(client, new Error(`no answer to a check within ${checkEveryMs} ms`)), checkEveryMs)
      client.query('SELECT 1').then(() => {
        clearTimeout(deadline)
        if (!closed && client === listening) timer.refresh()
      }, (error: Error) => {
        // A check refused (cancelled, a client no longer queryable) is a connection not to rely on.
        clearTimeout(deadline)
        connectionLost(client, error)
      })
    }, checkEveryMs)
    timer.unref()
  }

  function connectionLost (client: SocketClient, error: Error) {
    if (closed || client !== listening) return
    listening = undefined
    // Whatever cut this one (a server restart, a frozen network) took the reads' connection with it:
    // a read on it would wait for an answer that never comes.
    client.socket.destroy()
    for (const other of pooled) other.socket.destroy()
    events?.following(false, new Error(`lost the connection to PostgreSQL at ${location} (${describe(error)})`))
    // Polled meanwhile: reads that succeed bring the changes in while the listening connection is away.
    setMode('poll', 'the listening connection is lost; reconnecting')
    void reconnect()
  }

  async function reconnect () {
    for (let attempt = 0; !closed && listening === undefined && pollOnly === undefined; attempt++) {
      await sleep(backoff(attempt))
      if (closed) return
      try {
        const [next, reason] = await listen(0)
        if (next === 'poll') pollOnly = reason
        setMode(next, reason)
      } catch {
        // Still unreachable: the loss was reported once; try again later.
      }
    }
    if (closed) return
    events?.following(true)
    // What was committed meanwhile is in the log, past the position.
    events?.wake()
  }

  /** Runs `use` on the reads' connection, dropped if silent for readStallMs (a network that froze it). */
  async function withClient<T> (use: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    const client = await pool.connect()
    const { socket } = client as unknown as SocketClient
    socket.setTimeout(readStallMs)
    let broken = false
    // The connection cut between two queries (the server restarted or ended the session, a proxy
    // hung up): the client says so with an 'error' event, which the pool stops listening to while
    // the client is out, and which would end the process unheard. The next query fails instead.
    const lost = () => { broken = true }
    client.on('error', lost)
    try {
      return await use(client)
    } catch (error) {
      broken = true
      throw error
    } finally {
      socket.setTimeout(0)
      client.off('error', lost)
      // A connection left in a failed transaction (or a broken one) is closed, not reused.
      client.release(broken)
    }
  }

  /** Runs `read` in a read-only REPEATABLE READ transaction: the rows it reads agree with each other. */
  async function inTransaction<T> (read: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    return await withClient(async (client) => {
      // No statement timeout, whatever the role's or the database's: a COPY lasts as long as the
      // replica takes to read it, which a deadline would count (a replica held to a fifth of a CPU
      // could not start at gateway scale). readStallMs drops a connection PostgreSQL stops
      // answering on. Set for this transaction alone: a transaction pooler refuses settings as
      // startup parameters, and may hand the connection to another client after COMMIT.
      await client.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL statement_timeout = 0; SET LOCAL TimeZone = 'UTC'")
      try {
        const result = await read(client)
        await client.query('COMMIT')
        return result
      } catch (error) {
        throw explainConflict(error, client as unknown as SocketClient)
      }
    })
  }

  /**
   * Sends the probe from a connection of its own, closed at once: through a pooler, another client
   * (a NOTIFY sent from the listening client may land on its own server connection, and come back),
   * and never the reads' connection, which a read may hold. Not sent in time: the verdict is left
   * open (an error), not taken for a pooler.
   */
  async function sendProbe (token: string) {
    const client = await connectPostgres(url, 0, { applicationName: `${APPLICATION_NAME} (probe)` })
    client.on('error', () => {})
    const timer = setTimeout(() => client.socket.destroy(new Error(`no answer to a NOTIFY within ${PROBE_MS} ms`)), PROBE_MS)
    try {
      await client.query('SELECT pg_notify($1, $2)', [CHANNEL, token])
    } finally {
      clearTimeout(timer)
      await client.end().catch(() => {})
    }
  }

  /** The requests read, each kind a change, or a refusal when its data is bad; anything else fails the read. */
  async function readKinds (client: pg.ClientBase, requests: readonly ReadRequest[]): Promise<Array<Change | Refusal>> {
    const changes: Array<Change | Refusal> = []
    for (const request of requests) {
      changes.push(await readKind(client, request).catch((error: unknown) => {
        if (error instanceof DataError) return { kind: request.kind, error }
        throw error
      }))
    }
    return changes
  }

  /** One request of a read, in the read's transaction. */
  async function readKind (client: pg.ClientBase, { kind, keys }: ReadRequest): Promise<Change> {
    switch (KINDS[kind].index) {
      case 'list': return await readList(client, kind)
      case 'keys': return await readKeys(client, keys)
      case 'organizations': return await readOrganizations(client, keys)
    }
  }

  /** The state of the read's transaction (STATE), with `extra` columns; the position and the measures it gives. */
  async function stateOf<T extends object> (client: pg.ClientBase, extra = '', parameters: unknown[] = []) {
    const before = Date.now()
    const { rows: [row] } = await client.query<State & T>(`SELECT ${STATE}${extra}`, parameters)
    const after = Date.now()
    const state = row!
    const position = `${state.history}|${state.snapshot}${state.seen === null ? '' : `|${state.seen}`}`
    const parsed = parsePosition(position)
    const measured: SourceMeasures = {
      // The database's clock read halfway through the round trip, as NTP reckons.
      clockOffsetMs: Number(state.clock_ms) - (before + after) / 2,
      replayLagMs: state.lag_ms === null ? null : Math.max(0, Number(state.lag_ms)),
      ...parsed.xmin < parsed.xmax ? { oldestOpen: parsed.xmin } : {}
    }
    return { state, position, parsed, measured }
  }

  /** A batch at the read's position. */
  const batchAt = (position: string, parsed: Position, measured: SourceMeasures, rest: Pick<Batch, 'changes' | 'relisted' | 'waiting'>): Batch =>
    ({ position, label: labelOf(parsed), horizon: parsed.xmax, history: parsed.history, measured, ...rest })

  /** Every kind whole, at the transaction's snapshot (its state, read here unless given). */
  async function listAll (client: pg.ClientBase, given?: Awaited<ReturnType<typeof stateOf>>, relisted?: string): Promise<Batch> {
    await checkSchema(client)
    const { position, parsed, measured } = given ?? await stateOf(client)
    return batchAt(position, parsed, measured, { relisted, changes: await readKinds(client, RECORD_KINDS.map((kind) => ({ kind, keys: 'all' }))) })
  }

  /**
   * What changed after `since`: the log's entries of the transactions `since` did not see and the
   * transaction's snapshot does (PgQ's cut between two snapshots), grouped by table, and the records
   * they name, read at that snapshot. Every kind whole when the database is another history than
   * `since`'s, or its counter is behind it on a primary (a failover, a restore): said in `relisted`.
   */
  async function readChanges (client: pg.ClientBase, since: string): Promise<Batch> {
    const from = parsePosition(since)
    // One query when nothing changed, which is what a poll finds most of the time.
    // Trimmed past the position: a trim that began after it removed entries at or past its xmin. A trim
    // the snapshot cannot have seen is another cluster's, copied by a restore: it says nothing of this one.
    const read = await stateOf<{ trimmed: boolean, older: boolean, changed: boolean, recovery: boolean }>(client, `,
        (SELECT through >= pg_snapshot_xmin($1::pg_snapshot) AND trimmed_by >= pg_snapshot_xmax($1::pg_snapshot)
          AND pg_visible_in_snapshot(trimmed_by, pg_current_snapshot()) FROM directory_changes_trimmed) AS trimmed,
        pg_snapshot_xmax(pg_current_snapshot()) < pg_snapshot_xmax($1::pg_snapshot) AS older, pg_is_in_recovery() AS recovery,
        EXISTS (SELECT 1 FROM directory_changes WHERE ${unreadSql(from, 2)}) AS changed`, [from.snapshot, ...cutOf(from)])
    const { state, position, parsed, measured } = read
    if (parsed.history !== from.history) {
      return await listAll(client, read, `the database is another history than the one served (cluster, timeline, database, change log: ${from.history} then ${parsed.history}): a failover, a restore, or another database`)
    }
    if (state.older) {
      // A standby that has not yet replayed what was served (the replica moved to another one): wait for it, unconfirmed.
      if (state.recovery) return batchAt(since, from, measured, { changes: [], waiting: `the hot standby has replayed up to ${parsed.xmax}, behind the data served (${from.xmax})` })
      return await listAll(client, read, `the transaction counter of the primary (${parsed.xmax}) is behind the position served (${from.xmax}): another history`)
    }
    if (from.seen === '*') return await listAll(client, read, `more than ${SEEN_MAX} transactions committed past a transaction held open since ${from.xmin} (on a hot standby, the position cannot carry them)`)
    if (state.trimmed) return await listAll(client, read, `the change log was trimmed past the position ${labelOf(from)}`)
    if (!state.changed) return batchAt(position, parsed, measured, { changes: [] })
    // Bounded as the records' rows are (a writer may append to the log): a table's name is at most
    // 63 bytes (NAMEDATALEN), and a name past its kind's bound names no record that can be served.
    const { rows } = await client.query<Pending>(`WITH pending AS (
        SELECT table_name, names, written_at FROM directory_changes WHERE ${unreadSql(from, 1)} AND octet_length(table_name) <= 63
      )
      SELECT table_name, count(*) AS entries, extract(epoch FROM now() - min(written_at)) AS age,
        CASE WHEN bool_or(names IS NULL) THEN NULL ELSE (SELECT coalesce(array_agg(name), '{}') FROM (
          SELECT DISTINCT name FROM pending AS named, unnest(named.names) AS name
            WHERE named.table_name = pending.table_name AND octet_length(name) <= ${NAME_MAX_BYTES} LIMIT ${NAMED_MAX + 1}
        ) AS distinct_names) END AS names
      FROM pending GROUP BY table_name`, cutOf(from))
    if (rows.length > 0) {
      events?.behind(rows.reduce((sum, row) => sum + Number(row.entries), 0), Date.now() - Math.max(...rows.map((row) => Number(row.age))) * 1000)
    }
    const named = new Map<RecordKind, Set<string> | 'all'>()
    for (const { table_name: table, names } of rows) {
      const kind = KIND_OF_TABLE.get(table)
      if (kind === undefined) continue
      const seen = named.get(kind) ?? new Set<string>()
      if (names === null || seen === 'all' || KINDS[kind].index === 'list') named.set(kind, 'all')
      else {
        for (const name of names) seen.add(name)
        named.set(kind, seen.size > NAMED_MAX ? 'all' : seen)
      }
    }
    // A kind whose entries named only names past their bound has none to read.
    const requests = RECORD_KINDS.filter((kind) => { const names = named.get(kind); return names === 'all' || (names?.size ?? 0) > 0 }).map((kind) => {
      const names = named.get(kind)!
      return { kind, keys: names === 'all' ? 'all' as const : [...names] }
    })
    return batchAt(position, parsed, measured, { changes: await readKinds(client, requests) })
  }

  return {
    name: 'postgres',
    location,
    get mode () { return mode },
    async list () {
      // A database that does not answer yet (starting, restarting) is waited for, each try told.
      if (events === undefined) {
        await (first ??= connectListening(connectTimeoutMs).then((client) => {
          // Cut while it waits to listen: LISTEN then fails, and the replica connects again.
          client.on('error', () => {})
          return client
        }))
      }
      return await inTransaction(async (client) => await listAll(client))
    },
    async changesSince (since) {
      const polling = listening === undefined
      try {
        const batch = await inTransaction((client) => readChanges(client, since))
        if (polling) events?.following(true)
        return batch
      } catch (error) {
        if (polling) events?.following(false, new Error(`cannot read the change log of PostgreSQL at ${location} (${describe(error)})`))
        throw error
      }
    },
    async watch (handlers) {
      events = handlers
      try {
        const [next, reason] = await listen(connectTimeoutMs)
        if (next === 'poll') pollOnly = reason
        setMode(next, reason)
      } catch (error) {
        setMode('poll', `cannot listen (${describe(error)}); reconnecting`)
        void reconnect()
      }
      // Whatever was committed between the list and now is in the log, past the position.
      handlers.wake()
    },
    async close () {
      closed = true
      clearInterval(pollTimer)
      await first?.then((client) => client.end(), () => {})
      // A graceful end, unless the connection does not answer.
      if (listening !== undefined) await Promise.race([listening.end().catch(() => {}), sleep(1000)])
      listening?.socket.destroy()
      await pool.end()
    }
  }
}
