import pg from 'pg'
import { beforeEach, describe, expect, it } from 'vitest'
import { createLifecycle } from '../../../src/repositories/lifecycle.js'
import { memberProblem, recordProblem, type DirectoryData } from '../../../src/repositories/records.js'
import { MemberList } from '../../../src/repositories/member-list.js'
import { createPostgresSource, KEY_SELECT, keyOfRow } from '../../../src/repositories/sources/postgres.js'
import { replaceDirectory } from '../../../src/repositories/sources/postgres-write.js'
import type { ApiKey } from '../../../src/schemas/keys-and-organizations.js'
import type { Member } from '../../../src/schemas/member.js'
import { bearer, build, KEYS, makeData, sha256, watchLifecycle } from '../../helper.js'
import { databasePerTest, DROP_KEY_CHECKS } from '../../postgres.js'

// Adversarial rows read whole from COPY's bytes, held equal to the same rows read as text: by a
// change (keys by name, organizations by id) and as the records of a data folder.

let url: string
let admin: pg.Client
const { lifecycles } = databasePerTest((database) => ({ url, client: admin } = database), () => makeData({ keys: [], organizations: [] }))

// No rate limit: thousands of requests, most of them refused, from one address.
const settings = { RATE_LIMIT_PER_MINUTE: 0, RATE_LIMIT_ANONYMOUS_PER_MINUTE: 0 }

async function follow () {
  const lifecycle = createLifecycle(createPostgresSource({ url, connectTimeoutMs: 0 }))
  lifecycles.push(lifecycle)
  await lifecycle.load()
  return { lifecycle, app: build({ snapshots: lifecycle, settings }), ...watchLifecycle(lifecycle) }
}

/** A small seeded generator: the same rows on every run. */
function random (seed: number) {
  return () => {
    seed = (Math.imul(seed, 1103515245) + 12345) & 0x7fffffff
    return seed / 0x80000000
  }
}

const PIECES = ['a', 'Z', ' ', '"', '\\', '\t', '\n', '\x01', '\x7f', 'é', 'É', '名', '😀', '\u2028', '\u00a0', '@', '.', '/', '<']

type Answer = [number, string]
const answer = async (app: ReturnType<typeof build>, url: string, secret: string): Promise<Answer> => {
  const res = await app.inject({ url, headers: bearer(secret) })
  return [res.statusCode, res.body]
}

