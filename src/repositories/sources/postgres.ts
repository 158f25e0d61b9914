import net from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { Type } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import pg from 'pg'
import { DataError, KINDS, RECORD_KINDS, type RecordKind, memberProblem, recordProblem, validateRecords, type Organization } from '../records.js'
import { createSlicer } from '../slices.js'
import { MemberList, MemberListBuilder, blockIndex, type Block } from '../member-list.js'
import { quoteValue } from '../../schemas/describe-error.js'
import type { Source, SourceEvents } from '../source.js'
import { readKeyChange, type PartChange, type Snapshot } from '../snapshot.js'
import type { ApiKey } from '../../schemas/fixtures.js'
import type { Member } from '../../schemas/member.js'
import { CHANNEL, checkSchema } from './postgres-schema.js'
import { copyRows, type TextRow } from './copy-rows.js'

/** Reconnection waits 100 ms, then twice as long each time, up to this. */
const MAX_BACKOFF_MS = 5000

/**
 * The listening connection is asked for a round trip this often, and given this long to answer:
 * a connection the network froze without closing it (a NAT or load balancer that dropped the flow)
 * is found within their sum, then every connection is dropped, and the replica reconnects and reads
 * everything again.
 */
const CHECK_EVERY_MS = 5000
const CHECK_DEADLINE_MS = 5000

/** TCP keep-alive probes start after this long idle: the kernel's own bound on a dead peer. */
const KEEP_ALIVE_DELAY_MS = 10_000

/**
 * A read's connection that is silent this long is dropped and the read tried again; and no
 * statement of a read runs longer on the server. Both far above a whole read at gateway scale.
 */
const READ_STALL_MS = 30_000
const STATEMENT_TIMEOUT_MS = 60_000

/** How the replica's connections show in pg_stat_activity: the listening one, the reads', the commands'. */
const APPLICATION_NAME = 'model-gateway-directory'

/** Notices that arrive before the changes are followed, kept to be told then; past this many, every kind is read again instead. */
const EARLY_MAX = 1000

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

function backoff (attempt: number) {
  // Jitter, so that replicas that lost the same server do not come back in lockstep.
  return Math.min(100 * 2 ** attempt, MAX_BACKOFF_MS) * (0.5 + Math.random() / 2)
}

/**
 * A client whose socket is at hand (pg's public `stream` option): a connection the network froze is
 * destroyed at once, where ending it would wait for an answer that never comes.
 */
class SocketClient extends pg.Client {
  readonly socket: net.Socket

  constructor (config: pg.ClientConfig = {}) {
    const socket = new net.Socket()
    super({ ...config, stream: () => socket })
    this.socket = socket
    // Armed by reads only (setTimeout): an idle connection is silent by right.
    socket.on('timeout', () => socket.destroy(new Error(`no answer from PostgreSQL within ${READ_STALL_MS} ms`)))
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
      onRetry?.(`cannot connect to PostgreSQL at ${locationOf(url)} (try ${attempt + 1}: ${describe(error)}); trying again in ${Math.round(wait)} ms`)
      await sleep(wait)
    }
  }
}

/** `where: [3].field: problem` becomes `table t, row key "x": field: problem`: the row, by its key. */
function rowMessage (message: string, table: string, keyOf: (index: number) => string): string {
  const match = /^[^:]+: \[(\d+)\]\.?(.*)$/.exec(message)
  if (!match) return `table ${table}: ${message.replace(/^[^:]+: /, '')}`
  let rest = match[2]!
  // A key hash is a secret, whatever it holds: never echoed.
  if (table === 'keys' && rest.startsWith('sha256:')) rest = 'sha256: is not a lowercase hex SHA-256'
  return `table ${table}, row ${keyOf(Number(match[1]))}: ${rest}`
}

function locateRow (error: unknown, table: string, keyOf: (index: number) => string): never {
  if (!(error instanceof DataError)) throw error
  throw new DataError(rowMessage(error.message, table, keyOf))
}

/**
 * Where a read puts the rows it refuses one by one: at start (no `served`) a bad row stops the
 * start; on a change it is noted, and its record keeps the version served.
 */
class Refusals {
  readonly problems: string[] = []
  readonly keys = new Set<string>()
  constructor (readonly atStart: boolean) {}

  refuse (key: string, problem: string) {
    if (this.atStart) throw new DataError(problem)
    this.keys.add(key)
    this.problems.push(problem)
  }
}

/** Copies `object` with `keys` first, in that order (jsonb keeps keys in an order of its own). */
function inOrder<T extends object> (object: T | null, keys: readonly string[]): T | null {
  if (object === null || typeof object !== 'object' || Array.isArray(object)) return object
  const ordered: Record<string, unknown> = {}
  for (const key of keys) if (key in object) ordered[key] = (object as Record<string, unknown>)[key]
  return Object.assign(ordered, object) as T
}

const PERCENTILES = ['p50', 'p75', 'p90', 'p99']

