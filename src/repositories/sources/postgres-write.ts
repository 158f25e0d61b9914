import type pg from 'pg'
import { KINDS, type DirectoryData } from '../records.js'
import type { ApiKey } from '../../schemas/fixtures.js'
import { LIST_KINDS, checkSchema } from './postgres-schema.js'

/**
 * Rows per INSERT: a million members go in 50 statements, each a JSON array PostgreSQL turns into
 * rows itself (json_populate_recordset, which maps fields to columns by name), with no SQL to
 * build per row and no statement too large to send.
 */
const BATCH = 20000

async function insertRows (client: pg.ClientBase, table: string, columns: string[], rows: Iterable<object>) {
  const list = columns.join(', ')
  const insert = (batch: object[]) => client.query(
    `INSERT INTO ${table} (${list}) SELECT ${list} FROM json_populate_recordset(NULL::${table}, $1::json)`,
    [JSON.stringify(batch)]
  )
  let batch: object[] = []
  for (const row of rows) {
    batch.push(row)
    if (batch.length === BATCH) {
      await insert(batch)
      batch = []
    }
  }
  if (batch.length > 0) await insert(batch)
}

/**
 * The members of every organization as rows, in batches across organizations: a statement per
 * organization fired the members trigger a hundred thousand times, most of an import's time.
 */
function * memberRows (organizations: DirectoryData['organizations']) {
  for (const { id, members } of organizations) {
    // A MemberList makes member objects on demand: a batch of them at a time.
    for (let start = 0; start < members.length; start += BATCH) {
      const chunk = members.slice(start, start + BATCH)
      for (let k = 0; k < chunk.length; k++) yield { ...chunk[k], organization_id: id, position: start + k }
    }
  }
}

/**
 * Replaces every row of the directory's tables with `data` (validated by the caller), in one
 * transaction: all of it or nothing. Each list keeps its order in the `position` column. The
 * replicas are notified once, at commit, and read everything again.
 */
export async function replaceDirectory (client: pg.ClientBase, data: DirectoryData) {
  await client.query('BEGIN')
  try {
    await checkSchema(client)
    // DELETE, not TRUNCATE: TRUNCATE is not MVCC-safe. A replica's REPEATABLE READ transaction whose
    // snapshot was taken before this one commits would see the truncated tables empty, and serve no
    // keys (every request a 401) or no providers until the next change (the reload storm test).
    for (const table of ['keys', 'members', 'organizations', ...LIST_KINDS.map((kind) => KINDS[kind].table)]) await client.query(`DELETE FROM ${table}`)
    for (const kind of LIST_KINDS) {
      // Each record the document it is, in its place in the list.
      await client.query(`INSERT INTO ${KINDS[kind].table} (position, document)
        SELECT position - 1, document FROM json_array_elements($1::json) WITH ORDINALITY AS records (document, position)`, [JSON.stringify(data[kind])])
    }
    await insertRows(client, 'organizations', ['id', 'position', 'name'],
      data.organizations.map(({ id, name }, position) => ({ id, position, name })))
    await insertRows(client, 'members', ['organization_id', 'id', 'position', 'email', 'first_name', 'last_name', 'role'], memberRows(data.organizations))
    await insertRows(client, 'keys', ['name', 'sha256', 'kind', 'organization_id', 'expires_at'], data.keys)
    await client.query('COMMIT')
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {})
    throw error
  }
  // Statistics now, not when autovacuum comes by: the replicas' reads of the members of one
  // organization are then index scans in page order, not a sort of the whole table.
  await client.query(`ANALYZE ${[...LIST_KINDS.map((kind) => KINDS[kind].table), 'organizations', 'members', 'keys'].join(', ')}`)
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
 * key's expiry to now plus `graceMs`, or keeps the one it has when that is earlier: one transaction.
 * Answers the old key's expiry, or undefined when there is no key of that name.
 */
export async function rotateKey (client: pg.ClientBase, name: string, successor: Pick<ApiKey, 'name' | 'sha256' | 'expires_at'>, graceMs: number): Promise<{ kind: ApiKey['kind'], organization_id: string, expires_at: string } | undefined> {
  await checkSchema(client)
  await client.query('BEGIN')
  try {
    const { rows: [old] } = await client.query<{ kind: ApiKey['kind'], organization_id: string, expires_at: string }>(
      `UPDATE keys SET expires_at = least(coalesce(expires_at, 'infinity'), now() + $2 * interval '1 millisecond') WHERE name = $1
        RETURNING kind, organization_id, to_json(expires_at) #>> '{}' AS expires_at`, [name, graceMs])
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