describe('keys read whole from COPY\'s bytes', () => {
  it('authenticate as the same rows read as text do: by a change, and as a data folder\'s records', async () => {
    await admin.query(DROP_KEY_CHECKS)
    const next = random(7)
    const pick = <T>(values: readonly T[]): T => values[Math.floor(next() * values.length)]!
    const text = () => Array.from({ length: 1 + Math.floor(next() * 4) }, () => pick(PIECES)).join('')
    const rows: Array<Record<string, unknown>> = []
    const secrets = new Map<string, string>()
    for (let i = 0; i < 3000; i++) {
      const secret = `secret-${i}`
      let name = next() < 0.6 ? `k-${i}` : `${text()}-${i}`
      if (next() < 0.03) name = pick(['', 'n'.repeat(256 - String(i).length) + i, 'n'.repeat(257 - String(i).length) + i, 'é'.repeat(250) + i])
      let sha = sha256(secret)
      const odd = next()
      if (odd < 0.02) sha = sha.toUpperCase()
      else if (odd < 0.03) sha = `${sha.slice(0, 63)}g`
      else if (odd < 0.04) sha = `${sha.slice(0, 62)}é`
      else if (odd < 0.045) sha = ''
      const kind = next() < 0.95 ? pick(['standard', 'management']) : pick(['standard ', 'Standard', '', 'management\t'])
      let organization = next() < 0.85 ? `org_${Math.floor(next() * 900)}` : `org_${text()}`
      if (next() < 0.02) organization = pick(['', 'o'.repeat(256), 'o'.repeat(257), 'é'.repeat(256), 'é'.repeat(257)])
      const row: Record<string, unknown> = { name, sha256: sha, kind, organization_id: organization, disabled: false }
      if (next() < 0.1) row.expires_at = pick(['2020-01-01T00:00:00Z', '2099-01-01T00:00:00.123456Z', 'infinity', '-infinity'])
      if (next() < 0.1) row.disabled = true
      if (next() < 0.1) row.rate_limit_per_minute = pick([1, 0, -5, 1_000_000_000, 1_000_000_001])
      if (next() < 0.05) {
        row.previous_sha256 = next() < 0.7 ? sha256(`old-${i}`) : pick([sha256(`old-${i}`).toUpperCase(), '', `${sha256(`old-${i}`)}0`])
        row.previous_expires_at = pick(['2099-01-01T00:00:00Z', '2020-01-01T00:00:00Z'])
        secrets.set(`old-${i}`, name)
      }
      secrets.set(secret, name)
      rows.push(row)
    }
    // Organizations of one member for most of the keys: more than the 512 the key table's index of them starts with.
    const organizations = Array.from({ length: 900 }, (_, o) => ({ id: `org_${o}`, name: 'Org', members: MemberList.of([{ id: 'u', email: `u@${o}.example`, first_name: null, last_name: null, role: 'org:admin' }]) }))
    await admin.query('INSERT INTO organizations (id, name) SELECT o, \'Org\' FROM unnest($1::text[]) AS o', [organizations.map(({ id }) => id)])
    await admin.query('INSERT INTO members (organization_id, id, email, role) SELECT o, \'u\', \'u@\' || substr(o, 5) || \'.example\', \'org:admin\' FROM unnest($1::text[]) AS o', [organizations.map(({ id }) => id)])
    const { lifecycle: changed } = await follow()
    await admin.query('INSERT INTO keys SELECT * FROM json_populate_recordset(NULL::keys, $1) ON CONFLICT DO NOTHING', [JSON.stringify(rows)])
    // What the rows' texts make, each key checked as a file's record is.
    const { rows: texts } = await admin.query<string[]>({ text: KEY_SELECT, rowMode: 'array' })
    const valid = texts.map((row) => keyOfRow(row).key).filter((key, index) => recordProblem('keys', key, index) === undefined)
    expect(valid.length).toBeGreaterThan(2000)
    const data: DirectoryData = { ...makeData({ organizations }), keys: valid as ApiKey[] }
    const files = build({ data, settings })
    await watchLifecycle(changed).until(({ keys }) => keys.length === valid.length)
    const whole = (await follow()).app
    const viaChange = build({ snapshots: changed, settings })
    const wrong: string[] = []
    const statuses = new Set<number>()
    for (const [secret] of secrets) {
      const expected = await answer(files, '/v1/organization/members', secret)
      statuses.add(expected[0])
      for (const [source, app] of [['whole read', whole], ['change', viaChange]] as const) {
        const got = await answer(app, '/v1/organization/members', secret)
        if (got[0] !== expected[0] || got[1] !== expected[1]) wrong.push(`${source}: ${secrets.get(secret)}: ${got[0]} where the files answer ${expected[0]}`)
      }
    }
    expect(wrong).toEqual([])
    // 429: a key of a limit of 1 a minute asked by both its secrets.
    expect([...statuses].sort()).toEqual([200, 401, 403, 404, 429])
  })
})

