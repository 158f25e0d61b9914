import pg from 'pg'
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { copyRows, type TextRow } from '../../../src/repositories/sources/copy-rows.js'
import { sharedPostgres } from '../../postgres.js'

const server = sharedPostgres()
afterAll(() => server.close())

let client: pg.Client
beforeEach(async () => {
  client = new pg.Client({ connectionString: await server.createDatabase() })
  await client.connect()
})
afterEach(() => client.end())

async function all (query: string) {
  const rows: TextRow[] = []
  let batches = 0
  for await (const batch of copyRows(client, query)) {
    batches++
    rows.push(...batch)
  }
  return { rows, batches }
}

// Texts COPY's text form would escape, and some that take several bytes in UTF-8.
const ODD = ['', 'tab\there', 'new\nline', 'back\\slash', '\\N', 'clé', '名前', '😀 emoji']

describe('copyRows', () => {
  it('reads every row as a query does: NULLs, empty and multi-byte texts, rows cut between chunks', async () => {
    await client.query('CREATE TABLE t (n int, a text, b text)')
    await client.query('INSERT INTO t SELECT i, CASE WHEN i % 7 = 0 THEN NULL ELSE ($1::text[])[1 + i % $2] || i END, repeat(\'é\', i % 50) FROM generate_series(1, 20000) AS i', [ODD, ODD.length])
    // One row larger than any chunk.
    await client.query("INSERT INTO t VALUES (20001, repeat('long ', 100000), NULL)")
    const query = 'SELECT a, b FROM t ORDER BY n'
    const { rows, batches } = await all(query)
    expect(batches).toBeGreaterThan(1)
    expect(rows).toEqual((await client.query({ text: query, rowMode: 'array' })).rows)
    expect(rows.at(-1)![0]).toHaveLength(500_000)
  })

  it('reads rows of every size around a chunk\'s, small ones between them, each as a query does', async () => {
    // Values from a few bytes to a few hundred KiB: rows cut between chunks are joined, some within
    // a chunk's size and some past it, and a row begun in a joined chunk is cut again.
    await client.query('CREATE TABLE t (n int, a text)')
    await client.query(`INSERT INTO t SELECT i, CASE WHEN i % 10 = 0 THEN repeat(chr(97 + i % 26), (i * 7919) % 400000) ELSE 'small ' || i END
      FROM generate_series(1, 400) AS i`)
    const query = 'SELECT n::text, a FROM t ORDER BY n'
    const { rows, batches } = await all(query)
    expect(batches).toBeGreaterThan(10)
    expect(rows).toEqual((await client.query({ text: query, rowMode: 'array' })).rows)
  })

  it('reads a value of 50 MB, cut into hundreds of chunks, copying it a few times at most', async () => {
    // A row is joined from its chunks once they hold it, not at every chunk: some 20 GB were copied
    // for this one value, and a whole read ran into the statement timeout.
    const concat = vi.spyOn(Buffer, 'concat')
    try {
      const { rows } = await all("SELECT 'a', repeat('x', 50000000), 'b'")
      expect(rows).toHaveLength(1)
      expect(rows[0]![0]).toBe('a')
      expect(rows[0]![1]).toHaveLength(50_000_000)
      expect(rows[0]![2]).toBe('b')
      const copied = concat.mock.results.reduce((sum, { value }) => sum + (value as Buffer).length, 0)
      expect(copied).toBeLessThan(3 * 50_000_000)
    } finally {
      concat.mockRestore()
    }
  })

  it('reads no rows from an empty result', async () => {
    expect(await all('SELECT \'x\' WHERE false')).toEqual({ rows: [], batches: 0 })
  })

  it('leaves the connection and its transaction usable when left before the end', async () => {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY')
    let seen = 0
    for await (const batch of copyRows(client, 'SELECT i::text FROM generate_series(1, 200000) AS i')) {
      seen += batch.length
      break
    }
    expect(seen).toBeGreaterThan(0)
    expect(seen).toBeLessThan(200_000)
    expect((await client.query('SELECT 2 + 2 AS four')).rows).toEqual([{ four: 4 }])
    await client.query('COMMIT')
    expect((await all('SELECT \'after\'')).rows).toEqual([['after']])
  })

  it('fails with the server\'s error when the query fails halfway, and the connection goes on', async () => {
    const failing = copyRows(client, 'SELECT (1 / (100000 - i))::text FROM generate_series(1, 200000) AS i')
    let seen = 0
    await expect((async () => { for await (const batch of failing) seen += batch.length })()).rejects.toThrow('division by zero')
    expect(seen).toBeGreaterThan(0)
    expect((await client.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }])
  })
})