// Each reader returns the records in page order, validated, with the field order of the files.

async function readProviders (client: pg.ClientBase) {
  const { rows } = await client.query(`SELECT name, slug, privacy_policy_url, terms_of_service_url, status_page_url, headquarters, datacenters, omitted_fields
    FROM providers ORDER BY position, slug`)
  const records = rows.map(({ omitted_fields: omitted, ...record }) => {
    for (const field of omitted as string[]) delete record[field]
    return record
  })
  try {
    return validateRecords('providers', records, 'providers')
  } catch (error) {
    locateRow(error, 'providers', (index) => `slug ${quoteValue(rows[index].slug)}`)
  }
}

async function readEndpoints (client: pg.ClientBase) {
  const { rows } = await client.query(`SELECT id, model_id, model_name, name, provider_name, tag, context_length, max_prompt_tokens, max_completion_tokens,
      pricing, quantization, status, supported_parameters, supports_implicit_caching, supports_tool_choice,
      latency_last_30m, throughput_last_30m, uptime_last_5m, uptime_last_30m, uptime_last_1d
    FROM endpoints ORDER BY position, id`)
  const records = rows.map(({ id: _, ...record }) => ({
    ...record,
    pricing: inOrder(record.pricing, ['prompt', 'completion', 'image', 'request']),
    supports_tool_choice: inOrder(record.supports_tool_choice, ['auto', 'function', 'none', 'required']),
    latency_last_30m: inOrder(record.latency_last_30m, PERCENTILES),
    throughput_last_30m: inOrder(record.throughput_last_30m, PERCENTILES)
  }))
  try {
    return validateRecords('endpoints', records, 'endpoints')
  } catch (error) {
    locateRow(error, 'endpoints', (index) => `id ${rows[index].id}`)
  }
}

/**
 * Rows fetched at a time through a cursor. Node.js parses whatever has reached the socket in one
 * go (up to 32 reads of 64 KiB) before the next request gets a turn, and a batch lives until the
 * next: some 2,000 rows (250 KB) keep both short, and die young.
 */
const BATCH_ROWS = 2_000

let cursors = 0

/**
 * The rows of `query`, BATCH_ROWS at a time, through a cursor of the transaction the client is in.
 * The next batch is asked for before this one is handed over, so that PostgreSQL reads it while
 * this one is worked through. The cursor is closed however the reading ends.
 */
async function * cursorRows (client: pg.ClientBase, query: { text: string, values?: unknown[] }): AsyncGenerator<TextRow[]> {
  const cursor = `directory_rows_${++cursors}`
  await client.query({ text: `DECLARE ${cursor} NO SCROLL CURSOR FOR ${query.text}`, values: query.values })
  const fetch = () => client.query<TextRow>({ text: `FETCH ${BATCH_ROWS} FROM ${cursor}`, rowMode: 'array' })
  let next: ReturnType<typeof fetch> | undefined = fetch()
  let read = false
  try {
    while (next !== undefined) {
      const { rows }: { rows: TextRow[] } = await next
      next = rows.length === BATCH_ROWS ? fetch() : undefined
      yield rows
    }
    read = true
  } finally {
    // Left before the end (a bad row): the batch asked for is not wanted, nor is how its fetch ends.
    next?.catch(() => {})
    // Closed for the reads that follow in the transaction; if the connection is what failed, its error is the one to tell.
    const closed = client.query(`CLOSE ${cursor}`)
    await (read ? closed : closed.catch(() => {}))
  }
}

/**
 * The rows of a query of text columns, in batches: a whole table (no values) by COPY, which costs
 * half as much; the rows a notice names through a cursor, since COPY takes no parameters.
 */
function rowsOf (client: pg.ClientBase, query: { text: string, values?: unknown[] }): AsyncGenerator<TextRow[]> {
  return query.values === undefined ? copyRows(client, query.text) : cursorRows(client, query)
}

/**
 * Keys, all (as a change to those in place: readKeyChange) or those of these names, validated; a
 * bad row is a DataError naming it. Never a million objects at once: a batch at a time.
 */
async function readKeys (client: pg.ClientBase, names: readonly string[] | 'all', current: Snapshot | undefined): Promise<PartChange<'keys'>> {
  const columns = 'SELECT name, sha256, kind, organization_id FROM keys'
  const served = current?.parts.keys.byKey
  const refusals = new Refusals(served === undefined)
  let index = 0
  const read = async (add: (key: ApiKey) => void) => {
    // In no order: a key table has none, and reading the table in its own order spares an index scan.
    const query = names === 'all' ? { text: columns } : { text: `${columns} WHERE name = ANY($1)`, values: [names] }
    for await (const rows of rowsOf(client, query)) {
      // NOT NULL columns; a null would be refused by recordProblem all the same.
      for (const [name, sha256, kind, organization] of rows as string[][]) {
        const key = { name: name!, sha256: sha256!, kind: kind as ApiKey['kind'], organization_id: organization! }
        const problem = recordProblem('keys', key, index++)
        if (problem === undefined) add(key)
        else {
          refusals.refuse(name!, rowMessage(`keys: ${problem}`, 'keys', () => `name ${quoteValue(name)}`))
          // A whole read keeps the version served; a read of names leaves the name out of its change.
          const last = served?.get(name!)
          if (names === 'all' && last !== undefined) add(last)
        }
      }
    }
  }
  if (names === 'all') return { ...await readKeyChange(current?.parts.keys, 'table keys', read), rowsRead: index, refused: refusals.problems }
  const found: ApiKey[] = []
  await read((key) => found.push(key))
  const present = new Set(found.map((key) => key.name))
  return { kind: 'keys', upsert: found, remove: names.filter((name) => !present.has(name) && !refusals.keys.has(name)), rowsRead: index, refused: refusals.problems }
}

