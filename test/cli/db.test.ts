import { execFile } from 'node:child_process'
import { cp, mkdtemp, readFile, readdir, rm, stat, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { promisify } from 'node:util'
import pg from 'pg'
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest'
import { BUNDLED_FIXTURES_DIR } from '../../src/config.js'
import { DATA_FILES, loadDataFolder } from '../../src/repositories/sources/files.js'
import { countRecords, describeCounts, type DirectoryData } from '../../src/repositories/records.js'
import { KINDS } from '../../src/registry.js'
import { SCHEMA_VERSION, listTableSql, migrate } from '../../src/repositories/sources/postgres-schema.js'
import { makeData, makeMembers, makeProvider, sha256 } from '../helper.js'
import { MAX_FILE_BYTES } from '../../src/repositories/json-file.js'
import { JsonChecker } from '../../src/repositories/json-syntax.js'
import { MAX_MEMBERS } from '../../src/repositories/member-list.js'
import { createPostgresSource } from '../../src/repositories/sources/postgres.js'
import { DROP_KEY_CHECKS, sharedPostgres } from '../postgres.js'

/** Every migration of this build, in order. */
const VERSIONS = Array.from({ length: SCHEMA_VERSION }, (_, i) => i + 1)

const run = promisify(execFile)
const db = (url: string | undefined, ...args: string[]) =>
  run(process.execPath, ['dist/cli/db.js', ...args], { env: { PATH: process.env.PATH ?? '', ...(url ? { DATABASE_URL: url } : {}), DATABASE_CONNECT_TIMEOUT_MS: '0' } })

async function writeData (dir: string, data: DirectoryData) {
  for (const kind of Object.keys(DATA_FILES) as Array<keyof DirectoryData>) {
    await writeFile(join(dir, DATA_FILES[kind]), JSON.stringify(data[kind]))
  }
}

async function readData (dir: string) {
  const entries = await Promise.all((Object.keys(DATA_FILES) as Array<keyof DirectoryData>).map(async (kind) =>
    [kind, JSON.parse(await readFile(join(dir, DATA_FILES[kind]), 'utf8'))]))
  return Object.fromEntries(entries)
}

const server = sharedPostgres()
afterAll(() => server.close())

let url: string
let dir: string
beforeEach(async () => {
  url = await server.createDatabase()
  dir = await mkdtemp(join(tmpdir(), 'db-cli-'))
})
afterEach(() => rm(dir, { recursive: true, force: true }))

async function query (sql: string, values: unknown[] = []) {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return await client.query(sql, values)
  } finally {
    await client.end()
  }
}

describe('npm run db -- migrate', () => {
  it('creates the schema, then finds nothing left to do', async () => {
    expect((await db(url, 'migrate')).stderr).toContain(`applied version ${VERSIONS.join(', ')}`)
    expect((await db(url, 'migrate')).stderr).toContain('is up to date')
    const { rows } = await query('SELECT version FROM schema_migrations')
    expect(rows).toEqual(VERSIONS.map((version) => ({ version })))
  })

  it('is safe when several replicas or Jobs run it at once', async () => {
    const results = await Promise.all(Array.from({ length: 4 }, () => db(url, 'migrate')))
    expect(results.filter(({ stderr }) => stderr.includes(`applied version ${VERSIONS.join(', ')}`))).toHaveLength(1)
    expect(results.filter(({ stderr }) => stderr.includes('is up to date'))).toHaveLength(3)
  })

  it('refuses in one line, applying nothing, a migration whose file was edited after it was applied', async () => {
    const client = new pg.Client({ connectionString: url })
    await client.connect()
    try {
      await migrate(client, 7)
    } finally {
      await client.end()
    }
    await copyBuild(dir)
    const [edited] = (await readdir(join(dir, 'migrations'))).filter((file) => file.startsWith('0007-'))
    await writeFile(join(dir, 'migrations', edited!), '-- A comment added after it shipped.\n', { flag: 'a' })
    const error = await run(process.execPath, [join(dir, 'dist/cli/db.js'), 'migrate'], { env: { PATH: process.env.PATH ?? '', DATABASE_URL: url } })
      .catch((failure: { code: number, stderr: string }) => failure)
    const line = `migration ${edited!.slice(0, -4)} was edited after it was applied: its file's sha256 is ` +
      `${sha256(await readFile(join(dir, 'migrations', edited!), 'utf8')).slice(0, 12)}…, the database applied ${sha256(await readFile(join('migrations', edited!), 'utf8')).slice(0, 12)}…; ` +
      'restore it, add a new migration instead'
    expect(error).toMatchObject({ code: 1, stderr: `${line}\n` })
    expect((await query('SELECT max(version) AS version FROM schema_migrations')).rows).toEqual([{ version: 7 }])
    expect((await readFile('docs/postgresql.md', 'utf8')).replace(/\s+/g, ' ').includes(line), `docs/postgresql.md should quote: ${line}`).toBe(true)
  })
})

