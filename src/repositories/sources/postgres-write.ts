import type pg from 'pg'
import { type DirectoryData, type Loaded, type Records } from '../records.js'
import { KINDS, RECORD_KINDS, type RecordKind } from '../../registry.js'
import type { ApiKey } from '../../schemas/fixtures.js'
import { checkSchema } from './postgres-schema.js'
import { LIST_KINDS } from '../../registry.js'

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
function rowInserter (client: pg.ClientBase, table: string, columns: string[], before?: { flush(): Promise<void> }) {
  const list = columns.join(', ')
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
      await client.query(`INSERT INTO ${table} (${list}) SELECT ${list} FROM json_populate_recordset(NULL::${table}, $1::json)`, [JSON.stringify(rows)])
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
  await client.query('BEGIN')
  try {
    await checkSchema(client)
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
    const keys = rowInserter(client, 'keys', ['name', 'sha256', 'kind', 'organization_id', 'expires_at'])
    for await (const records of batches.keys) {
      for (const key of records) if (keys.push(key)) await keys.flush()
    }
    await keys.flush()
    await client.query('COMMIT')
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {})
    throw error
  }
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

/** Records a key; refuses a name already taken (revocation goes by name). */
export async function insertKey (client: pg.ClientBase, key: ApiKey) {
  await checkSchema(client)
  try {
    await client.query('INSERT INTO keys (name, sha256, kind, organization_id, expires_at) VALUES ($1, $2, $3, $4, $5)',
      [key.name, key.sha256, key.kind, key.organization_id, key.expires_at ?? null])
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

/**
 * Mints `successor` (of the same kind and organization as the key named `name`) and sets the old
 * key's expiry to now plus `graceMs` (to the second, as the commands print it), or keeps the one it
 * has when that is earlier: one transaction. Answers the old key's expiry (RFC 3339, UTC) and whether
 * it had expired already, or undefined when there is no key of that name.
 */
export async function rotateKey (client: pg.ClientBase, name: string, successor: Pick<ApiKey, 'name' | 'sha256' | 'expires_at'>, graceMs: number): Promise<{ kind: ApiKey['kind'], organization_id: string, expires_at: string, expired: boolean } | undefined> {
  await checkSchema(client)
  await client.query('BEGIN')
  try {
    // One rotation of a key at a time: another under way (its row locked) refuses this one, which would
    // otherwise wait, then mint a second successor of a key already rotated.
    await client.query('SELECT FROM keys WHERE name = $1 FOR UPDATE NOWAIT', [name]).catch((error: { code?: string }) => {
      if (error.code === '55P03') throw new Error(`another command is changing key ${JSON.stringify(name)} in table keys; nothing was written: try again once it ends`)
      throw error
    })
    // The row as it was comes from the FROM item: RETURNING sees only the new one.
    const { rows: [old] } = await client.query<{ kind: ApiKey['kind'], organization_id: string, expires_at: string, expired: boolean }>(
      `UPDATE keys SET expires_at = least(coalesce(keys.expires_at, 'infinity'), date_trunc('second', now() + $2 * interval '1 millisecond'))
        FROM (SELECT expires_at FROM keys WHERE name = $1) AS previous WHERE name = $1
        RETURNING kind, organization_id, to_json(keys.expires_at AT TIME ZONE 'UTC') #>> '{}' || 'Z' AS expires_at, coalesce(previous.expires_at <= now(), false) AS expired`, [name, graceMs])
    if (old === undefined) {
      await client.query('ROLLBACK')
      return undefined
    }
    await insertKey(client, { ...successor, kind: old.kind, organization_id: old.organization_id })
    await client.query('COMMIT')
    return old
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {})
    throw error
  }
}

/** Every key as a list shows it: name, kind, organization, expiry (RFC 3339, UTC), in the order of their names; never a hash. */
export async function listKeys (client: pg.ClientBase): Promise<Array<Omit<ApiKey, 'sha256'>>> {
  await checkSchema(client)
  const { rows } = await client.query<Omit<ApiKey, 'sha256'>>(`SELECT name, kind, organization_id, replace(to_json(expires_at AT TIME ZONE 'UTC') #>> '{}' || 'Z', '.000Z', 'Z') AS expires_at FROM keys ORDER BY name COLLATE "C"`)
  return rows.map(({ expires_at: expiresAt, ...key }) => expiresAt === null ? key : { ...key, expires_at: expiresAt })
}
