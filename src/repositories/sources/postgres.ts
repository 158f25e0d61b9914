import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { DataError, memberProblem, validateDirectory, validateRecords, type DirectoryData, type Organization, type RecordKind } from '../records.js'
import { MemberList, MemberListBuilder } from '../member-list.js'
import { quoteValue } from '../../schemas/describe-error.js'
import type { DirectorySource, SourceListener } from '../source.js'
import type { Member } from '../../schemas/member.js'
import { CHANNEL, checkSchema } from './postgres-schema.js'

/**
 * Notifications that arrive within this time of the first are applied together: a script's
 * burst of statements becomes one read, and a revocation still lands well within a second.
 */
const COALESCE_MS = 20

/** Reconnection waits 100 ms, then twice as long each time, up to this. */
const MAX_BACKOFF_MS = 5000

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
 * A connected client, retried while the server cannot be reached, for `timeoutMs` at most;
 * then an error naming the database (without its password) and the last cause.
 */
export async function connectPostgres (url: string, timeoutMs: number): Promise<pg.Client> {
  const deadline = Date.now() + timeoutMs
  for (let attempt = 0; ; attempt++) {
    // One attempt takes a second at least, even when less time is left: a shorter one would fail
    // against a server that is merely far away.
    const client = new pg.Client({ connectionString: url, types, keepAlive: true, connectionTimeoutMillis: Math.min(Math.max(deadline - Date.now(), 1000), 10000) })
    try {
      await client.connect()
      return client
    } catch (error) {
      await client.end().catch(() => {})
      const left = deadline - Date.now()
      if (!isTransient(error) || left <= 0) {
        throw new Error(`cannot connect to PostgreSQL at ${locationOf(url)}${isTransient(error) ? ` within ${timeoutMs} ms` : ''}: ${describe(error)}`)
      }
      await sleep(Math.min(backoff(attempt), left))
    }
  }
}

/** What changed since the last read; `full` reads everything. */
interface Pending {
  full: boolean
  tables: Set<'providers' | 'endpoints' | 'organizations' | 'keys'>
  /** Organizations whose members changed; `all` when the trigger could not list them. */
  members: Set<string> | 'all'
}

const nothingPending = (): Pending => ({ full: false, tables: new Set(), members: new Set() })