/** A copy of the build and of migrations/ in `dir`: its commands read and write the copy's migrations, not this checkout's. */
async function copyBuild (dir: string) {
  await Promise.all([cp('dist', join(dir, 'dist'), { recursive: true }), cp('migrations', join(dir, 'migrations'), { recursive: true }),
    cp('package.json', join(dir, 'package.json')), symlink(resolve('node_modules'), join(dir, 'node_modules'))])
}

describe('npm run db -- new-migration', () => {
  it('writes the next migration: the table of the kind, as its registry entry makes it; no database needed', async () => {
    await copyBuild(dir)
    const { stderr } = await run(process.execPath, [join(dir, 'dist/cli/db.js'), 'new-migration', '--kind', 'providers'], { env: { PATH: process.env.PATH ?? '' } })
    const file = join(dir, 'migrations', `${String(SCHEMA_VERSION + 1).padStart(4, '0')}-providers-table.sql`)
    expect(stderr).toBe(`wrote ${file}, which makes the table of kind providers; ` +
      'write schema.sql again with npx vitest run test/repositories/sources/postgres-migrations.test.ts --update\n')
    expect(await readFile(file, 'utf8')).toBe(listTableSql(KINDS.providers))
  })
})

describe('npm run db -- trim', () => {
  it('removes the change log\'s entries older than --older-than, says how many, and keeps the newer', async () => {
    await db(url, 'migrate')
    await query(`INSERT INTO keys SELECT 'k' || i, lpad(i::text, 64, '0'), 'standard', 'o' FROM generate_series(1, 3) AS i`)
    // Aged by hand, past the trigger that keeps every entry as its transaction wrote it.
    await query("ALTER TABLE directory_changes DISABLE TRIGGER directory_changes_stamp; UPDATE directory_changes SET written_at = now() - interval '2 hours'; ALTER TABLE directory_changes ENABLE TRIGGER directory_changes_stamp")
    await query("DELETE FROM keys WHERE name = 'k1'")
    const { stderr } = await db(url, 'trim', '--older-than', '1h')
    expect(stderr).toBe(`trimmed the change log of ${url}: 1 entries older than 1h removed\n` +
      `trimmed the keys' history of ${url}: 0 entries older than 90 days (KEY_HISTORY_RETENTION_DAYS) removed\n`)
    expect((await query('SELECT names FROM directory_changes')).rows).toEqual([{ names: ['k1'] }])
    // The default keeps a day.
    expect((await db(url, 'trim')).stderr).toContain(': 0 entries older than 1d removed')
  })

  it('removes the entries of the keys\' history older than KEY_HISTORY_RETENTION_DAYS, and keeps the newer', async () => {
    await db(url, 'migrate')
    await query(`INSERT INTO keys SELECT 'k' || i, lpad(i::text, 64, '0'), 'standard', 'o' FROM generate_series(1, 3) AS i`)
    // Aged by hand, past the trigger that refuses to change an entry.
    await query("ALTER TABLE key_history DISABLE TRIGGER key_history_unchanged; UPDATE key_history SET at = now() - interval '8 days' WHERE name <> 'k3'; ALTER TABLE key_history ENABLE TRIGGER key_history_unchanged")
    const { stderr } = await run(process.execPath, ['dist/cli/db.js', 'trim'], { env: { PATH: process.env.PATH ?? '', DATABASE_URL: url, KEY_HISTORY_RETENTION_DAYS: '7' } })
    expect(stderr).toContain(`trimmed the keys' history of ${url}: 2 entries older than 7 days (KEY_HISTORY_RETENTION_DAYS) removed\n`)
    expect((await query('SELECT name, action FROM key_history')).rows).toEqual([{ name: 'k3', action: 'minted' }])
  })

  it('refuses a retention that is not a duration, in one line', async () => {
    const error = await db(url, 'trim', '--older-than', '1 hour').catch((failure: { code: number, stderr: string }) => failure)
    expect(error).toMatchObject({ code: 2, stderr: '--older-than "1 hour" is not a duration such as 30s, 15m, 12h or 7d; see npm run db -- --help\n' })
  })
})