/**
 * Organizations' ids and names, validated (their members apart: readMembers checks them), a batch
 * at a time: a hundred thousand of them would otherwise be parsed and checked in one go.
 */
async function readOrganizationList (client: pg.ClientBase, ids: readonly string[] | 'all', refusals: Refusals): Promise<Array<{ id: string, name: string }>> {
  const list: Array<{ id: string, name: string }> = []
  const query = ids === 'all'
    ? { text: 'SELECT id, name FROM organizations ORDER BY position, id' }
    : { text: 'SELECT id, name FROM organizations WHERE id = ANY($1) ORDER BY position, id', values: [ids] }
  for await (const rows of rowsOf(client, query)) {
    for (const [id, name] of rows as Array<[string, string]>) {
      const problem = recordProblem('organizations', { id, name, members: [] }, list.length)
      if (problem === undefined) list.push({ id, name })
      else refusals.refuse(id, rowMessage(`organizations: ${problem}`, 'organizations', () => `id ${quoteValue(id)}`))
    }
  }
  return list
}

/** A member's place in page order: its position (as text: a bigint; null comes last), then its id. */
type SortKey = readonly [position: string | null, id: string]

/**
 * What notices said of an organization's members since it was last read: the sort keys of the
 * members changed, before and after (read the blocks around them), `whole` (read them all), or
 * `row` (its row alone changed: keep its members).
 */
type MemberChange = SortKey[] | 'whole' | 'row'

/**
 * More sort keys than this noted for one organization before it is read, or more of its blocks
 * than a quarter to read again around them, and it is read whole: a partial read never costs more
 * than a whole one, however many changes pile up while a read runs.
 */
const MEMBER_KEYS_MAX = 256
const BLOCKS_SHARE_MAX = 0.25

/**
 * Where each block of a list ends in page order (the sort key of its last member), for lists of
 * more than one block: a change to a few members of a large organization reads again the blocks
 * around them alone. A list of one block is read again whole, which costs as much.
 */
const boundsOf = new WeakMap<MemberList, readonly SortKey[]>()

/** A member row, in array mode: organization_id, id, email, first_name, last_name, role. */
const MEMBER_COLUMNS = 'organization_id, id, email, first_name, last_name, role'
/** The same, and its position (as text, and not named `position`, which ORDER BY would take for it). */
const RANGE_COLUMNS = `${MEMBER_COLUMNS}, position::text AS position_text`
const PAGE_ORDER = 'ORDER BY organization_id, position, id'

/** Where the blocks of a list end: their last members' ids, and positions where the rows read had them. */
interface BlockEnds {
  readonly ids: string[]
  readonly positions: Array<string | null | undefined>
}

/** A MemberListBuilder of member rows that notes where its blocks end. */
class RowListBuilder {
  private readonly builder: MemberListBuilder
  private readonly ends: BlockEnds = { ids: [], positions: [] }
  private lastId = ''
  private lastPosition: string | null | undefined

  constructor (shared?: ReadonlyMap<number, Block>) {
    // Member ids are unique within their organization by the primary key (organization_id, id):
    // the builder's own check, which costs more than the schema on a large organization, would only say it again.
    this.builder = new MemberListBuilder(shared, { checkIds: false })
  }

  get atBlockEnd () {
    return this.builder.atBlockEnd
  }

  /** Adds a row (of MEMBER_COLUMNS or RANGE_COLUMNS), validated: a bad one is a DataError naming it. */
  add (row: Array<string | null>) {
    // A member object is made once, in the field order of the files, without the organization's id.
    const member = { id: row[1]!, email: row[2]!, first_name: row[3]!, last_name: row[4]!, role: row[5] as Member['role'] }
    const problem = memberProblem(member, 0, 0)
    if (problem !== undefined) {
      // `[0].members[0].email: problem` becomes `table members, row …: email: problem`.
      throw new DataError(`table members, row organization_id ${quoteValue(row[0])}, id ${quoteValue(member.id)}: ${problem.replace(/^\[0\]\.members\[0\]\.?/, '')}`)
    }
    this.builder.add(member)
    this.lastId = member.id
    this.lastPosition = row[6]
    if (this.builder.atBlockEnd) this.blockEnded()
  }

