import net from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { Type } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import pg from 'pg'
import { DataError, KINDS, RECORD_KINDS, assertUnique, memberProblem, recordProblem, type Organization, type RecordKind } from '../records.js'
import { createSlicer } from '../slices.js'
import { MemberList } from '../member-list.js'
import { KeyTableBuilder } from '../key-table.js'
import { quoteValue } from '../../schemas/describe-error.js'
import { backoff, type Change, type ReadRequest, type Source, type SourceEvents } from '../source.js'
import type { ApiKey } from '../../schemas/fixtures.js'
import type { Member } from '../../schemas/member.js'
import { CHANNEL, LIST_KINDS, checkSchema } from './postgres-schema.js'
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
      const wait = Math.min(backoff(attempt, MAX_BACKOFF_MS), left)
      onRetry?.(`cannot connect to PostgreSQL at ${locationOf(url)} (try ${attempt + 1}: ${describe(error)}); trying again in ${Math.round(wait)} ms`)
      await sleep(wait)
    }
  }
}

/** A bad row's message: `table t, row key "x": field: problem`, from recordProblem's `[3].field: problem`. */
function rowMessage (problem: string, table: string, row: string): string {
  let rest = problem.replace(/^\[\d+\]\.?/, '')
  // A key hash is a secret, whatever it holds: never echoed.
  if (table === 'keys' && rest.startsWith('sha256:')) rest = 'sha256: is not a lowercase hex SHA-256'
  return `table ${table}, row ${row}: ${rest}`
}

/** Where a read puts the records it refuses one by one, by key: each keeps the version served. */
type Refusals = Map<string, string>

/**
 * A kind served as a whole list: every document of its table, in list order, validated with the
 * kind's compiled schema, as a file's records are. A bad one refuses the list, naming its row.
 */
async function readList (client: pg.ClientBase, kind: RecordKind): Promise<Change> {
  const { table, key } = KINDS[kind]
  const { rows } = await client.query<{ id: number, document: unknown }>(`SELECT id, document FROM ${table} ORDER BY position, id`)
  const slicer = createSlicer()
  const records: unknown[] = []
  for (const [index, { id, document }] of rows.entries()) {
    const problem = recordProblem(kind, document, index)
    if (problem !== undefined) {
      const named = key === undefined ? undefined : (document as Record<string, unknown> | null)?.[key]
      throw new DataError(rowMessage(problem, table, typeof named === 'string' ? `${key} ${quoteValue(named)}` : `id ${id}`))
    }
    records.push(document)
    if (slicer.due()) await slicer.pause()
  }
  try {
    assertUnique(kind, records as never, table)
  } catch (error) {
    throw new DataError(`table ${(error as Error).message}`)
  }
  return { kind, all: records, rowsRead: rows.length } as Change
}

/**
 * The rows of a query of text columns, in batches: a whole table (no values) by COPY, a chunk at a
 * time, which costs less than a cursor (docs/postgresql.md says by how much); the rows a notice names
 * (at most 10,000 names) in one query, since COPY takes no parameters.
 */
async function * rowsOf (client: pg.ClientBase, query: { text: string, values?: unknown[] }): AsyncGenerator<TextRow[]> {
  if (query.values === undefined) yield * copyRows(client, query.text)
  else yield (await client.query<TextRow>({ ...query, rowMode: 'array' })).rows
}

/**
 * Keys, all or those of these names, validated; a bad row is refused alone. Every key is built
 * into a KeyTable as it is read (key-table.ts): never a million objects at once.
 */
async function readKeys (client: pg.ClientBase, names: readonly string[] | 'all'): Promise<Change<'keys'>> {
  const columns = 'SELECT name, sha256, kind, organization_id FROM keys'
  const refused: Refusals = new Map()
  // Sized once for the rows PostgreSQL expects, instead of growing from nothing.
  const table = names === 'all' ? new KeyTableBuilder('table keys', await estimatedKeys(client)) : undefined
  const found: ApiKey[] = []
  let index = 0
  // In no order: a key table has none, and reading the table in its own order spares an index scan.
  const query = names === 'all' ? { text: columns } : { text: `${columns} WHERE name = ANY($1)`, values: [names] }
  for await (const rows of rowsOf(client, query)) {
    for (const [name, sha256, kind, organization] of rows as string[][]) {
      const key = { name: name!, sha256: sha256!, kind: kind as ApiKey['kind'], organization_id: organization! }
      const problem = recordProblem('keys', key, index++)
      if (problem !== undefined) refused.set(name!, rowMessage(problem, 'keys', `name ${quoteValue(name)}`))
      else if (table !== undefined) table.add(key)
      else found.push(key)
    }
  }
  if (table !== undefined) return { kind: 'keys', all: table.finish(), rowsRead: index, refused }
  const present = new Set(found.map((key) => key.name))
  return { kind: 'keys', upsert: found, remove: (names as readonly string[]).filter((name) => !present.has(name) && !refused.has(name)), rowsRead: index, refused }
}

/** The most keys a whole read sizes its table for before reading them: 4 times the gateway's million. */
const ESTIMATE_TRUSTED = 4_000_000

/**
 * The rows of table keys as PostgreSQL last estimated them (ANALYZE, autovacuum), or undefined when it
 * never did (-1) or when the estimate is past what is trusted with the memory it would take at once.
 */
async function estimatedKeys (client: pg.ClientBase): Promise<number | undefined> {
  const { rows: [row] } = await client.query<{ rows: string }>("SELECT reltuples::bigint AS rows FROM pg_class WHERE oid = 'keys'::regclass")
  const estimate = Number(row?.rows)
  return estimate > 0 && estimate <= ESTIMATE_TRUSTED ? estimate : undefined
}