/** `where: [3].field: problem` becomes `table t, row key "x": field: problem`: the row, by its key. */
function locateRow (error: unknown, table: string, keyOf: (index: number) => string): never {
  if (!(error instanceof DataError)) throw error
  const match = /^[^:]+: \[(\d+)\]\.?(.*)$/.exec(error.message)
  if (!match) throw new DataError(`table ${table}: ${error.message.replace(/^[^:]+: /, '')}`)
  let rest = match[2]!
  // A key hash is a secret, whatever it holds: never echoed.
  if (table === 'keys' && rest.startsWith('sha256:')) rest = 'sha256: is not a lowercase hex SHA-256'
  throw new DataError(`table ${table}, row ${keyOf(Number(match[1]))}: ${rest}`)
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

async function readKeys (client: pg.ClientBase) {
  const { rows } = await client.query('SELECT name, sha256, kind, organization_id FROM keys ORDER BY name')
  try {
    return validateRecords('keys', rows, 'keys')
  } catch (error) {
    locateRow(error, 'keys', (index) => `name ${quoteValue(rows[index].name)}`)
  }
}

async function readOrganizationList (client: pg.ClientBase): Promise<Array<{ id: string, name: string }>> {
  const { rows } = await client.query('SELECT id, name FROM organizations ORDER BY position, id')
  return rows
}

/** Rows of members fetched at a time: a batch of member objects that dies young. */
const MEMBER_BATCH = 10_000

/**
 * The members of these organizations (of all when `all`), by organization: read in page order
 * through a cursor, MEMBER_BATCH rows at a time, each batch validated and compacted into its
 * organization's MemberList (member-list.ts) before the next is fetched, so that a million members
 * are never all rows or objects at once: the peak is the lists themselves and one batch. Blocks
 * equal to blocks of `shared` are shared with them. Runs inside read()'s transaction, which the
 * cursor lives in. Member ids are unique within their organization by the primary key
 * (organization_id, id), so the builder's own check, which costs more than the schema on a large
 * organization, would only say it again.
 */
async function readMembers (client: pg.ClientBase, ids: string[] | 'all', shared?: Iterable<MemberList>) {
  const lists = new Map<string, MemberList>()
  const columns = 'organization_id, id, email, first_name, last_name, role'
  const order = 'ORDER BY organization_id, position, id'
  await client.query(ids === 'all'
    ? `DECLARE member_rows NO SCROLL CURSOR FOR SELECT ${columns} FROM members ${order}`
    : { text: `DECLARE member_rows NO SCROLL CURSOR FOR SELECT ${columns} FROM members WHERE organization_id = ANY($1) ${order}`, values: [ids] })
  let builder: MemberListBuilder | undefined
  let listOf: string | undefined
  for (;;) {
    const { rows } = await client.query<string[]>({ text: `FETCH ${MEMBER_BATCH} FROM member_rows`, rowMode: 'array' })
    for (const row of rows) {
      if (row[0] !== listOf) {
        if (builder) lists.set(listOf!, builder.finish().list)
        listOf = row[0]!
        builder = new MemberListBuilder(shared, { checkIds: false })
      }
      // A member object is made once, in the field order of the files, without the organization's id.
      const member = { id: row[1]!, email: row[2]!, first_name: row[3]!, last_name: row[4]!, role: row[5] as Member['role'] }
      const problem = memberProblem(member, 0, 0)
      if (problem !== undefined) {
        // `[0].members[0].email: problem` becomes `table members, row …: email: problem`.
        throw new DataError(`table members, row organization_id ${quoteValue(listOf)}, id ${quoteValue(member.id)}: ${problem.replace(/^\[0\]\.members\[0\]\.?/, '')}`)
      }
      builder!.add(member)
    }
    if (rows.length < MEMBER_BATCH) break
  }
  if (builder) lists.set(listOf!, builder.finish().list)
  await client.query('CLOSE member_rows')
  return lists
}

/** Organizations (their members apart: readMembers checks them), against the schema. */
function validateOrganizations (organizations: ReadonlyArray<{ id: string, name: string }>) {
  try {
    validateRecords('organizations', organizations.map(({ id, name }) => ({ id, name, members: [] })), 'organizations')
  } catch (error) {
    locateRow(error, 'organizations', (index) => `id ${quoteValue(organizations[index]!.id)}`)
  }
}

const TABLES = { providers: 'table providers', endpoints: 'table endpoints', organizations: 'table organizations', keys: 'table keys' }

/**
 * The rules between records (validateDirectory) over the parts given. The unique constraints hold
 * them already; checking says so in the files' terms too.
 */
function validateUnique (data: DirectoryData) {
  validateDirectory(data, TABLES)
}

/**
 * The directory in a PostgreSQL database (the schema of postgres-schema.ts). Every replica reads a
 * snapshot at start, then LISTENs: the tables' triggers NOTIFY, at commit, which part changed, and
 * the replica reads that part again (in one REPEATABLE READ transaction, so the parts read agree)
 * and hands over a snapshot in which everything else is the very same objects as before.
 *
 * If the listening connection drops, the current data keeps serving, the connection is retried
 * with backoff, and everything is read again once it is back (notifications sent meanwhile are
 * lost); the change names how stale the data was.
 */
export function createPostgresSource ({ url, connectTimeoutMs }: { url: string, connectTimeoutMs: number }): DirectorySource {
  const location = locationOf(url)
  const pool = new pg.Pool({ connectionString: url, types, max: 2, keepAlive: true, connectionTimeoutMillis: 10000 })
  // An idle connection cut by the server: the pool drops it; the listening connection says what it means.
  pool.on('error', () => {})

  let current: DirectoryData | undefined
  let listener: SourceListener | undefined
  let listening: pg.Client | undefined
  let pending = nothingPending()
  let timer: NodeJS.Timeout | undefined
  let reading = false
  let failures = 0
  /** When the listening connection was lost, while it is. */
  let lostAt: number | undefined
  let closed = false

  async function listen (timeoutMs: number) {
    const client = await connectPostgres(url, timeoutMs)
    client.on('notification', (message) => noteChange(message.payload))
    client.on('error', (error) => connectionLost(client, error))
    client.on('end', () => connectionLost(client, new Error('the connection was closed')))
    try {
      await client.query(`LISTEN ${CHANNEL}`)
    } catch (error) {
      await client.end().catch(() => {})
      throw error
    }
    if (closed) await client.end()
    else listening = client
  }

  function noteChange (payload: string | undefined) {
    let change: { table?: string, organization_ids?: string[] | null }
    try {
      change = JSON.parse(payload ?? '')
    } catch {
      change = {}
    }
    const { table } = change
    if (table === 'members') {
      if (!change.organization_ids || pending.members === 'all') pending.members = 'all'
      else for (const id of change.organization_ids) pending.members.add(id)
    } else if (table === 'providers' || table === 'endpoints' || table === 'organizations' || table === 'keys') {
      pending.tables.add(table)
    } else {
      pending.full = true
    }
    schedule(COALESCE_MS)
  }

  function connectionLost (client: pg.Client, error: Error) {
    if (closed || client !== listening) return
    listening = undefined
    lostAt ??= Date.now()
    client.end().catch(() => {})
    listener?.reject(new Error(`lost the connection to PostgreSQL at ${location} (${describe(error)}); serving the last data read, reconnecting`), 'following changes')
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
    // Whatever changed meanwhile was not notified to us: read everything.
    pending.full = true
    schedule(0)
  }

  function schedule (delay: number) {
    if (closed || reading || timer !== undefined || listener === undefined) return
    timer = setTimeout(() => {
      timer = undefined
      void apply()
    }, delay)
  }

  /** Reads what `pending` names and hands the next snapshot to the listener. */
  async function apply () {
    const work = pending
    pending = nothingPending()
    if (!work.full && work.tables.size === 0 && work.members !== 'all' && work.members.size === 0) return
    reading = true
    const change = describeChange(work)
    try {
      const next = await read(work)
      if (!closed) {
        current = next
        failures = 0
        listener?.install(next, change)
      }
    } catch (error) {
      if (!closed) listener?.reject(error as Error, change)
      if (!(error instanceof DataError)) {
        // The read itself failed (the connection, not the data): try again, reading everything.
        pending.full = true
        failures++
      }
    } finally {
      reading = false
      if (pending.full || pending.tables.size > 0 || pending.members === 'all' || pending.members.size > 0) {
        schedule(failures > 0 ? backoff(failures) : COALESCE_MS)
      }
    }
  }

  function describeChange (work: Pending) {
    if (work.full) {
      if (lostAt === undefined) return 'full read'
      return `reconnected to PostgreSQL: full read; the data served was up to ${Date.now() - lostAt} ms stale`
    }
    const parts: string[] = [...work.tables]
    if (work.members === 'all') parts.push('members')
    else if (work.members.size > 0) parts.push(`members of ${[...work.members].slice(0, 5).join(', ')}${work.members.size > 5 ? ', …' : ''}`)
    return `${parts.join(', ')} changed`
  }

  async function read (work: Pending): Promise<DirectoryData> {
    const client = await pool.connect()
    let broken = false
    try {
      await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY')
      const next = work.full || current === undefined ? await readAll(client) : await readChanges(client, current, work)
      await client.query('COMMIT')
      if (work.full) lostAt = undefined
      return next
    } catch (error) {
      broken = true
      throw error
    } finally {
      // A connection left in a failed transaction (or a broken one) is closed, not reused.
      client.release(broken)
    }
  }

  async function readAll (client: pg.ClientBase): Promise<DirectoryData> {
    await checkSchema(client)
    const list = await readOrganizationList(client)
    validateOrganizations(list)
    const members = await readMembers(client, 'all')
    const organizations = list.map(({ id, name }) => ({ id, name, members: members.get(id) ?? MemberList.of([]) }))
    const data = {
      providers: await readProviders(client),
      endpoints: await readEndpoints(client),
      organizations,
      keys: await readKeys(client)
    }
    validateUnique(data)
    return data
  }

  /** The parts named read again; every other part is the same object as in `previous`. */
  async function readChanges (client: pg.ClientBase, previous: DirectoryData, work: Pending): Promise<DirectoryData> {
    const next: { -readonly [kind in RecordKind]: DirectoryData[kind] } = { ...previous }
    if (work.tables.has('providers')) next.providers = await readProviders(client)
    if (work.tables.has('endpoints')) next.endpoints = await readEndpoints(client)
    if (work.tables.has('keys')) next.keys = await readKeys(client)
    if (work.tables.has('organizations') || work.members === 'all' || work.members.size > 0) {
      next.organizations = await readOrganizations(client, previous.organizations, work)
    }
    validateUnique({
      providers: next.providers === previous.providers ? [] : next.providers,
      endpoints: [],
      organizations: next.organizations === previous.organizations ? [] : next.organizations,
      keys: next.keys === previous.keys ? [] : next.keys
    })
    return next
  }

  async function readOrganizations (client: pg.ClientBase, previous: readonly Organization[], work: Pending) {
    const before = new Map(previous.map((organization) => [organization.id, organization]))
    const list = work.tables.has('organizations') ? await readOrganizationList(client) : previous.map(({ id, name }) => ({ id, name }))
    // Members are read for the organizations named, and for those new to this replica.
    const stale = work.members === 'all'
      ? 'all'
      : list.filter(({ id }) => (work.members as Set<string>).has(id) || !before.has(id)).map(({ id }) => id)
    const reread = new Set(stale === 'all' ? list.map(({ id }) => id) : stale)
    const changed = list.filter(({ id }) => !before.has(id) || reread.has(id))
    validateOrganizations(changed)
    // Members of the previous snapshot that did not change are shared with it.
    const shared = previous.map((organization) => organization.members)
    const members = stale === 'all' || stale.length > 0 ? await readMembers(client, stale, shared) : new Map<string, MemberList>()
    const compacted = new Map(changed.map(({ id, name }) => [id, { id, name, members: members.get(id) ?? MemberList.of([]) }]))
    return list.map(({ id, name }): Organization => {
      const old = before.get(id)
      if (old && !reread.has(id)) return old.name === name ? old : { id, name, members: old.members }
      return compacted.get(id)!
    })
  }

  return {
    name: 'postgres',
    location,
    async load () {
      // Listening first: a change committed while the snapshot is read is notified, and read again.
      await listen(connectTimeoutMs)
      current = await read({ full: true, tables: new Set(), members: new Set() })
      return current
    },
    watch (handlers) {
      listener = handlers
      schedule(0)
    },
    reload () {
      pending.full = true
      schedule(0)
    },
    async close () {
      closed = true
      clearTimeout(timer)
      await listening?.end().catch(() => {})
      await pool.end()
    }
  }
}
