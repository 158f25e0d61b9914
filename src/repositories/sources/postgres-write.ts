import type pg from 'pg'
import { type DirectoryData, type Loaded, type Records } from '../records.js'
import { KINDS, LIST_KINDS, RECORD_KINDS, type RecordKind } from '../../registry.js'
import type { ApiKey } from '../../schemas/keys-and-organizations.js'
import { checkSchema, inTransaction } from './postgres-schema.js'
import { KEY_SELECT, keyOfRow } from './postgres.js'

/**
 * Rows per INSERT: a million members go in 50 statements, each a JSON array PostgreSQL turns into
 * rows itself (json_populate_recordset, which maps fields to columns by name), with no SQL to
 * build per row and no statement too large to send.
 */
const BATCH = 20000

/**
 * Rows of a table in batches of BATCH, however they come: push() says when a batch is full, and
 * flush() inserts what is gathered, after what `before` inserts.
 */
function rowInserter (client: pg.ClientBase, table: string, columns: string[], before?: { flush(): Promise<void> }, values = columns) {
  const list = columns.join(', ')
  const selected = values.join(', ')
  let batch: object[] = []
  return {
    push (row: object): boolean {
      return batch.push(row) === BATCH
    },
    async flush () {
      await before?.flush()
      if (batch.length === 0) return
      const rows = batch
      batch = []
      await client.query(`INSERT INTO ${table} (${list}) SELECT ${selected} FROM json_populate_recordset(NULL::${table}, $1::json)`, [JSON.stringify(rows)])
    }
  }
}

/** A kind's records, in order, a batch at a time: a DirectoryData's arrays, or a file's records as they are read. */
type Batches<K extends RecordKind> = AsyncIterable<ReadonlyArray<Loaded<K> | Records<K>[number]>> | Iterable<ReadonlyArray<Loaded<K> | Records<K>[number]>>

/** Each kind's records, in order, a batch at a time. */
export type DirectoryBatches = { readonly [K in RecordKind]: Batches<K> }

/**
 * Replaces every row of the directory's tables with `data` (validated by the caller), in one
 * transaction: all of it or nothing. Each list keeps its order in the `position` column. The
 * replicas are notified once, at commit, and read everything again.
 */
export async function replaceDirectory (client: pg.ClientBase, data: DirectoryData | DirectoryBatches) {
  const batches = Object.fromEntries(RECORD_KINDS.map((kind) => {
    const records = data[kind]
    return [kind, Array.isArray(records) ? [records] : records]
  })) as unknown as DirectoryBatches
  await inTransaction(client, async () => {
    await checkSchema(client)
    // The keys' history says these changes came of an import (key_history_record).
    await client.query("SET LOCAL directory.key_reason = 'import'")
    // DELETE, not TRUNCATE: TRUNCATE is not MVCC-safe. A replica's REPEATABLE READ transaction whose
    // snapshot was taken before this one commits would see the truncated tables empty, and serve no
    // keys (every request a 401) or no providers until the next change (the reload storm test).
    for (const table of ['keys', 'members', 'organizations', ...LIST_KINDS.map((kind) => KINDS[kind].table)]) await client.query(`DELETE FROM ${table}`)
    for (const kind of LIST_KINDS) {
      // Each record the document it is, in its place in the list.
      let position = 0
      for await (const records of batches[kind]) {
        await client.query(`INSERT INTO ${KINDS[kind].table} (position, document)
          SELECT $2::bigint + position - 1, document FROM json_array_elements($1::json) WITH ORDINALITY AS records (document, position)`, [JSON.stringify(records), position])
        position += records.length
      }
    }
    await insertOrganizations(client, batches.organizations)
    const keys = rowInserter(client, 'keys', KEY_ROW_COLUMNS, undefined, KEY_ROW_COLUMNS.map((column) => column === 'disabled' ? 'coalesce(disabled, false)' : column))
    for await (const records of batches.keys) {
      for (const key of records) if (keys.push(keyRow(key))) await keys.flush()
    }
    await keys.flush()
  })
  // Statistics now, not when autovacuum comes by: the replicas' reads of the members of one
  // organization are then index scans in page order, not a sort of the whole table.
  await client.query(`ANALYZE ${[...LIST_KINDS.map((kind) => KINDS[kind].table), 'organizations', 'members', 'keys'].join(', ')}`)
}