describe('members read whole from COPY\'s bytes', () => {
  it('serve as the same rows read as text do: by a change, and as a data folder\'s records', async () => {
    const next = random(11)
    const pick = <T>(values: readonly T[]): T => values[Math.floor(next() * values.length)]!
    const text = () => Array.from({ length: 1 + Math.floor(next() * 4) }, () => pick(PIECES)).join('')
    const EMAILS = ['a@b.c', 'a@b', 'a@.b', 'a@b.', '@b.c', 'a b@c.d', 'a"b@c.d', 'a\\b@c.d', 'é@b.c', 'a@b.c\u2028', 'a\x01@b.c', 'a@@b.c',
      'a@b..c', 'ab@c.d.', '.@a.b', `${'x'.repeat(250)}@b.c`, `${'x'.repeat(249)}@b.c`, `${'é'.repeat(249)}@b.c`, '', 'a@\u00a0.c', 'a\x7f@b.c', 'a@b.c\n']
    const organizations = Array.from({ length: 120 }, (_, o) => `org_${o % 10 === 0 ? text() : ''}${o}`)
    const members: Array<Record<string, unknown>> = []
    for (const [o, organization] of organizations.entries()) {
      // Most organizations valid, each bad one by a single odd member.
      const bad = o % 3 === 0
      for (let i = 0; i < 40 + (o % 7) * 30; i++) {
        const odd = bad && i === 17
        let id = next() < 0.7 ? `user_${i}` : `${text()}_${i}`
        if (odd && next() < 0.3) id = pick(['', 'i'.repeat(257), '😀'.repeat(129)])
        else if (next() < 0.02) id = pick(['i'.repeat(256 - String(i).length) + i, '😀'.repeat(120) + i])
        const email = odd ? pick(EMAILS) : next() < 0.8 ? `u${i}@x.example` : pick(['a@b.c', '.@a.b', `${'x'.repeat(250)}@b.c`, 'é@b.c', 'a"b@c.d', 'a\\b@c.d', 'a\x01@b.c', 'a\x7f@b.c', 'ab@c.d.e'])
        const name = () => next() < 0.3 ? null : next() < 0.5 ? 'Ann' : pick([text(), '', 'f'.repeat(1024), '😀'.repeat(512), ...(odd ? ['f'.repeat(1025), '😀'.repeat(513)] : [])])
        const role = odd && next() < 0.3 ? pick(['org:member ', 'Org:admin', 'admin']) : pick(['org:admin', 'org:member'])
        members.push({ organization_id: organization, id, position: i, email, first_name: name(), last_name: name(), role })
      }
      // A management key for each.
      await admin.query("INSERT INTO keys (name, sha256, kind, organization_id) VALUES ($1, $2, 'management', $3)", [`key-${o}`, sha256(`secret-${o}`), organization])
    }
    const { lifecycle: changed } = await follow()
    await admin.query('INSERT INTO organizations (id, name, position) SELECT o, \'Org\', n FROM unnest($1::text[]) WITH ORDINALITY AS t(o, n)', [organizations])
    await admin.query('INSERT INTO members SELECT * FROM json_populate_recordset(NULL::members, $1) ON CONFLICT DO NOTHING', [JSON.stringify(members)])
    // What the rows' texts make: an organization with a member the schema refuses is refused whole.
    const expected = new Map<string, Member[] | 'refused'>()
    for (const organization of organizations) {
      const { rows } = await admin.query<Member>('SELECT id, email, first_name, last_name, role FROM members WHERE organization_id = $1 ORDER BY position, id', [organization])
      expected.set(organization, rows.some((member) => memberProblem(member, 0, 0) !== undefined) ? 'refused' : rows)
    }
    const refused = [...expected.values()].filter((members) => members === 'refused').length
    expect(refused).toBeGreaterThan(20)
    const files = build({
      data: {
        ...makeData(),
        keys: organizations.map((id, o) => ({ name: `key-${o}`, sha256: sha256(`secret-${o}`), kind: 'management' as const, organization_id: id })),
        organizations: organizations.filter((id) => expected.get(id) !== 'refused').map((id) => ({ id, name: 'Org', members: MemberList.of(expected.get(id) as Member[]) }))
      },
      settings
    })
    await watchLifecycle(changed).until(({ organizations: served }) => served.length === organizations.length - refused)
    const whole = (await follow()).app
    const viaChange = build({ snapshots: changed, settings })
    const wrong: string[] = []
    for (const [o, organization] of organizations.entries()) {
      for (const page of ['', '?offset=13&limit=100', '?offset=150&limit=7']) {
        const path = `/v1/organization/members${page}`
        const want: Answer = expected.get(organization) === 'refused' ? [500, ''] : await answer(files, path, `secret-${o}`)
        for (const [source, app] of [['whole read', whole], ['change', viaChange]] as const) {
          const got = await answer(app, path, `secret-${o}`)
          if (got[0] !== want[0] || (want[0] === 200 && got[1] !== want[1])) wrong.push(`${source}: ${JSON.stringify(organization)} ${page}: ${got[0]} where the text says ${want[0]}`)
        }
      }
    }
    expect(wrong).toEqual([])
  })
})