/** A member row, in array mode: organization_id, id, email, first_name, last_name, role. */
const MEMBER_COLUMNS = 'organization_id, id, email, first_name, last_name, role'
const PAGE_ORDER = 'ORDER BY organization_id, position, id'

/**
 * Organizations and their members, all or those of these ids, validated; an organization with a bad
 * row (its own or a member's) is refused alone. Members are read in page order a batch at a time,
 * and each organization's are compacted into its MemberList (member-list.ts) as soon as they are
 * all read: a million members are never all rows or objects at once.
 */
async function readOrganizations (client: pg.ClientBase, ids: readonly string[] | 'all'): Promise<Change<'organizations'>> {
  const refused: Refusals = new Map()
  const names = new Map<string, string>()
  const query = ids === 'all'
    ? { text: 'SELECT id, name FROM organizations ORDER BY position, id' }
    : { text: 'SELECT id, name FROM organizations WHERE id = ANY($1) ORDER BY position, id', values: [ids] }
  let rows = 0
  for await (const batch of rowsOf(client, query)) {
    for (const [id, name] of batch as Array<[string, string]>) {
      const problem = recordProblem('organizations', { id, name, members: [] }, rows++)
      if (problem === undefined) names.set(id, name)
      else refused.set(id, rowMessage(problem, 'organizations', `id ${quoteValue(id)}`))
    }
  }
  const lists = new Map<string, MemberList>()
  const memberQuery = ids === 'all'
    ? { text: `SELECT ${MEMBER_COLUMNS} FROM members ${PAGE_ORDER}` }
    : { text: `SELECT ${MEMBER_COLUMNS} FROM members WHERE organization_id = ANY($1) ${PAGE_ORDER}`, values: [ids] }
  let members: Member[] = []
  let of: string | undefined
  const finish = () => {
    // Ids are unique within their organization by the primary key (organization_id, id).
    if (of !== undefined && !refused.has(of)) lists.set(of, MemberList.of(members))
    members = []
  }
  const slicer = createSlicer()
  for await (const batch of rowsOf(client, memberQuery)) {
    rows += batch.length
    for (const row of batch) {
      const organization = row[0]!
      if (organization !== of) {
        finish()
        of = organization
      }
      if (refused.has(organization)) continue
      const member = { id: row[1]!, email: row[2]!, first_name: row[3]!, last_name: row[4]!, role: row[5] as Member['role'] }
      const problem = memberProblem(member, 0, 0)
      if (problem === undefined) members.push(member)
      else refused.set(organization, rowMessage(problem.replace(/^\[0\]\.members\[0\]\.?/, ''), 'members', `organization_id ${quoteValue(organization)}, id ${quoteValue(member.id)}`))
      // A batch is a chunk of a COPY, or every row of the organizations a notice named, however many.
      if (slicer.due()) await slicer.pause()
    }
  }
  finish()
  const organizations: Organization[] = []
  for (const [id, name] of names) {
    if (!refused.has(id)) organizations.push({ id, name, members: lists.get(id) ?? EMPTY })
  }
  if (ids === 'all') return { kind: 'organizations', all: organizations, rowsRead: rows, refused }
  return { kind: 'organizations', upsert: organizations, remove: ids.filter((id) => !names.has(id) && !refused.has(id)), rowsRead: rows, refused }
}

const EMPTY = MemberList.of([])

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
    // What the triggers of schema version 3 sent besides (organization, position, id of each member
    // named): still a notice of ours, though no replica reads it since version 4.
    members: Type.Optional(Type.Union([Type.Array(Type.Tuple([NoticeName, Type.Union([Type.String({ pattern: '^-?[0-9]{1,19}$' }), Type.Null()]), NoticeName]), { maxItems: 1000 }), Type.Null()]))
  }),
  ...LIST_KINDS.map((kind) => Type.Object({ table: Type.Literal(KINDS[kind].table) }))
]))

const KIND_OF_TABLE = new Map<string, RecordKind>(RECORD_KINDS.map((kind) => [KINDS[kind].table, kind]))

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
      tell((events) => events.changed('organizations', ids))
    } else if ('ids' in notice) {
      tell((events) => events.changed('organizations', notice.ids ?? undefined))
    } else if ('names' in notice) {
      tell((events) => events.changed('keys', notice.names ?? undefined))
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
      await sleep(backoff(attempt, MAX_BACKOFF_MS))
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

  /** One request of a read, in the read's transaction. */
  async function readKind (client: pg.ClientBase, { kind, keys }: ReadRequest): Promise<Change> {
    switch (KINDS[kind].held) {
      case 'list': return await readList(client, kind)
      case 'keys': return await readKeys(client, keys)
      case 'organizations': return await readOrganizations(client, keys)
    }
  }

  return {
    name: 'postgres',
    location,
    async read (requests) {
      // Listening first: a change committed while a kind is read is notified, and read again.
      if (listening === undefined && events === undefined) await (connecting ??= listen(connectTimeoutMs))
      // One transaction: the kinds read agree with each other (a key and the organization it moved to).
      return await inTransaction(async (client) => {
        await checkSchema(client)
        const sourceVersion = (await client.query<{ snapshot: string }>('SELECT txid_current_snapshot()::text AS snapshot')).rows[0]?.snapshot
        const changes: Array<Change | DataError> = []
        for (const request of requests) {
          // Bad data refuses its kind alone; anything else fails the transaction, and the read.
          changes.push(await readKind(client, request).then((change) => ({ ...change, sourceVersion }), (error: unknown) => {
            if (error instanceof DataError) return error
            throw error
          }))
        }
        return changes
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