  /** Adds blocks of a list whole, with their bounds. */
  addBlocks (blocks: readonly Block[], bounds: readonly SortKey[]) {
    this.builder.addBlocks(blocks)
    for (const [position, id] of bounds) {
      this.ends.ids.push(id)
      this.ends.positions.push(position)
    }
  }

  /** The list, and where its blocks end when it has more than one. */
  finish (): { list: MemberList, ends?: BlockEnds } {
    const pending = !this.builder.atBlockEnd
    const { list } = this.builder.finish()
    if (pending) this.blockEnded()
    return list.blocks.length > 1 ? { list, ends: this.ends } : { list }
  }

  private blockEnded () {
    this.ends.ids.push(this.lastId)
    this.ends.positions.push(this.lastPosition)
  }
}

/**
 * Notes the bounds of a list of several blocks (boundsOf), asking the database for the positions
 * the rows read did not have, in the transaction they were read in: a whole read leaves positions
 * out, a million of them for a thousand block ends.
 */
async function noteBounds (client: pg.ClientBase, organization: string, list: MemberList, { ids, positions }: BlockEnds) {
  const missing = ids.filter((_, b) => positions[b] === undefined)
  if (missing.length > 0) {
    const { rows } = await client.query<{ id: string, position_text: string | null }>(
      'SELECT id, position::text AS position_text FROM members WHERE organization_id = $1 AND id = ANY($2)', [organization, missing])
    const found = new Map(rows.map((row) => [row.id, row.position_text]))
    for (let b = 0; b < ids.length; b++) if (positions[b] === undefined) positions[b] = found.get(ids[b]!)
  }
  boundsOf.set(list, ids.map((id, b) => [positions[b] ?? null, id]))
}

/**
 * The members of these organizations (of all when `all`), by organization: read in page order
 * through a cursor, a batch at a time, each batch validated and compacted into its
 * organization's MemberList (member-list.ts) before the next is fetched, so that a million members
 * are never all rows or objects at once: the peak is the lists themselves and one batch. Blocks
 * equal to blocks of `shared` are shared with them. Runs inside read()'s transaction, which the
 * cursor lives in. Answers the lists and the rows read.
 */
async function readMembers (client: pg.ClientBase, ids: readonly string[] | 'all', refusals: Refusals, shared?: ReadonlyMap<number, Block>) {
  const lists = new Map<string, MemberList>()
  const large: Array<[string, { list: MemberList, ends?: BlockEnds }]> = []
  const query = ids === 'all'
    ? { text: `SELECT ${MEMBER_COLUMNS} FROM members ${PAGE_ORDER}` }
    : { text: `SELECT ${MEMBER_COLUMNS} FROM members WHERE organization_id = ANY($1) ${PAGE_ORDER}`, values: [ids] }
  // Undefined while the rows of an organization refused are passed over.
  let builder: RowListBuilder | undefined
  let listOf: string | undefined
  let count = 0
  const finish = () => {
    if (builder === undefined) return
    const finished = builder.finish()
    lists.set(listOf!, finished.list)
    if (finished.ends) large.push([listOf!, finished])
  }
  for await (const rows of rowsOf(client, query)) {
    count += rows.length
    for (const row of rows) {
      if (row[0] !== listOf) {
        finish()
        listOf = row[0]!
        builder = new RowListBuilder(shared)
      }
      try {
        builder?.add(row)
      } catch (error) {
        if (!(error instanceof DataError)) throw error
        // A bad member refuses its organization alone.
        refusals.refuse(listOf!, error.message)
        builder = undefined
      }
    }
  }
  finish()
  for (const [organization, { list, ends }] of large) await noteBounds(client, organization, list, ends!)
  return { lists, count }
}

/** One organization's members read whole, and the rows read; undefined when a bad row refused it. */
async function readWhole (client: pg.ClientBase, organization: string, refusals: Refusals, shared: ReadonlyMap<number, Block>) {
  const { lists, count } = await readMembers(client, [organization], refusals, shared)
  if (refusals.keys.has(organization)) return undefined
  return { list: lists.get(organization) ?? MemberList.of([]), count }
}

/**
 * The queries, in page order, for the members of an organization after `lower` (excluded) and up to
 * `upper` (included): those with a position, then those without (which come last). Each is a range
 * of the index members_order; one query of both would make PostgreSQL filter the whole organization.
 */