/**
 * The organizations and their members, each in batches across organizations (a statement per
 * organization fired the members trigger a hundred thousand times, most of an import's time); the
 * organizations of a batch of members are inserted before it.
 */
async function insertOrganizations (client: pg.ClientBase, batches: Batches<'organizations'>) {
  const organizations = rowInserter(client, 'organizations', ['id', 'position', 'name'])
  // The members' foreign key: their organizations go in first.
  const members = rowInserter(client, 'members', ['organization_id', 'id', 'position', 'email', 'first_name', 'last_name', 'role'], organizations)
  let position = 0
  for await (const records of batches) {
    for (const { id, name, members: list } of records) {
      if (organizations.push({ id, position: position++, name })) await organizations.flush()
      // A MemberList makes member objects on demand: a batch of them at a time.
      for (let start = 0; start < list.length; start += BATCH) {
        const chunk = list.slice(start, start + BATCH)
        for (let k = 0; k < chunk.length; k++) {
          if (members.push({ ...chunk[k], organization_id: id, position: start + k })) await members.flush()
        }
      }
    }
  }
  await members.flush()
}

/** The columns of a key's row, as keyRow names them. */
const KEY_ROW_COLUMNS = ['name', 'sha256', 'kind', 'organization_id', 'expires_at', 'disabled', 'rate_limit_per_minute', 'previous_sha256', 'previous_expires_at']

/** A key record as its row: the previous secret in two columns. */
function keyRow (key: ApiKey) {
  return {
    name: key.name,
    sha256: key.sha256,
    kind: key.kind,
    organization_id: key.organization_id,
    expires_at: key.expires_at ?? null,
    disabled: key.disabled === true,
    rate_limit_per_minute: key.rate_limit_per_minute ?? null,
    previous_sha256: key.previous?.sha256 ?? null,
    previous_expires_at: key.previous?.expires_at ?? null
  }
}

/** `$1, $2, ...` for the columns of a key's row. */
const KEY_ROW_PARAMETERS = KEY_ROW_COLUMNS.map((_, index) => `$${index + 1}`).join(', ')

/** Records a key; refuses a name already taken (the commands go by name). */
export async function insertKey (client: pg.ClientBase, key: ApiKey) {
  await checkSchema(client)
  try {
    await client.query(`INSERT INTO keys (${KEY_ROW_COLUMNS.join(', ')}) VALUES (${KEY_ROW_PARAMETERS})`, Object.values(keyRow(key)))
  } catch (error) {
    if ((error as { constraint?: string }).constraint === 'keys_pkey') throw new Error(`a key named ${JSON.stringify(key.name)} exists already in table keys`)
    throw error
  }
}

/** Deletes the key of that name; false when there is none. */
export async function deleteKey (client: pg.ClientBase, name: string) {
  await checkSchema(client)
  const { rowCount } = await client.query('DELETE FROM keys WHERE name = $1', [name])
  return rowCount === 1
}

/** Whether an organization of that id exists. */
export async function organizationExists (client: pg.ClientBase, id: string) {
  const { rowCount } = await client.query('SELECT 1 FROM organizations WHERE id = $1', [id])
  return rowCount === 1
}

/** The database's now(), in ms since the epoch: the clock the replicas judge expiries by. */
export async function databaseNow (client: pg.ClientBase): Promise<number> {
  const { rows: [clock] } = await client.query<{ now: string }>('SELECT extract(epoch FROM now()) * 1000 AS now')
  return Number(clock!.now)
}

/**
 * Changes the key named `name` as `change` says, given the key as it is and the database's now() (ms
 * since the epoch, the clock the replicas judge expiries by), in one transaction holding its row:
 * another command changing the key at once is refused in one line rather than waited for (it would
 * then change a key already changed). Answers the key before and after, or undefined when there is none.
 */