// A secret named as the previous one of two keys, or as one key's previous and another's current:
// written by hand (npm run key never mints one), and read whole or by a change.
describe('a previous secret that is another key\'s too', () => {
  const PREVIOUS = 'a-secret-two-keys-name'
  const members = (app: ReturnType<typeof build>) => answer(app, '/v1/organization/members', PREVIOUS)
  beforeEach(() => replaceDirectory(admin, makeData()))

  it('named as previous by two keys, authenticates neither, whatever the order of their rows, read whole or followed', async () => {
    // Each statement moves the row it updates to the end of the table: a whole read, in the table's
    // order, meets alpha-standard first, then beta-management (before, it gave the secret to the first).
    for (const name of ['alpha-standard', 'beta-management']) {
      await admin.query("UPDATE keys SET previous_sha256 = $1, previous_expires_at = now() + interval '1 day' WHERE name = $2", [sha256(PREVIOUS), name])
    }
    const running = await follow()
    expect((await members(running.app))[0]).toBe(401)
    // An unrelated change to alpha-standard: its row now comes after beta-management's.
    await admin.query("UPDATE keys SET rate_limit_per_minute = 100 WHERE name = 'alpha-standard'")
    await running.installs(1)
    const fresh = await follow()
    expect((await members(running.app))[0]).toBe(401)
    expect(await members(running.app)).toEqual(await members(fresh.app))
    // One of the two names another secret: the other key alone names it, and it authenticates that key.
    await admin.query("UPDATE keys SET previous_sha256 = $1 WHERE name = 'alpha-standard'", [sha256('another secret')])
    // Installs are counted from the start: this is the second.
    await running.installs(2)
    const [ran, read] = [await members(running.app), await members((await follow()).app)]
    expect(ran[0], ran[1]).toBe(200)
    expect(ran).toEqual(read)
  })

  it('authenticates after the key whose current secret it was is deleted, on a running replica as on a new one', async () => {
    await admin.query("UPDATE keys SET previous_sha256 = $1, previous_expires_at = now() + interval '1 day' WHERE name = 'beta-management'", [sha256(KEYS.alphaStandard)])
    const running = await follow()
    await admin.query("DELETE FROM keys WHERE name = 'alpha-standard'")
    await running.installs(1)
    const fresh = await follow()
    const [ran, read] = [await answer(running.app, '/v1/organization/members', KEYS.alphaStandard), await answer(fresh.app, '/v1/organization/members', KEYS.alphaStandard)]
    expect(ran[0], `running: ${ran[1]}; read whole: ${read[1]}`).toBe(read[0])
  })
})

describe('a key whose disabled is NULL', () => {
  // Written where the database does not refuse it (its NOT NULL dropped, as the checks are in
  // postgres-edges.test.ts): a data file cannot say it but as "disabled": null, which the schema refuses.
  beforeEach(async () => {
    await replaceDirectory(admin, makeData())
    await admin.query('ALTER TABLE keys ALTER COLUMN disabled DROP NOT NULL')
  })

  it('fails closed, read whole and by a change, as the record "disabled": null does from a data folder', async () => {
    const record = { ...makeData().keys.find((key) => key.name === 'alpha-standard')!, disabled: null }
    // A data folder refuses it: the key is not served.
    expect(recordProblem('keys', record, 1)).toBe('[1].disabled: null: expected boolean')
    const running = await follow()
    await admin.query("UPDATE keys SET disabled = NULL WHERE name = 'alpha-standard'")
    await running.installs(1)
    const fresh = await follow()
    const [change, whole] = await Promise.all([running.app, fresh.app].map(async (app) => (await answer(app, '/v1/providers', KEYS.alphaStandard))[0]))
    expect({ change, whole }).toEqual({ change: 401, whole: 401 })
  })
})