function rangeQueries (organization: string, lower: SortKey | undefined, upper: SortKey | undefined): pg.QueryArrayConfig[] {
  const query = (conditions: string[], values: unknown[], order: string): pg.QueryArrayConfig =>
    ({ text: `SELECT ${RANGE_COLUMNS} FROM members WHERE organization_id = $1 AND ${conditions.join(' AND ')} ORDER BY ${order}`, values: [organization, ...values], rowMode: 'array' })
  const queries: pg.QueryArrayConfig[] = []
  if (lower === undefined || lower[0] !== null) {
    const conditions = ['position IS NOT NULL']
    const values: unknown[] = []
    if (lower !== undefined) conditions.push(`(position, id) > ($${values.push(lower[0]) + 1}::bigint, $${values.push(lower[1]) + 1})`)
    if (upper !== undefined && upper[0] !== null) conditions.push(`(position, id) <= ($${values.push(upper[0]) + 1}::bigint, $${values.push(upper[1]) + 1})`)
    queries.push(query(conditions, values, 'position, id'))
  }
  if (upper === undefined || upper[0] === null) {
    const conditions = ['position IS NULL']
    const values: unknown[] = []
    if (lower !== undefined && lower[0] === null) conditions.push(`id > $${values.push(lower[1]) + 1}`)
    if (upper !== undefined) conditions.push(`id <= $${values.push(upper[1]) + 1}`)
    queries.push(query(conditions, values, 'id'))
  }
  return queries
}

/**
 * A large organization's list (one with boundsOf) after a change to the members of these sort keys
 * (before and after the change): the blocks they fall in are read again, each block's rows by its
 * bounds, and so is the next block while the rows read do not end at a block end (the member that
 * closed a block left or moved); every other block is kept. Since blocks are cut by content, the
 * list is the one a whole read would make. Answers the list and the rows read.
 */
async function readAround (client: pg.ClientBase, organization: string, list: MemberList, changed: readonly SortKey[]) {
  const bounds = boundsOf.get(list)!
  // The block each sort key falls in: the first whose last member does not come before it, that is
  // the number of bounds sorted before the key (past the last bound: the last block). One sort of
  // keys and bounds together, in the database's collation, as the page order is.
  const { rows: located } = await client.query<{ block: number }>(`SELECT DISTINCT block FROM (
      SELECT side, count(*) FILTER (WHERE side = 1) OVER (ORDER BY position IS NULL, position, id, side ROWS UNBOUNDED PRECEDING) AS block
      FROM (SELECT 0 AS side, position, id FROM unnest($1::bigint[], $2::text[]) AS key(position, id)
        UNION ALL SELECT 1, position, id FROM unnest($3::bigint[], $4::text[]) AS bound(position, id)) AS sort_keys
    ) AS counted WHERE side = 0`,
  [changed.map((key) => key[0]), changed.map((key) => key[1]), bounds.map((key) => key[0]), bounds.map((key) => key[1])])
  const last = bounds.length - 1
  const affected = new Set(located.map(({ block }) => Math.min(Number(block), last)))
  if (affected.size > bounds.length * BLOCKS_SHARE_MAX) return undefined
  const builder = new RowListBuilder(await blockIndex([{ members: list }]))
  let kept = 0
  let count = 0
  for (const first of [...affected].sort((a, b) => a - b)) {
    if (first < kept) continue
    builder.addBlocks(list.blocks.slice(kept, first), bounds.slice(kept, first))
    let from = first
    let to = first
    while (affected.has(to + 1)) to++
    for (;;) {
      for (const query of rangeQueries(organization, bounds[from - 1], to === last ? undefined : bounds[to])) {
        const { rows } = await client.query<string[]>(query)
        count += rows.length
        for (const row of rows) builder.add(row)
      }
      if (builder.atBlockEnd || to === last) break
      from = to = to + 1
    }
    kept = to + 1
  }
  builder.addBlocks(list.blocks.slice(kept), bounds.slice(kept))
  const { list: next, ends } = builder.finish()
  if (ends) await noteBounds(client, organization, next, ends)
  return { list: next, count }
}

/** A key name or an organization id as a notice names it: text PostgreSQL can hold (no NUL), bounded. */
const NoticeName = Type.String({ maxLength: 1024, pattern: '^[^\\u0000]*$' })
const NoticeNames = Type.Union([Type.Array(NoticeName, { maxItems: 10_000 }), Type.Null()])

/** What the triggers of postgres-schema.ts send, and nothing else. */
const checkNotice = TypeCompiler.Compile(Type.Union([
  Type.Object({ table: Type.Literal(KINDS.keys.table), names: Type.Optional(NoticeNames) }),
  Type.Object({ table: Type.Literal(KINDS.organizations.table), ids: Type.Optional(NoticeNames) }),
  Type.Object({
    table: Type.Literal('members'),
    organization_ids: Type.Optional(NoticeNames),
    // Organization, position (a bigint, as text) and id of each member named.
    members: Type.Optional(Type.Union([Type.Array(Type.Tuple([NoticeName, Type.Union([Type.String({ pattern: '^-?[0-9]{1,19}$' }), Type.Null()]), NoticeName]), { maxItems: 1000 }), Type.Null()]))
  }),
  Type.Object({ table: Type.Union([Type.Literal(KINDS.providers.table), Type.Literal(KINDS.endpoints.table)]) })
]))

const KIND_OF_TABLE = new Map<string, RecordKind>(RECORD_KINDS.map((kind) => [KINDS[kind].table, kind]))