export async function updateKey (client: pg.ClientBase, name: string, change: (key: ApiKey, now: number) => ApiKey): Promise<{ before: ApiKey, after: ApiKey } | undefined> {
  await checkSchema(client)
  return await inTransaction(client, async () => {
    const { rows } = await client.query<string[]>({ text: `${KEY_SELECT} WHERE name = $1 FOR UPDATE NOWAIT`, values: [name], rowMode: 'array' }).catch((error: { code?: string }) => {
      if (error.code === '55P03') throw new Error(`another command is changing key ${JSON.stringify(name)} in table keys; nothing was written: try again once it ends`)
      throw error
    })
    if (rows[0] === undefined) return undefined
    const before = keyOfRow(rows[0]).key
    const after = change(before, await databaseNow(client))
    // A change to what the key holds already (a second disable) writes nothing: no entry, no replica woken.
    if (JSON.stringify(keyRow(after)) === JSON.stringify(keyRow(before))) return { before, after }
    await client.query(`UPDATE keys SET (${KEY_ROW_COLUMNS.join(', ')}) = ROW(${KEY_ROW_PARAMETERS}) WHERE name = $${KEY_ROW_COLUMNS.length + 1}`, [...Object.values(keyRow(after)), name])
    return { before, after }
  })
}

/**
 * Removes the keys whose expiry is before `before` (ms since the epoch), and the previous secrets whose
 * end is, in one transaction; the history says "pruned". Answers how many of each.
 */
export async function pruneKeys (client: pg.ClientBase, before: number): Promise<{ keys: number, secrets: number }> {
  await checkSchema(client)
  return await inTransaction(client, async () => {
    await client.query("SET LOCAL directory.key_reason = 'prune'")
    const at = new Date(before).toISOString()
    const { rowCount: keys } = await client.query('DELETE FROM keys WHERE expires_at < $1', [at])
    const { rowCount: secrets } = await client.query('UPDATE keys SET previous_sha256 = NULL, previous_expires_at = NULL WHERE previous_expires_at < $1', [at])
    return { keys: keys ?? 0, secrets: secrets ?? 0 }
  })
}

/** An entry of a key's history, as npm run key -- history shows it. */
export interface HistoryEntry {
  /** RFC 3339, UTC. */
  at: string
  /** Null: every key (a TRUNCATE). */
  name: string | null
  action: string
  /** The fields changed, each [before, after], or those minted with. */
  changes: Record<string, unknown> | null
  /** Who: the database role (and its client), or the OS user for files. */
  by: string
}

/** The last `limit` entries of the history, of the key named `name` or of all, oldest first, and how many there are in all. */
export async function keyHistory (client: pg.ClientBase, name: string | undefined, limit: number): Promise<{ entries: HistoryEntry[], total: number }> {
  await checkSchema(client)
  const where = name === undefined ? '' : 'WHERE name = $2'
  const { rows } = await client.query<HistoryEntry & { total: string }>(`SELECT * FROM (
      SELECT to_json(at AT TIME ZONE 'UTC') #>> '{}' || 'Z' AS at, name, action, changes,
        role || coalesce(' (' || client || ')', '') AS by, count(*) OVER () AS total, id
      FROM key_history ${where} ORDER BY id DESC LIMIT $1) AS last ORDER BY id`, name === undefined ? [limit] : [limit, name])
  return { entries: rows.map(({ total: _total, id: _id, ...entry }: HistoryEntry & { total: string, id?: string }) => entry), total: Number(rows[0]?.total ?? 0) }
}

/** Every key as a list shows it: in the order of their names, never a hash (a previous secret's end only). */
export async function listKeys (client: pg.ClientBase): Promise<ApiKey[]> {
  await checkSchema(client)
  const { rows } = await client.query<string[]>({ text: `${KEY_SELECT} ORDER BY name COLLATE "C"`, rowMode: 'array' })
  return rows.map((row) => keyOfRow(row).key)
}