describe('npm run db with a role that lacks the rights', () => {
  // A role of its own per test (roles belong to the whole cluster), with PostgreSQL's usual recipe:
  // the right to connect and create schemas in the database, which PostgreSQL 15 no longer extends to
  // creating tables in schema public.
  let roles = 0
  async function roleWithDatabaseGrants () {
    const role = `directory_${++roles}`
    const database = new URL(url).pathname.slice(1)
    await query(`CREATE ROLE ${role} LOGIN`)
    await query(`GRANT ALL ON DATABASE ${database} TO ${role}`)
    const roleUrl = new URL(url)
    roleUrl.username = role
    return { role, database, roleUrl: roleUrl.href }
  }

  it('migrate names the fix for "permission denied for schema public", and the fix works', async () => {
    const { role, database, roleUrl } = await roleWithDatabaseGrants()
    await expect(db(roleUrl, 'migrate')).rejects.toMatchObject({
      code: 1,
      stderr: `permission denied for schema public: "${role}" may not create tables in database "${database}" (PostgreSQL 15 and later let only the database's owner create in schema public). ` +
        `As a superuser, make the role own the database: ALTER DATABASE "${database}" OWNER TO "${role}"; or, connected to it, GRANT CREATE ON SCHEMA public TO "${role}"\n`
    })
    await query(`ALTER DATABASE "${database}" OWNER TO "${role}"`)
    expect((await db(roleUrl, 'migrate')).stderr).toContain('applied version 1')
  })

  it('import names the fix when another role owns the tables, and the fix works', async () => {
    await db(url, 'migrate')
    const { role, database, roleUrl } = await roleWithDatabaseGrants()
    await writeData(dir, makeData())
    const failure = await db(roleUrl, 'import', '--data-dir', dir).catch((error) => error)
    expect(failure.code).toBe(1)
    expect(failure.stderr).toMatch(new RegExp(`^permission denied for table \\w+: "${role}" lacks rights on the directory's tables in database "${database}"\\. ` +
      `Run npm run db as the role that ran migrate \\(the tables' owner\\), or, as that role, GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "${role}"\n$`))
    await query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "${role}"`)
    expect((await db(roleUrl, 'import', '--data-dir', dir)).stderr).toContain('imported 3 providers')
  })
})

describe('npm run db -- import and export', () => {
  beforeEach(async () => { await db(url, 'migrate') })

  it('round-trips a folder: the export equals the files imported, order, absent fields and expiries included', async () => {
    const base = makeData()
    // Expiries in UTC, as the export writes them (an offset comes out as the same instant in UTC).
    const data = { ...base, keys: base.keys.map((key, index) => index === 1 ? { ...key, expires_at: '2030-06-01T12:30:00Z' } : index === 2 ? { ...key, expires_at: '2030-06-01T12:30:00.250Z' } : key) }
    await writeData(dir, data)
    expect((await db(url, 'import', '--data-dir', dir)).stderr).toContain(`imported ${describeCounts(countRecords(makeData()))}`)
    const out = join(dir, 'out')
    await db(url, 'export', '--data-dir', out)
    // (As JSON: the members are held compacted, and written as the array they were read from.)
    expect(await readData(out)).toStrictEqual(JSON.parse(JSON.stringify(data)))
  })

  it('round-trips an organization of more members than one statement takes, between two others', async () => {
    const data = makeData()
    const large = { id: 'org_large', name: 'Large', members: makeMembers('large', 20_005) }
    const organizations = [data.organizations[0]!, large, data.organizations[1]!]
    await writeData(dir, { ...data, organizations })
    expect((await db(url, 'import', '--data-dir', dir)).stderr).toContain('3 organizations with 20258 members')
    const out = join(dir, 'out')
    await db(url, 'export', '--data-dir', out)
    expect((await readData(out)).organizations).toStrictEqual(JSON.parse(JSON.stringify(organizations)))
  })

  it('round-trips the bundled fixtures byte for byte in every field order', async () => {
    await db(url, 'import', '--data-dir', BUNDLED_FIXTURES_DIR)
    await db(url, 'export', '--data-dir', dir)
    for (const file of Object.values(DATA_FILES)) {
      const original = JSON.parse(await readFile(join(BUNDLED_FIXTURES_DIR, file), 'utf8'))
      const exported = JSON.parse(await readFile(join(dir, file), 'utf8'))
      // Keys are exported in the order of their names.
      const sort = (list: Array<{ name: string }>) => file === DATA_FILES.keys ? [...list].sort((a, b) => a.name < b.name ? -1 : 1) : list
      expect(JSON.stringify(exported), file).toBe(JSON.stringify(sort(original)))
    }
  })

  it('refuses invalid data naming file, record and field, and changes nothing', async () => {
    await writeData(dir, makeData())
    await db(url, 'import', '--data-dir', dir)
    await writeData(dir, makeData({ providers: [makeProvider(1), makeProvider(2, { headquarters: 'ZZ' })] }))
    await expect(db(url, 'import', '--data-dir', dir)).rejects.toMatchObject({
      code: 1,
      stderr: 'providers.json: [1].headquarters: "ZZ" is not an ISO 3166-1 alpha-2 code\n'
    })
    const { rows } = await query('SELECT slug FROM providers ORDER BY position')
    expect(rows.map((row) => row.slug)).toEqual(['provider-1', 'provider-2', 'provider-3'])
  })

  const key = (name: string, sha: string, extra: Record<string, unknown> = {}) => ({ name, sha256: sha.repeat(64), kind: 'standard' as const, organization_id: 'o', ...extra })

  it.each<[string, Partial<DirectoryData>]>([
    ['a repeated name', { keys: [key('a', 'a'), key('b', 'b'), key('a', 'c')] }],
    ['a repeated hash, never quoted', { keys: [key('a', 'a'), key('b', 'a')] }],
    ['a repeated hash before a repeated name: the name is told first, as the server checks field after field', { keys: [key('a', 'a'), key('b', 'a'), key('a', 'c')] }],
    ['a repeated name before a bad record: the record is told first', { keys: [key('a', 'a'), key('a', 'b'), key('c', 'c', { kind: 'revoked' as 'standard' })] }],
    ['a repeated organization id', { organizations: [{ id: 'o', name: 'O', members: makeMembers('o', 2) }, { id: 'o', name: 'P', members: makeMembers('p', 2) }] }],
    ['a repeated provider slug', { providers: [makeProvider(1), makeProvider(2), makeProvider(1)] }]
  ])('refuses, with the server\'s message and changing nothing, %s', async (_case, spoilt) => {
    await writeData(dir, makeData())
    await db(url, 'import', '--data-dir', dir)
    await writeData(dir, makeData(spoilt))
    const served = await loadDataFolder(dir).then(() => 'loaded', (error: Error) => error.message)
    await expect(db(url, 'import', '--data-dir', dir)).rejects.toMatchObject({ code: 1, stderr: `${served}\n` })
    expect((await query('SELECT count(*)::int AS n FROM members')).rows).toEqual([{ n: 253 }])
    expect((await query('SELECT count(*)::int AS n FROM keys')).rows).toEqual([{ n: 4 }])
    expect((await query('SELECT slug FROM providers ORDER BY position')).rows.map((row) => row.slug)).toEqual(['provider-1', 'provider-2', 'provider-3'])
  })

  it('rolls back everything when the database refuses a row', async () => {
    await writeData(dir, makeData())
    await db(url, 'import', '--data-dir', dir)
    // Valid for the files, refused by the database: a NUL character, which PostgreSQL text cannot hold.
    await writeData(dir, makeData({ keys: [{ name: 'a\u0000b', sha256: 'a'.repeat(64), kind: 'standard', organization_id: 'o' }] }))
    await expect(db(url, 'import', '--data-dir', dir)).rejects.toMatchObject({ code: 1 })
    expect((await query('SELECT count(*)::int AS n FROM members')).rows).toEqual([{ n: 253 }])
    expect((await query('SELECT count(*)::int AS n FROM keys')).rows).toEqual([{ n: 4 }])
  }, 60_000)
})

describe('npm run db -- import and export at gateway scale', () => {
  beforeEach(async () => { await db(url, 'migrate') })

  /** Keys and organizations that make files over the 8 MiB the server reads from a folder, in the order export writes them. */
  function largeData (keys: number, organizations: number): DirectoryData {
    return makeData({
      keys: Array.from({ length: keys }, (_, i) => ({
        name: `key-${String(i).padStart(7, '0')}`,
        sha256: sha256(`key ${i}`),
        kind: i % 10 === 0 ? 'management' as const : 'standard' as const,
        organization_id: `org_${i % organizations}`,
        ...(i % 3 === 0 ? { expires_at: `2030-01-01T00:00:${String(i % 60).padStart(2, '0')}Z` } : {})
      })),
      organizations: Array.from({ length: organizations }, (_, i) => ({ id: `org_${i}`, name: `Organization ${i}`, members: makeMembers(`o${i}`, 10) }))
    })
  }

  it('round-trips files larger than a data file may be, as export writes them, into a database and back', async () => {
    const data = largeData(70_000, 8_000)
    await writeData(dir, data)
    for (const kind of ['keys', 'organizations'] as const) expect((await stat(join(dir, DATA_FILES[kind]))).size).toBeGreaterThan(MAX_FILE_BYTES)
    const imported = await db(url, 'import', '--data-dir', dir)
    expect(imported.stderr).toBe(`imported ${describeCounts(countRecords(data))} from ${dir} into ${url}\n`)
    const out = join(dir, 'out')
    const exported = await db(url, 'export', '--data-dir', out)
    expect(exported.stderr).toBe(`exported ${describeCounts(countRecords(data))} from ${url} to ${out}\n`)
    // Written as they always were: JSON.stringify(records, null, 2) and a line break.
    for (const kind of Object.keys(DATA_FILES) as Array<keyof DirectoryData>) {
      expect(await readFile(join(out, DATA_FILES[kind]), 'utf8'), kind).toBe(JSON.stringify(data[kind], null, 2) + '\n')
    }
    expect((await readdir(out)).sort()).toEqual(Object.values(DATA_FILES).sort())
    // The export imported into another database gives the same export.
    const other = await server.createDatabase()
    await db(other, 'migrate')
    expect((await db(other, 'import', '--data-dir', out)).stderr).toContain('8000 organizations with 80000 members, 70000 keys')
    const again = join(dir, 'again')
    await db(other, 'export', '--data-dir', again)
    for (const file of Object.values(DATA_FILES)) expect((await readFile(join(again, file))).equals(await readFile(join(out, file))), file).toBe(true)
  }, 120_000)

  it('refuses a large file\'s duplicate or bad record with today\'s message, and leaves the database as it was', async () => {
    await writeData(dir, makeData())
    await db(url, 'import', '--data-dir', dir)
    const data = largeData(70_000, 10)
    const keys = [...data.keys]
    keys[69_990] = { ...keys[69_990]!, name: keys[12]!.name }
    await writeData(dir, { ...data, keys })
    await expect(db(url, 'import', '--data-dir', dir)).rejects.toMatchObject({
      code: 1, stderr: 'keys.json: [69990].name: "key-0000012" duplicates [12].name\n'
    })
    keys[69_990] = { ...keys[69_990]!, name: 'key-x', kind: 'revoked' as 'standard' }
    await writeData(dir, { ...data, keys })
    await expect(db(url, 'import', '--data-dir', dir)).rejects.toMatchObject({
      code: 1, stderr: 'keys.json: [69990].kind: "revoked" is not one of "standard", "management"\n'
    })
    // Cut short: the syntax error, located, comes before the records' problems, as it does in a small file.
    const cut = (await readFile(join(dir, 'keys.json'))).subarray(0, -30)
    await writeFile(join(dir, 'keys.json'), cut)
    const checker = new JsonChecker()
    checker.write(cut)
    await expect(db(url, 'import', '--data-dir', dir)).rejects.toMatchObject({ code: 1, stderr: `keys.json: ${checker.end()}\n` })
    expect(checker.end()).toMatch(/^not valid JSON at line 1, column \d+ \(\[69999\]/)
    expect((await query('SELECT count(*)::int AS n FROM keys')).rows).toEqual([{ n: 4 }])
  }, 60_000)
})

describe('npm run db -- export beside rows the schema refuses', () => {
  beforeEach(async () => { await db(url, 'migrate') })

  it('writes the valid records, names each refused one in a line of its own, and exits 3', async () => {
    const data = makeData({ organizations: [...makeData().organizations, { id: 'org_gamma', name: 'Gamma', members: makeMembers('gamma', 2) }] })
    const counts = countRecords(data)
    await writeData(dir, data)
    await db(url, 'import', '--data-dir', dir)
    // PostgreSQL takes all of these once the keys' CHECKs, if the schema has any, are dropped.
    await query(DROP_KEY_CHECKS)
    await query("UPDATE keys SET kind = 'revoked' WHERE name = 'alpha-standard'")
    await query("UPDATE members SET role = 'org:owner' WHERE organization_id = 'org_beta' AND id = 'user_beta_1'")
    await query('UPDATE providers SET document = (document::jsonb || \'{"headquarters": "ZZ"}\')::json WHERE slug = \'provider-2\'')
    const out = join(dir, 'out')
    const failure = await db(url, 'export', '--data-dir', out).catch((error: { code: number, stderr: string }) => error)
    expect(failure).toMatchObject({ code: 3 })
    expect(failure.stderr.split('\n')).toEqual([
      'refused: table providers, row slug "provider-2": headquarters: "ZZ" is not an ISO 3166-1 alpha-2 code',
      'refused: table members, row organization_id "org_beta", id "user_beta_1": role: "org:owner" is not one of "org:admin", "org:member"',
      'refused: table keys, row name "alpha-standard": kind: "revoked" is not one of "standard", "management"',
      // A provider, a key, and the organization of the member refused (org_beta, 3 members) fewer than written.
      `exported ${describeCounts({ ...counts, providers: counts.providers - 1, organizations: counts.organizations - 1, members: counts.members - 3, keys: counts.keys - 1 })} from ${url} to ${out}, leaving out the 3 records refused above`,
      ''
    ])
    const written = await readData(out)
    expect(written.providers.map((provider: { slug: string }) => provider.slug)).toEqual(['provider-1', 'provider-3'])
    expect(written.endpoints).toStrictEqual(JSON.parse(JSON.stringify(data.endpoints)))
    expect(written.organizations.map((organization: { id: string }) => organization.id)).toEqual(['org_alpha', 'org_gamma'])
    expect(written.organizations).toStrictEqual(JSON.parse(JSON.stringify([data.organizations[0], data.organizations[2]])))
    expect(written.keys.map((key: { name: string }) => key.name)).toEqual(['alpha-management', 'beta-management', 'orphan-management'])
    // What it wrote imports as it is.
    expect((await db(url, 'import', '--data-dir', out)).stderr).toContain(`imported ${describeCounts(countRecords(await readData(out)))} from`)
  })

  it('names what a replica refuses with the replica\'s own messages, values past their bounds left unread', async () => {
    const data = makeData({ organizations: [...makeData().organizations, { id: 'org_large', name: 'Large', members: makeMembers('large', 0) }] })
    await writeData(dir, data)
    await db(url, 'import', '--data-dir', dir)
    await query(DROP_KEY_CHECKS)
    // A document past the largest a list's row is read with, values past their fields' bounds, an
    // organization of more members than one may have, and a hash in capitals.
    await query("UPDATE providers SET document = json_build_object('name', repeat('x', 9000000), 'slug', 'provider-2') WHERE slug = 'provider-2'")
    await query("UPDATE keys SET organization_id = repeat('o', 1000000) WHERE name = 'alpha-standard'")
    await query("UPDATE keys SET sha256 = upper(sha256) WHERE name = 'beta-management'")
    await query("UPDATE members SET email = repeat('e', 2000) WHERE organization_id = 'org_beta' AND id = 'user_beta_2'")
    // Written as before the database bounded an organization's members (schema 10).
    await query('ALTER TABLE members DISABLE TRIGGER members_bound_insert')
    await query(`INSERT INTO members (organization_id, id, position, email, role)
      SELECT 'org_large', 'user_' || i, i, 'u' || i || '@large.example', 'org:member' FROM generate_series(0, ${MAX_MEMBERS}) AS i`)
    await query('ALTER TABLE members ENABLE TRIGGER members_bound_insert')
    const failure = await db(url, 'export', '--data-dir', join(dir, 'out')).catch((error: { code: number, stderr: string }) => error)
    expect(failure).toMatchObject({ code: 3 })
    const lines = failure.stderr.trimEnd().split('\n')
    expect(lines.at(-1)).toContain('leaving out the 5 records refused above')
    // What a replica's whole read refuses, kind by kind.
    const source = createPostgresSource({ url, connectTimeoutMs: 0 })
    const { changes } = await source.list().finally(() => source.close())
    const refusals = changes.flatMap((change) => 'refused' in change ? [...change.refused!.values()] : [])
    expect(lines.slice(0, -1)).toEqual(refusals.map((problem) => `refused: ${problem}`))
    expect(lines.slice(0, -1)).toEqual([
      'refused: table providers, row slug "provider-2": document: 9000036 bytes, over the limit of 8388608 (not read)',
      'refused: table members, row organization_id "org_beta", id "user_beta_2": email: 2000 bytes, over the limit of 762 (not read)',
      `refused: table members, organization_id "org_large": more than ${MAX_MEMBERS} members, the most an organization may have`,
      'refused: table keys, row name "alpha-standard": organization_id: 1000000 bytes, over the limit of 768 (not read)',
      'refused: table keys, row name "beta-management": sha256: is not a lowercase hex SHA-256'
    ])
  })

  it('writes keys in the order of their names by UTF-16 code unit, as JavaScript sorts them', async () => {
    // U+FF5E sorts after U+1F600 in UTF-16 (a surrogate pair starts with 0xD83D), before it by code point.
    const names = ['b', 'a\u{1F600}', 'a\uFF5E', 'a', 'A', 'a\u00E9', 'a\uE000x', 'a\u{10000}']
    const keys = names.map((name, i) => ({ name, sha256: sha256(name), kind: 'standard' as const, organization_id: `o${i}` }))
    await writeData(dir, makeData({ keys }))
    await db(url, 'import', '--data-dir', dir)
    await db(url, 'export', '--data-dir', join(dir, 'out'))
    expect((await readData(join(dir, 'out'))).keys.map((key: { name: string }) => key.name)).toEqual([...names].sort())
  })
})

describe('npm run db', () => {
  it.each([
    [['import'], 'usage:'],
    [['dump', '--data-dir', '/tmp'], "unknown command 'dump'"],
    [['migrate', 'now'], 'usage:']
  ])('refuses %o with one line, exit 2', async (args, message) => {
    await expect(db(url, ...args)).rejects.toMatchObject({ code: 2, stderr: expect.stringMatching(new RegExp(`^${message}[^\\n]*\\n$`)) })
  })

  it('says what is missing when DATABASE_URL is not set', async () => {
    await expect(db(undefined, 'migrate')).rejects.toMatchObject({ code: 1, stderr: expect.stringMatching(/^DATABASE_URL is not set[^\n]*\n$/) })
  })

  it('names the database, without its password, when it cannot be reached', async () => {
    const unreachable = 'postgresql://user:s3cret@127.0.0.1:1/none'
    const failure = await db(unreachable, 'migrate').catch((error) => error)
    expect(failure.code).toBe(1)
    expect(failure.stderr).toMatch(/^cannot connect to PostgreSQL at postgresql:\/\/user@127\.0\.0\.1:1\/none within 0 ms: [^\n]+\n$/)
    expect(failure.stderr).not.toContain('s3cret')
  })

  it('says each try while it waits for a database that does not answer, then gives up in one line', async () => {
    const failure = await run(process.execPath, ['dist/cli/db.js', 'migrate'], {
      env: { PATH: process.env.PATH ?? '', DATABASE_URL: 'postgresql://user:s3cret@127.0.0.1:1/none', DATABASE_CONNECT_TIMEOUT_MS: '500' }
    }).catch((error) => error)
    expect(failure.code).toBe(1)
    const lines = (failure.stderr as string).trimEnd().split('\n')
    expect(lines.length).toBeGreaterThanOrEqual(2)
    expect(lines.slice(0, -1).map((line) => line.replace(/ [0-9]+ ms, for [0-9]+ ms more/, ' N ms, for M ms more'))).toEqual(lines.slice(0, -1).map((_line, index) =>
      `cannot connect to PostgreSQL at postgresql://user@127.0.0.1:1/none (try ${index + 1}: connect ECONNREFUSED 127.0.0.1:1); trying again in N ms, for M ms more (DATABASE_CONNECT_TIMEOUT_MS)`))
    expect(lines.at(-1)).toBe('cannot connect to PostgreSQL at postgresql://user@127.0.0.1:1/none within 500 ms: connect ECONNREFUSED 127.0.0.1:1')
    expect(failure.stderr).not.toContain('s3cret')
  })

  it('refuses to export from a database without the schema, and writes nothing', async () => {
    const out = join(dir, 'out')
    await expect(db(url, 'export', '--data-dir', out)).rejects.toMatchObject({
      code: 1,
      stderr: `the database schema is at version none, this build needs ${SCHEMA_VERSION}: run npm run db -- migrate\n`
    })
    expect(await readdir(dir)).toEqual([])
  })

  it('refuses to import into a database without the schema', async () => {
    await writeData(dir, makeData())
    await expect(db(url, 'import', '--data-dir', dir)).rejects.toMatchObject({
      code: 1,
      stderr: `the database schema is at version none, this build needs ${SCHEMA_VERSION}: run npm run db -- migrate\n`
    })
  })
})