/** A read asked of the source, waiting for the transaction of its turn. */
interface Job {
  kind: RecordKind
  keys: readonly string[] | 'all'
  current: Snapshot | undefined
  /** Organizations: what the notices said of their members, taken when the read was asked for. */
  memberChanges?: ReadonlyMap<string, MemberChange>
  resolve(change: PartChange): void
  reject(error: unknown): void
}

/** Small and often changed first: keys, then the lists, then organizations and their members. */
const READ_ORDER: RecordKind[] = ['keys', 'providers', 'endpoints', 'organizations']

/**
 * The directory in a PostgreSQL database (the schema of postgres-schema.ts). Every replica LISTENs:
 * the tables' triggers NOTIFY, at commit, what changed, by name (key names, organization ids), and
 * the replica reads those rows alone, each kind in a REPEATABLE READ transaction of its own.
 *
 * If the listening connection drops, the current data keeps serving, the connection is retried with
 * backoff, and every kind is read again once it is back (notifications sent meanwhile are lost).
 */
export function createPostgresSource ({ url, connectTimeoutMs, onRetry }: { url: string, connectTimeoutMs: number, onRetry?: ConnectOptions['onRetry'] }): Source {
  const location = locationOf(url)
  // A connection per batch of reads at once (a whole read and a read of named records of each kind
  // at most), and the listening one apart.
  const pool = new pg.Pool({
    connectionString: url,
    types,
    Client: SocketClient,
    max: RECORD_KINDS.length * 2,
    keepAlive: true,
    keepAliveInitialDelayMillis: KEEP_ALIVE_DELAY_MS,
    connectionTimeoutMillis: 10000,
    statement_timeout: STATEMENT_TIMEOUT_MS,
    application_name: `${APPLICATION_NAME} (reads)`
  })
  // An idle connection cut by the server: the pool drops it; the listening connection says what it means.
  pool.on('error', () => {})
  const pooled = new Set<SocketClient>()
  pool.on('connect', (client) => pooled.add(client as unknown as SocketClient))
  pool.on('remove', (client) => pooled.delete(client as unknown as SocketClient))

  let events: SourceEvents | undefined
  /** What was noticed before the changes are followed (watch), told then. */
  const early: Array<(events: SourceEvents) => void> = []
  let earlyOverflow = false
  let listening: SocketClient | undefined
  let connecting: Promise<void> | undefined
  let batch: Job[] | undefined
  let closed = false

  /** Tells the lifecycle, or keeps it for when it follows: nothing noticed between LISTEN and serving is lost. */
  function tell (what: (events: SourceEvents) => void) {
    if (events !== undefined) return what(events)
    if (early.length < EARLY_MAX) early.push(what)
    else {
      early.length = 0
      earlyOverflow = true
    }
  }

  async function listen (timeoutMs: number) {
    const client = await connectPostgres(url, timeoutMs, { applicationName: `${APPLICATION_NAME} (listening)`, onRetry })
    client.on('notification', (message) => noteChange(message.payload))
    client.on('error', (error) => connectionLost(client, error))
    client.on('end', () => connectionLost(client, new Error('the connection was closed')))
    try {
      await client.query(`LISTEN ${CHANNEL}`)
    } catch (error) {
      client.socket.destroy()
      throw error
    }
    if (closed) client.socket.destroy()
    else {
      listening = client
      checkAlive(client)
    }
  }

  /** A round trip on the listening connection every CHECK_EVERY_MS; no answer within CHECK_DEADLINE_MS is a lost connection. */
  function checkAlive (client: SocketClient) {
    const timer = setTimeout(() => {
      if (closed || client !== listening) return
      const deadline = setTimeout(() => connectionLost(client, new Error(`no answer to a check within ${CHECK_DEADLINE_MS} ms`)), CHECK_DEADLINE_MS)
      client.query('SELECT 1').then(() => {
        clearTimeout(deadline)
        if (!closed && client === listening) timer.refresh()
      }, () => clearTimeout(deadline))
    }, CHECK_EVERY_MS)
    timer.unref()
  }

  /**
   * What the notices said of each organization's members since it was last read (MemberChange). An
   * organization not here is read whole. Taken by the read of the organization; an `all` read drops them all.
   */
  const memberChanges = new Map<string, MemberChange>()

  /**
   * Takes what the notices said of these organizations' members (all: drops it all). Taken before
   * the read's transaction takes its snapshot: PostgreSQL delivers a notice once its transaction is
   * visible, so the snapshot holds every change taken, and a notice that comes later waits for the next read.
   */
  function takeMemberChanges (ids: readonly string[] | 'all'): Map<string, MemberChange> {
    const taken = new Map<string, MemberChange>()
    if (ids === 'all') memberChanges.clear()
    for (const id of ids === 'all' ? [] : ids) {
      const change = memberChanges.get(id)
      if (change === undefined) continue
      taken.set(id, change)
      memberChanges.delete(id)
    }
    return taken
  }

  function noteMembers (ids: readonly string[], named: ReadonlyArray<readonly [string, string | null, string]> | undefined) {
    const byOrganization = new Map<string, SortKey[]>()
    const valid = named !== undefined
    if (valid) {
      for (const [organization, position, id] of named) {
        const keys = byOrganization.get(organization) ?? []
        keys.push([position, id])
        byOrganization.set(organization, keys)
      }
    }
    for (const id of ids) {
      const before = memberChanges.get(id)
      const keys = byOrganization.get(id)
      const after = Array.isArray(before) ? [...before, ...keys ?? []] : keys
      if (!valid || after === undefined || before === 'whole' || after.length > MEMBER_KEYS_MAX) memberChanges.set(id, 'whole')
      else memberChanges.set(id, after)
    }
  }

  function noteChange (payload: string | undefined) {
    let notice: unknown
    try {
      notice = JSON.parse(payload ?? '')
    } catch {
      notice = undefined
    }
    // Anyone who can connect to the database can NOTIFY on the channel: a notice is checked before use.
    if (!checkNotice.Check(notice)) {
      tell((events) => events.ignored(`${quoteValue(payload)} is not a notice of the directory's triggers`))
      return
    }
    const kind = KIND_OF_TABLE.get(notice.table)
    if (notice.table === 'members') {
      const ids = notice.organization_ids ?? undefined
      if (ids !== undefined) noteMembers(ids, notice.members ?? undefined)
      tell((events) => events.changed('organizations', ids))
    } else if (kind === 'organizations' && 'ids' in notice) {
      const ids = notice.ids ?? undefined
      for (const id of ids ?? []) if (!memberChanges.has(id)) memberChanges.set(id, 'row')
      tell((events) => events.changed(kind, ids))
    } else if (kind === 'keys' && 'names' in notice) {
      const names = notice.names ?? undefined
      tell((events) => events.changed(kind, names))
    } else if (kind !== undefined) tell((events) => events.changed(kind))
  }

  function connectionLost (client: SocketClient, error: Error) {
    if (closed || client !== listening) return
    listening = undefined
    // Whatever cut this one (a server restart, a frozen network) took the reads' connections with it:
    // a read on one would wait for an answer that never comes.
    client.socket.destroy()
    for (const other of pooled) other.socket.destroy()
    tell((events) => events.following(false, new Error(`lost the connection to PostgreSQL at ${location} (${describe(error)})`)))
    void reconnect()
  }

  async function reconnect () {
    for (let attempt = 0; !closed && listening === undefined; attempt++) {
      await sleep(backoff(attempt))
      if (closed) return
      try {
        await listen(0)
      } catch {
        // Still unreachable: the loss was reported once; try again later.
      }
    }
    if (closed) return
    tell((events) => {
      events.following(true)
      // Whatever changed meanwhile was not notified to us: read everything.
      for (const kind of RECORD_KINDS) events.changed(kind)
    })
  }

  /** Runs `read` in a read-only REPEATABLE READ transaction: the rows it reads agree with each other. */
  async function inTransaction<T> (read: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    const client = await pool.connect()
    const { socket } = client as unknown as SocketClient
    socket.setTimeout(READ_STALL_MS)
    let broken = false
    // The connection cut between two queries (the server restarted or ended the session, a proxy
    // hung up): the client says so with an 'error' event, which the pool stops listening to while
    // the client is out, and which would end the process unheard. The next query fails instead.
    const lost = () => { broken = true }
    client.on('error', lost)
    try {
      await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY')
      const result = await read(client)
      await client.query('COMMIT')
      return result
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

  /**
   * Organizations and their members, and the rows read. `changes`: what the notices said of their
   * members (an organization not in it is read whole).
   */
  async function readOrganizations (client: pg.ClientBase, ids: readonly string[] | 'all', current: Snapshot | undefined, changes: ReadonlyMap<string, MemberChange>) {
    const before = current?.parts.organizations.byKey
    const refusals = new Refusals(before === undefined)
    const list = await readOrganizationList(client, ids, refusals)
    // Those whose members need not be read whole: their row alone changed, or a few members of a large one.
    const partly = new Map<string, SortKey[] | 'row'>()
    for (const [id, change] of changes) {
      const members = before?.get(id)?.members
      if (members === undefined || change === 'whole') continue
      if (change === 'row' || (boundsOf.has(members) && change.length <= MEMBER_KEYS_MAX)) partly.set(id, change)
    }
    const whole = ids === 'all' ? 'all' : ids.filter((id) => !partly.has(id))
    // The blocks of the organizations read again, for their new lists to share.
    const previous = before === undefined ? undefined : await blockIndex(whole === 'all' ? before.values() : whole.map((id) => before.get(id)))
    const { lists, count } = list.length > 0 && whole.length > 0 ? await readMembers(client, whole, refusals, previous) : { lists: new Map<string, MemberList>(), count: 0 }
    let rows = list.length + count
    const organizations: Organization[] = []
    const slicer = createSlicer()
    for (const { id, name } of list) {
      if (refusals.keys.has(id)) continue
      const change = partly.get(id)
      const old = before?.get(id)?.members
      let members = lists.get(id) ?? MemberList.of([])
      if (change === 'row') members = old!
      else if (change !== undefined) {
        try {
          // Too many blocks to read again: the organization whole.
          const around = await readAround(client, id, old!, change) ?? await readWhole(client, id, refusals, await blockIndex([before!.get(id)]))
          if (around === undefined) continue
          members = around.list
          rows += around.count
        } catch (error) {
          if (!(error instanceof DataError)) throw error
          refusals.refuse(id, error.message)
          continue
        }
      }
      // The same members in the same order: the snapshot keeps the list it has (snapshot.ts), whose
      // blocks may now end at other positions (renumbered in place). It takes the bounds just read.
      if (old !== undefined && old !== members && old.version === members.version) {
        const bounds = boundsOf.get(members)
        if (bounds === undefined) boundsOf.delete(old)
        else boundsOf.set(old, bounds)
      }
      // Ids are unique by the primary key: no check of our own, which would be one more pass over them all.
      organizations.push({ id, name, members })
      if (slicer.due()) await slicer.pause()
    }
    // A whole read keeps the version served of each organization refused; a read of ids leaves them out of its change.
    if (ids === 'all') for (const id of refusals.keys) { const last = before?.get(id); if (last !== undefined) organizations.push(last) }
    return { organizations, rows, refusals }
  }

  async function readKind (client: pg.ClientBase, job: Job): Promise<PartChange> {
    const { kind, keys, current } = job
    if (current === undefined) await checkSchema(client)
    switch (kind) {
      case 'providers': {
        const all = await readProviders(client)
        return { kind, all, rowsRead: all.length }
      }
      case 'endpoints': {
        const all = await readEndpoints(client)
        return { kind, all, rowsRead: all.length }
      }
      case 'keys': {
        return await readKeys(client, keys, current)
      }
      case 'organizations': {
        const { organizations, rows, refusals } = await readOrganizations(client, keys, current, job.memberChanges ?? new Map())
        if (keys === 'all') return { kind, all: organizations, rowsRead: rows, refused: refusals.problems }
        const present = new Set(organizations.map((organization) => organization.id))
        return { kind, upsert: organizations, remove: keys.filter((id) => !present.has(id) && !refusals.keys.has(id)), rowsRead: rows, refused: refusals.problems }
      }
    }
  }

  /**
   * The kinds asked for in the same turn (the notices of one transaction, the first load) are read
   * in one transaction, so that they agree with each other (a key and the organization it moved
   * to); the cheap ones first, each handed over as soon as it is read, so that a revocation read
   * with a large reload does not wait for it.
   */
  async function readBatch (jobs: Job[]) {
    // Named records first (a revocation), then whole kinds, each in READ_ORDER.
    jobs.sort((a, b) => Number(a.keys === 'all') - Number(b.keys === 'all') || READ_ORDER.indexOf(a.kind) - READ_ORDER.indexOf(b.kind))
    try {
      await inTransaction(async (client) => {
        for (const job of jobs) {
          try {
            job.resolve(await readKind(client, job))
          } catch (error) {
            // Bad data refuses its kind alone; anything else fails the transaction, and the rest.
            if (!(error instanceof DataError)) throw error
            job.reject(error)
          }
        }
      })
    } catch (error) {
      for (const job of jobs) job.reject(error)
    }
  }

  return {
    name: 'postgres',
    location,
    async read (kind, keys, current) {
      // Listening first: a change committed while a kind is read is notified, and read again.
      if (listening === undefined && events === undefined) await (connecting ??= listen(connectTimeoutMs))
      return await new Promise((resolve, reject) => {
        if (batch === undefined) {
          batch = []
          setImmediate(() => {
            const jobs = batch!
            batch = undefined
            void readBatch(jobs)
          })
        }
        if (kind !== 'organizations') {
          batch.push({ kind, keys, current, resolve: resolve as Job['resolve'], reject })
          return
        }
        const taken = takeMemberChanges(keys)
        batch.push({
          kind,
          keys,
          current,
          memberChanges: taken,
          resolve: resolve as Job['resolve'],
          reject (error) {
            // Not installed: what the notices said of their members is gone, so they are read whole next time.
            for (const id of taken.keys()) memberChanges.set(id, 'whole')
            reject(error)
          }
        })
      })
    },
    watch (handlers) {
      events = handlers
      if (earlyOverflow) for (const kind of RECORD_KINDS) handlers.changed(kind)
      for (const what of early.splice(0)) what(handlers)
    },
    async close () {
      closed = true
      // A graceful end, unless the connection does not answer.
      if (listening !== undefined) await Promise.race([listening.end().catch(() => {}), sleep(1000)])
      listening?.socket.destroy()
      await pool.end()
    }
  }
}
