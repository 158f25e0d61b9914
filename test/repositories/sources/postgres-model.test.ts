import { execFile } from 'node:child_process'
import { createHash } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { promisify } from 'node:util'
import pg from 'pg'
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { createLifecycle, type Lifecycle } from '../../../src/repositories/lifecycle.js'
import { createPostgresSource } from '../../../src/repositories/sources/postgres.js'
import { migrate, trimChanges } from '../../../src/repositories/sources/postgres-schema.js'
import { replaceDirectory } from '../../../src/repositories/sources/postgres-write.js'
import type { Provider } from '../../../src/schemas/provider.js'
import { bearer, build, KEYS, makeData, recordsOf, sha256 } from '../../helper.js'
import { latencyProxy, serverProgram, startPostgres, type PostgresServer } from '../../postgres.js'

/*
 * A model-based test of replicas following PostgreSQL. A seeded generator writes random transactions
 * (BEGIN; 2-4 operations over keys, organizations and members, providers; COMMIT) and keeps in
 * memory the state after each commit: M_0 (the data imported) .. M_n. Two replicas follow the
 * database meanwhile, and are asked, while the transactions go in and without waiting for them to
 * catch up, what they serve: requests through the app (GET /v1/providers, GET /v1/organization/members
 * with keys ever minted, revoked ones included) and their whole state (recordsOf), polled, and taken
 * again each time a replica installs a change.
 *
 * The check: whatever a replica serves is what some M_j gives (an answer that no state gives is a
 * transaction installed in part: a torn transaction), and a replica never goes back (each replica
 * keeps, per sequence of observations that are ordered in time, the earliest state consistent with
 * everything it has served so far; an answer consistent only with older states fails). At the end,
 * both converge to M_n.
 *
 * Between transactions, seeded faults of the database's life (a generator of their own, so that a seed
 * gives the same transactions with or without them): the replicas' connections cut mid-read
 * (pg_terminate_backend), the change log trimmed under replicas that may lag, a transaction held open in
 * another database for a few steps, and once per seed a restore: the database dumped and restored into
 * another cluster, and the replicas' address (a proxy, standing for a virtual IP) moved to it. Each is a new
 * history or a lost connection the replicas must notice without serving a state M does not have.
 *
 * MODEL_SEED=<n> runs that seed alone, MODEL_STEPS=<n> sets the number of transactions. A seed gives
 * the same transactions again; the timing of the replicas is the machine's.
 */

const SEEDS = process.env.MODEL_SEED === undefined ? [1, 2, 3, 4, 5] : [Number(process.env.MODEL_SEED)]
const STEPS = Number(process.env.MODEL_STEPS ?? 200)
/** MODEL_INSTALL_SAMPLES=0: no whole state taken at each install, only what is polled (requests through the apps, whole states). */
const INSTALL_SAMPLES = process.env.MODEL_INSTALL_SAMPLES !== '0'
/** The page asked for: as many members as one page holds. */
const PAGE = 100

const run = promisify(execFile)

let server: PostgresServer
/** Where a restore goes: another cluster, which the proxy's address moves to. */
let restored: PostgresServer
beforeAll(async () => { [server, restored] = await Promise.all([startPostgres(), startPostgres()]) })
afterAll(() => Promise.all([server?.close(), restored?.close()]))

let url: string
let admin: pg.Client
const lifecycles: Lifecycle[] = []
beforeEach(async () => {
  url = await server.createDatabase()
  admin = new pg.Client({ connectionString: url })
  await admin.connect()
  await migrate(admin)
})
afterEach(async () => {
  await Promise.all(lifecycles.splice(0).map((lifecycle) => lifecycle.close()))
  await admin.end()
})

// ---------------------------------------------------------------------------------------------
// A seeded generator (mulberry32): a seed names the same transactions on every run.

function generator (seed: number) {
  let state = seed >>> 0
  const random = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32
  }
  const int = (n: number) => Math.floor(random() * n)
  const pick = <T>(items: readonly T[]): T => items[int(items.length)]!
  const chance = (p: number) => random() < p
  return { random, int, pick, chance }
}
type Generator = ReturnType<typeof generator>

const hashOf = (text: string) => createHash('sha1').update(text).digest('base64url')

// ---------------------------------------------------------------------------------------------
// The reference model: the database as the test wrote it, and a frozen view of it after each commit.

interface MemberRow { id: string, position: number | null, email: string, first_name: string | null, last_name: string | null, role: 'org:admin' | 'org:member' }
interface OrgRow { name: string, position: number | null, members: Map<string, MemberRow> }
interface ProviderRow { id: number, slug: string, position: number | null, document: Provider }
/** A key as the model holds it: its secret too, to present it. Replaced, never changed, when its row changes. */
interface KeyRow { name: string, secret: string, sha256: string, kind: 'standard' | 'management', organization_id: string }

interface World {
  providers: ProviderRow[]
  keys: Map<string, KeyRow>
  orgs: Map<string, OrgRow>
}

/** ORDER BY position, id: NULL positions last (ascending), ties by id in C collation (the test cluster's locale). */
function pageOrder<T extends { position: number | null, id: string | number }> (a: T, b: T) {
  if (a.position !== b.position) {
    if (a.position === null) return 1
    if (b.position === null) return -1
    return a.position - b.position
  }
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0
}

/** A member as the replicas serve it: the fields in their order. */
const memberJson = (member: MemberRow) => JSON.stringify({ id: member.id, email: member.email, first_name: member.first_name, last_name: member.last_name, role: member.role })
const providerLine = (provider: { slug: string, name: string }) => `${provider.slug}=${provider.name}`
const keyLine = (key: { kind: string, organization_id: string, sha256: string }) => `${key.kind} ${key.organization_id} ${key.sha256}`

/** An organization as a state holds it; shared between states while unchanged. */
interface OrgView {
  name: string
  /** The members' JSON, in page order. */
  members: string[]
  /** What GET /v1/organization/members?offset=0&limit=100 answers for it (ids, e-mails, total_count). */
  page: string
  /** The organization whole: name and members. */
  sig: string
}

/** A state M_j: what a replica serving it answers. */
interface View {
  index: number
  providers: string[]
  providersSig: string
  keys: Map<string, KeyRow>
  keysSig: string
  orgs: Map<string, OrgView>
  orgsSig: string
}

const pageOf = (members: Array<{ id: string, email: string }>, total: number) =>
  JSON.stringify({ members: members.map((member) => `${member.id} ${member.email}`), total_count: total })

/** A page (pageOf) for a message: its total and its first and last members. */
function showPage (page: string) {
  const { members, total_count: total } = JSON.parse(page) as { members: string[], total_count: number }
  return `{total_count ${total}: ${members.length > 4 ? `${members.slice(0, 3).join(', ')}, ... ${members.at(-1)!} (${members.length})` : members.join(', ')}}`
}

/** Where two pages differ first. */
function pageDifference (served: string, model: string, index: number) {
  const a = JSON.parse(served) as { members: string[], total_count: number }
  const b = JSON.parse(model) as { members: string[], total_count: number }
  const at = Array.from({ length: Math.max(a.members.length, b.members.length) }, (_, i) => i).find((i) => a.members[i] !== b.members[i])
  return `total_count ${a.total_count}, M_${index} has ${b.total_count}` + (at === undefined ? '' : `; first difference at #${at}: ${a.members[at] ?? 'none'}, M_${index} has ${b.members[at] ?? 'none'}`)
}

function orgView (org: OrgRow): OrgView {
  const rows = [...org.members.values()].sort(pageOrder)
  const members = rows.map(memberJson)
  return { name: org.name, members, page: pageOf(rows.slice(0, PAGE), rows.length), sig: hashOf(`${org.name}\n${members.join('\n')}`) }
}

const keysSigOf = (keys: Iterable<[string, { kind: string, organization_id: string, sha256: string }]>) =>
  hashOf([...keys].sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0).map(([name, key]) => `${name} ${keyLine(key)}`).join('\n'))
const orgsSigOf = (orgs: Iterable<[string, { sig: string }]>) =>
  hashOf([...orgs].sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0).map(([id, org]) => `${id} ${org.sig}`).join('\n'))

// ---------------------------------------------------------------------------------------------
// The transactions.

/** An operation: a statement, and those that follow it in the same transaction (an organization, its members and its key). */
interface Op { text: string, values: unknown[], what: string, then?: Op[] }
interface Transaction { step: number, ops: Op[], /** Keys it minted, revoked, moved, or whose organization it changed. */ keys: Set<string> }

/** The world's operations, each applied to the model as it is written: every statement is valid against the database. */
function operations (world: World, g: Generator, allKeys: KeyRow[], removed: Set<string>) {
  const dirtyOrgs = new Set<string>()
  let txn: Transaction
  let serial = 0
  const fresh = () => `${txn.step}_${serial++}`

  const liveKeys = () => [...world.keys.values()]
  const orgIds = () => [...world.orgs.keys()]
  /** An organization for a key: mostly one that exists, sometimes one removed, or one never created. */
  const orgForKey = () => {
    const roll = g.random()
    if (roll < 0.75 && world.orgs.size > 0) return g.pick(orgIds())
    if (roll < 0.9 && removed.size > 0) return g.pick([...removed])
    return world.orgs.has('org_gone') ? g.pick(orgIds()) : 'org_gone'
  }
  /** A position among the members': none, another's (a tie, broken by id), or any. */
  const memberPosition = (org: OrgRow) => {
    if (g.chance(0.1)) return null
    const members = [...org.members.values()]
    if (members.length > 0 && g.chance(0.3)) return g.pick(members).position
    return g.int(org.members.size + 8) - 3
  }
  const touchOrg = (id: string) => {
    dirtyOrgs.add(id)
    for (const key of world.keys.values()) if (key.organization_id === id) txn.keys.add(key.name)
  }

  const mint = (kind: KeyRow['kind'], organization: string): Op => {
    const name = `key_${fresh()}`
    const secret = `secret-${g.int(2 ** 30).toString(36)}-${name}`
    const key: KeyRow = { name, secret, sha256: sha256(secret), kind, organization_id: organization }
    world.keys.set(name, key)
    allKeys.push(key)
    txn.keys.add(name)
    return { text: 'INSERT INTO keys (name, sha256, kind, organization_id) VALUES ($1, $2, $3, $4)', values: [name, key.sha256, kind, organization], what: `mint ${kind} key ${name} of ${organization}` }
  }

  const keyOps = {
    revoke (): Op {
      if (world.keys.size === 0) return keyOps.mint()
      const key = g.pick(liveKeys())
      world.keys.delete(key.name)
      txn.keys.add(key.name)
      return { text: 'DELETE FROM keys WHERE name = $1', values: [key.name], what: `revoke ${key.name}` }
    },
    mint: (): Op => mint(g.chance(0.6) ? 'management' : 'standard', orgForKey()),
    move (): Op {
      if (world.keys.size === 0) return keyOps.mint()
      const key = g.pick(liveKeys())
      const to = orgForKey()
      world.keys.set(key.name, { ...key, organization_id: to })
      txn.keys.add(key.name)
      return { text: 'UPDATE keys SET organization_id = $1 WHERE name = $2', values: [to, key.name], what: `move ${key.name} from ${key.organization_id} to ${to}` }
    }
  }

  const newMember = (org: OrgRow): MemberRow => {
    const id = `m_${fresh()}`
    return { id, position: memberPosition(org), email: `${id}@members.example`, first_name: g.chance(0.5) ? `First ${id}` : null, last_name: null, role: g.chance(0.2) ? 'org:admin' : 'org:member' }
  }
  const insertMembers = (id: string, members: MemberRow[]): Op => ({
    text: `INSERT INTO members (organization_id, id, position, email, first_name, last_name, role)
      SELECT $1, id, position, email, first_name, last_name, role FROM json_populate_recordset(NULL::members, $2)`,
    values: [id, JSON.stringify(members)],
    what: `add members ${members.map((member) => `${member.id}@${member.position}`).join(', ')} to ${id}`
  })

  const orgOps = {
    members (): Op {
      if (world.orgs.size === 0) return orgOps.create()
      const id = g.pick(orgIds())
      const org = world.orgs.get(id)!
      touchOrg(id)
      const roll = g.random()
      if (roll < 0.3 || org.members.size === 0) {
        const members = Array.from({ length: 1 + g.int(3) }, () => newMember(org))
        for (const member of members) org.members.set(member.id, member)
        return insertMembers(id, members)
      }
      const member = g.pick([...org.members.values()])
      if (roll < 0.55) {
        org.members.delete(member.id)
        return { text: 'DELETE FROM members WHERE organization_id = $1 AND id = $2', values: [id, member.id], what: `remove member ${member.id} of ${id}` }
      }
      if (roll < 0.75) {
        const email = `changed_${fresh()}@members.example`
        org.members.set(member.id, { ...member, email })
        return { text: 'UPDATE members SET email = $1 WHERE organization_id = $2 AND id = $3', values: [email, id, member.id], what: `e-mail of ${member.id} of ${id} to ${email}` }
      }
      const position = memberPosition(org)
      org.members.set(member.id, { ...member, position })
      return { text: 'UPDATE members SET position = $1 WHERE organization_id = $2 AND id = $3', values: [position, id, member.id], what: `position of ${member.id} of ${id} ${member.position} -> ${position}` }
    },
    /** A new organization (or one removed, made again), a few members and its management key: three statements. */
    create (): Op {
      const candidates = [...removed, ...world.orgs.has('org_gone') ? [] : ['org_gone']]
      const id = candidates.length > 0 && g.chance(0.2) ? g.pick(candidates) : `org_${fresh()}`
      const org: OrgRow = { name: `Organization ${fresh()}`, position: g.chance(0.1) ? null : g.int(10), members: new Map() }
      const members = Array.from({ length: g.int(5) }, () => newMember(org))
      for (const member of members) org.members.set(member.id, member)
      world.orgs.set(id, org)
      removed.delete(id)
      touchOrg(id)
      const key = mint('management', id)
      return {
        text: 'INSERT INTO organizations (id, position, name) VALUES ($1, $2, $3)',
        values: [id, org.position, org.name],
        then: [...members.length > 0 ? [insertMembers(id, members)] : [], key],
        what: `create ${id} with ${members.length} members and ${key.what}`
      }
    },
    remove (): Op {
      // The large organization stays: its reads are the long ones.
      const ids = orgIds().filter((id) => id !== 'org_alpha')
      if (ids.length === 0) return orgOps.create()
      const id = g.pick(ids)
      touchOrg(id)
      world.orgs.delete(id)
      removed.add(id)
      return { text: 'DELETE FROM organizations WHERE id = $1', values: [id], what: `remove organization ${id}` }
    },
    rename (): Op {
      if (world.orgs.size === 0) return orgOps.create()
      const id = g.pick(orgIds())
      const name = `Organization ${fresh()}`
      world.orgs.get(id)!.name = name
      touchOrg(id)
      return { text: 'UPDATE organizations SET name = $1 WHERE id = $2', values: [name, id], what: `rename ${id} to ${name}` }
    }
  }

  const providerOps = {
    rename (): Op {
      const provider = g.pick(world.providers)
      const document = { ...provider.document, name: `${provider.slug} v${fresh()}` }
      provider.document = document
      return { text: 'UPDATE providers SET document = $1 WHERE slug = $2', values: [JSON.stringify(document), provider.slug], what: `rename ${provider.slug} to ${document.name}` }
    },
    reorder (): Op {
      const provider = g.pick(world.providers)
      const position = g.chance(0.1) ? null : g.int(6) - 1
      const before = provider.position
      provider.position = position
      return { text: 'UPDATE providers SET position = $1 WHERE slug = $2', values: [position, provider.slug], what: `position of ${provider.slug} ${before} -> ${position}` }
    }
  }

  const groups = {
    keys: () => g.pick([keyOps.revoke, keyOps.revoke, keyOps.mint, keyOps.mint, keyOps.move])(),
    organizations: () => g.pick([orgOps.members, orgOps.members, orgOps.members, orgOps.create, orgOps.create, orgOps.remove, orgOps.rename])(),
    providers: () => g.pick([providerOps.rename, providerOps.rename, providerOps.reorder])()
  }
  const groupNames = Object.keys(groups) as Array<keyof typeof groups>

  return {
    /** The next transaction: 2 to 4 operations, of two kinds at least. */
    next (step: number): Transaction {
      txn = { step, ops: [], keys: new Set() }
      serial = 0
      const first = g.pick(groupNames)
      const second = g.pick(groupNames.filter((group) => group !== first))
      const kinds = [first, second, ...Array.from({ length: g.int(3) }, () => g.pick(groupNames))]
      for (let i = kinds.length - 1; i > 0; i--) {
        const j = g.int(i + 1)
        ;[kinds[i], kinds[j]] = [kinds[j]!, kinds[i]!]
      }
      for (const kind of kinds) txn.ops.push(groups[kind]())
      return txn
    },
    /** The state now, sharing with `previous` the organizations no transaction since changed. */
    view (index: number, previous: View | undefined): View {
      const providers = [...world.providers].sort(pageOrder).map((provider) => providerLine({ slug: provider.slug, name: provider.document.name }))
      const orgs = new Map<string, OrgView>()
      for (const [id, org] of world.orgs) {
        const kept = previous?.orgs.get(id)
        orgs.set(id, kept !== undefined && !dirtyOrgs.has(id) ? kept : orgView(org))
      }
      dirtyOrgs.clear()
      return { index, providers, providersSig: providers.join('\n'), keys: new Map(world.keys), keysSig: keysSigOf(world.keys), orgs, orgsSig: orgsSigOf(orgs) }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// What a replica serves, and which states give it.

/** A replica's whole state, as recordsOf gives it, reduced to the model's form. */
interface Served {
  providers: string[]
  providersSig: string
  keys: Map<string, string>
  keysSig: string
  orgs: Map<string, OrgView>
  orgsSig: string
}

function servedOf (lifecycle: Lifecycle): Served {
  const records = recordsOf(lifecycle.current())
  const providers = records.providers.map(providerLine)
  const keys = new Map(records.keys.map((key) => [key.name, keyLine(key)]))
  const orgs = new Map(records.organizations.map((organization) => {
    const members = organization.members.slice().map((member) => JSON.stringify(member))
    return [organization.id, { name: organization.name, members, page: '', sig: hashOf(`${organization.name}\n${members.join('\n')}`) }]
  }))
  return {
    providers,
    providersSig: providers.join('\n'),
    keys,
    keysSig: keysSigOf(records.keys.map((key) => [key.name, key])),
    orgs,
    orgsSig: orgsSigOf(orgs)
  }
}

const sameState = (served: Served, view: View) => served.providersSig === view.providersSig && served.keysSig === view.keysSig && served.orgsSig === view.orgsSig

/** What differs between a replica's whole state and a state of the model, item by item. */
function differences (served: Served, view: View): string[] {
  const found: string[] = []
  if (served.providersSig !== view.providersSig) found.push(`providers [${served.providers.join(', ')}], M_${view.index} has [${view.providers.join(', ')}]`)
  for (const name of new Set([...served.keys.keys(), ...view.keys.keys()])) {
    const model = view.keys.get(name)
    const line = model === undefined ? undefined : keyLine(model)
    const at = served.keys.get(name)
    if (at !== line) found.push(`key ${name}: ${at === undefined ? 'absent' : at.replace(/ \w{64}$/, '')}, M_${view.index} has ${line === undefined ? 'none' : line.replace(/ \w{64}$/, '')}`)
  }
  for (const id of new Set([...served.orgs.keys(), ...view.orgs.keys()])) {
    const mine = served.orgs.get(id)
    const model = view.orgs.get(id)
    if (mine?.sig === model?.sig) continue
    if (mine === undefined || model === undefined) {
      found.push(`organization ${id}: ${mine === undefined ? 'absent' : `served (${mine.members.length} members)`}, M_${view.index} has ${model === undefined ? 'none' : `it (${model.members.length} members)`}`)
      continue
    }
    const at = Array.from({ length: Math.max(mine.members.length, model.members.length) }, (_, i) => i).find((i) => mine.members[i] !== model.members[i])
    found.push(`organization ${id}: ${mine.name !== model.name ? `name ${JSON.stringify(mine.name)}, M_${view.index} has ${JSON.stringify(model.name)}; ` : ''}` +
      `${mine.members.length} members, M_${view.index} has ${model.members.length}` +
      (at === undefined ? '' : `; first difference at #${at}: ${mine.members[at] ?? 'none'}, M_${view.index} has ${model.members[at] ?? 'none'}`))
  }
  return found
}

/** The transactions where runs of these states begin (M_a: transaction a) and end (M_b: transaction b + 1). */
function edges (indexes: number[]): number[] {
  return indexes.flatMap((index, i) => [...indexes[i - 1] === index - 1 ? [] : [index], ...indexes[i + 1] === index + 1 ? [] : [index + 1]])
}

/** Indexes as ranges: "M_3..M_7, M_9". */
function ranges (indexes: number[]): string {
  if (indexes.length === 0) return 'no state'
  const parts: string[] = []
  let start = indexes[0]!
  let end = start
  for (const index of [...indexes.slice(1), NaN]) {
    if (index === end + 1) end = index
    else {
      parts.push(start === end ? `M_${start}` : `M_${start}..M_${end}`)
      start = end = index
    }
  }
  return parts.join(', ')
}

/**
 * One observation of a replica: what it answered, which states give that answer, and for a
 * failure, which states give each part of it.
 */
interface Observation {
  what: string
  answer: string
  matches (view: View): boolean
  /** For a failure: which states give each part of the answer, and what differs from the nearest states. */
  explain (views: View[]): string[]
  /** The transactions the failure message shows: those where the states that give a part of the answer begin and end. */
  around (views: View[]): number[]
}

/**
 * A sequence of observations of one replica that are ordered in time. The replica never goes back:
 * `low` is the earliest state consistent with everything observed so far (an answer is usually given
 * by a whole interval of states; a replica at state s_i at each observation, s_i never decreasing, is
 * possible exactly while the earliest state at or after `low` that gives the answer exists).
 */
class Chain {
  low = 0
  lowBy = 'its first load'
  observed = 0

  constructor (readonly name: string) {}
}

// ---------------------------------------------------------------------------------------------
// Faults between transactions, seeded apart from the transactions.

function faultsOf (seed: number) {
  const f = generator(seed ^ 0x2545f491)
  const counts = { cut: 0, trim: 0, held: 0, restore: 0 }
  const restoreAt = 40 + f.int(Math.max(1, STEPS - 80))
  let holder: pg.Client | undefined
  let heldUntil = 0
  const holderUrl = () => { const other = new URL(url); other.pathname = '/postgres'; return other.toString() }
  return {
    /** After transaction `step` committed: maybe a fault. */
    async after (step: number, proxy: Awaited<ReturnType<typeof latencyProxy>>) {
      if (holder !== undefined && step >= heldUntil) {
        await holder.end()
        holder = undefined
      }
      if (step === restoreAt) {
        counts.restore++
        const dir = await mkdtemp(join(tmpdir(), 'model-dump-'))
        try {
          // The cluster restored into is behind the replicas' position, as a new cluster or a standby that
          // lost transactions is: its transaction ids count from below the ones the replicas have read.
          const counter = async (client: pg.Client) => Number((await client.query<{ id: string }>('SELECT pg_current_xact_id()::text AS id')).rows[0]!.id)
          const other = new pg.Client({ connectionString: await restored.createDatabase(`ahead_${seed}`) })
          await other.connect()
          const ahead = await counter(other) + 1000
          await other.end()
          while (await counter(admin) < ahead) { /* a transaction each */ }
          await run(serverProgram('pg_dump'), ['-Fc', '-f', join(dir, 'dump'), url])
          // A database of the same name on another cluster: what the replicas' URL names, at the proxy's new address.
          const target = await restored.createDatabase(new URL(url).pathname.slice(1))
          await run(serverProgram('pg_restore'), ['-d', target, join(dir, 'dump')])
          // Restored whole before the replicas can reach it: a database half restored is no state of M.
          proxy.retarget(target)
          await admin.end()
          url = target
          admin = new pg.Client({ connectionString: url })
          await admin.connect()
        } finally {
          await rm(dir, { recursive: true, force: true })
        }
        return
      }
      const roll = f.random()
      if (roll < 0.03) {
        counts.cut++
        await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'model-gateway-directory%'")
      } else if (roll < 0.05) {
        counts.trim++
        await trimChanges(admin, 0)
      } else if (roll < 0.07 && holder === undefined) {
        counts.held++
        holder = new pg.Client({ connectionString: holderUrl() })
        await holder.connect()
        await holder.query('BEGIN; SELECT pg_current_xact_id()')
        heldUntil = step + 1 + f.int(30)
      }
    },
    async end () {
      await holder?.end()
      holder = undefined
    },
    describe: () => `${counts.cut} cuts, ${counts.trim} trims, ${counts.held} transactions held, ${counts.restore} restore`
  }
}

// ---------------------------------------------------------------------------------------------

describe('replicas following PostgreSQL, against a model of the transactions committed', () => {
  it.each(SEEDS)('serve only states the database went through, never going back, and converge (seed %i)', async (seed) => {
    console.log(`postgres-model: seed ${seed}, ${STEPS} transactions (replay with MODEL_SEED=${seed})`)
    const started = performance.now()
    const g = generator(seed)
    const poll = generator(seed ^ 0x5bd1e995)

    // M_0: the data imported, with the ids PostgreSQL gave the providers (ties of position go by id).
    const data = makeData()
    await replaceDirectory(admin, data)
    const { rows: providerIds } = await admin.query<{ id: string, slug: string }>('SELECT id, slug FROM providers')
    const secrets = new Map([
      ['alpha-management', KEYS.alphaManagement], ['alpha-standard', KEYS.alphaStandard],
      ['beta-management', KEYS.betaManagement], ['orphan-management', KEYS.orphanManagement]
    ])
    const world: World = {
      providers: data.providers.map((document, position) => ({ id: Number(providerIds.find((row) => row.slug === document.slug)!.id), slug: document.slug, position, document })),
      keys: new Map(data.keys.map((key) => [key.name, { ...key, secret: secrets.get(key.name)! }])),
      orgs: new Map(data.organizations.map((organization, position) => [organization.id, {
        name: organization.name,
        position,
        members: new Map(organization.members.slice().map((member, i) => [member.id, { ...member, position: i }]))
      }]))
    }
    const allKeys = [...world.keys.values()]
    const removed = new Set<string>()
    const model = operations(world, g, allKeys, removed)
    const views: View[] = [model.view(0, undefined)]
    const transactions: Transaction[] = [{ step: 0, ops: [{ text: '', values: [], what: 'the import (makeData)' }], keys: new Set() }]
    /** The latest state a replica may serve: that of the last transaction whose COMMIT was sent. */
    let upper = 0
    let committed = 0
    const failures: string[] = []
    let stop = false

    /** These transactions (eight at most, the latest), as the model wrote them. */
    const describeTransactions = (steps: number[], top: number) => [...new Set(steps)]
      .filter((step) => step >= 1 && step <= top).sort((a, b) => a - b).slice(-8)
      .map((step) => `  transaction ${step} (M_${step - 1} -> M_${step}): ${transactions[step]!.ops.map((op) => op.what).join('; ')}`)

    // The replicas reach the database through a proxy that a restore moves to another database.
    const proxy = await latencyProxy(url, 0)
    const faults = faultsOf(seed)

    // The replicas: each loaded, followed (its whole state checked at every install), and served by an app.
    const replicas = await Promise.all(['A', 'B'].map(async (name) => {
      const lifecycle = createLifecycle(createPostgresSource({ url: proxy.url, connectTimeoutMs: 0 }))
      lifecycles.push(lifecycle)
      await lifecycle.load()
      const app = build({ snapshots: lifecycle, settings: { RATE_LIMIT_PER_MINUTE: 0, RATE_LIMIT_ANONYMOUS_PER_MINUTE: 0 } })
      const replica = {
        name,
        lifecycle,
        app,
        /** Requests and whole states polled, one after the other. */
        polled: new Chain('polled requests and states'),
        /** Whole states, polled and taken at each install. */
        states: new Chain('whole states, polled and at each install'),
        installs: 0,
        problems: [] as string[]
      }
      lifecycle.follow({
        info (_object, message) {
          // The state just installed: an install is where a transaction could be torn.
          if (message !== 'change installed') return
          replica.installs++
          if (INSTALL_SAMPLES && !stop) check(replica, [replica.states], stateObservation(`its whole state at install ${replica.installs}`, servedOf(lifecycle)))
        },
        error (object: { problem?: string }, message) {
          replica.problems.push(`${message}: ${object.problem ?? ''}`)
          // A connection the faults cut is said at level error, and is no failure of the replica.
          if (!message.startsWith('cannot follow changes')) fail(replica, `logged an error: ${message}: ${object.problem ?? ''}`)
        },
        warn (object: { problem?: string }, message) { replica.problems.push(`${message}: ${object.problem ?? ''}`) }
      })
      return replica
    }))
    type Replica = (typeof replicas)[number]

    function fail (replica: Replica, message: string) {
      failures.push(`seed ${seed}, replica ${replica.name}, step ${committed} (M_${committed} committed${upper > committed ? `, M_${upper} committing` : ''}): ${message}` +
        (replica.problems.length > 0 ? `\n  it logged: ${replica.problems.slice(0, 5).join(' | ')}` : ''))
      stop = true
    }

    /** Moves each chain's earliest consistent state forward to what the observation allows, or fails. */
    function check (replica: Replica, chains: Chain[], observation: Observation) {
      const top = upper
      for (const chain of chains) {
        chain.observed++
        let found = -1
        for (let j = chain.low; j <= top; j++) {
          if (observation.matches(views[j]!)) {
            found = j
            break
          }
        }
        if (found >= 0) {
          if (found > chain.low) {
            chain.low = found
            chain.lowBy = `${observation.what}, which answered ${observation.answer} (observation ${chain.observed} of ${chain.name})`
          }
          continue
        }
        const older = views.slice(0, chain.low).filter((view) => observation.matches(view)).map((view) => view.index)
        const verdict = older.length > 0
          ? `went back: the states that give this are ${ranges(older)}, and it had already served M_${chain.low} or later (shown by ${chain.lowBy})`
          : `no state M_0..M_${top} gives this (a transaction installed in part?); it had served M_${chain.low} or later (shown by ${chain.lowBy})`
        const relevant = [chain.low, ...observation.around(views.slice(0, top + 1)), ...edges(older)]
        fail(replica, [
          `${observation.what} (${chain.name}) answered ${observation.answer}`,
          `  ${verdict}`,
          ...observation.explain(views.slice(0, top + 1)).map((line) => `  ${line}`),
          ...describeTransactions(relevant, top)
        ].join('\n'))
        return
      }
    }

    function stateObservation (what: string, served: Served): Observation {
      const nearest = (candidates: View[]) => candidates
        .map((view) => ({ view, diff: differences(served, view) }))
        .sort((a, b) => a.diff.length - b.diff.length || b.view.index - a.view.index)
        .slice(0, 3)
      return {
        what,
        answer: `${served.providers.length} providers, ${served.keys.size} keys, ${served.orgs.size} organizations`,
        matches: (view) => sameState(served, view),
        explain: (candidates) => nearest(candidates).flatMap(({ view, diff }) => [`nearest state M_${view.index}, ${diff.length} differences:`, ...diff.slice(0, 6).map((line) => `  ${line}`)]),
        around (candidates) {
          const indexes = nearest(candidates).map(({ view }) => view.index)
          const from = Math.min(...indexes)
          return Array.from({ length: Math.max(...indexes) - from + 1 }, (_, i) => from + i + 1)
        }
      }
    }

    /** The life of a key, for the messages: when it was minted, moved, revoked. */
    const history = (name: string) => {
      const events: string[] = []
      let previous: KeyRow | undefined
      for (const view of views) {
        const key = view.keys.get(name)
        if (key?.organization_id !== previous?.organization_id || (key === undefined) !== (previous === undefined)) {
          events.push(key === undefined ? `revoked at M_${view.index}` : `${previous === undefined ? 'minted' : 'moved'} to ${key.organization_id} at M_${view.index}`)
        }
        previous = key
      }
      return `${name} (${allKeys.find((key) => key.name === name)!.kind}): ${events.join(', ') || 'never committed'}`
    }

    function requestObservation (kind: 'providers' | 'members', key: KeyRow, status: number, body: string): Observation {
      const expected = (view: View): { status: number, body: string } => {
        const found = view.keys.get(key.name)
        if (found === undefined) return { status: 401, body: '' }
        if (kind === 'providers') return { status: 200, body: view.providersSig }
        if (found.kind !== 'management') return { status: 403, body: '' }
        const org = view.orgs.get(found.organization_id)
        return org === undefined ? { status: 404, body: '' } : { status: 200, body: org.page }
      }
      const parts = (candidates: View[]) => ({
        status: candidates.filter((view) => expected(view).status === status).map((view) => view.index),
        // Whatever the key: the providers listed, or a page of any organization.
        body: status !== 200 ? [] : candidates.filter((view) => kind === 'providers' ? view.providersSig === body : [...view.orgs.values()].some((org) => org.page === body)).map((view) => view.index)
      })
      return {
        what: `GET ${kind === 'providers' ? '/v1/providers' : `/v1/organization/members?offset=0&limit=${PAGE}`} with key ${key.name}`,
        answer: `${status}${status === 200 ? ` ${kind === 'providers' ? `[${body.split('\n').join(', ')}]` : showPage(body)}` : ''}`,
        matches: (view) => {
          const wanted = expected(view)
          return wanted.status === status && wanted.body === body
        },
        explain (candidates) {
          const { status: statuses, body: bodies } = parts(candidates)
          // A page no state gives: against the page of the key's organization in the last state that answers 200 for the key.
          const page = kind === 'members' && status === 200 && bodies.length === 0 ? statuses.at(-1) : undefined
          return [
            `key ${history(key.name)}`,
            `states that answer status ${status} for this key: ${ranges(statuses)}${status === 200 ? `; states that hold this ${kind === 'providers' ? 'list of providers' : 'page (in any organization)'}: ${ranges(bodies)}` : ''}`,
            ...page === undefined ? [] : [`the page of ${candidates[page]!.keys.get(key.name)!.organization_id}: ${pageDifference(body, expected(candidates[page]!).body, page)}`]
          ]
        },
        around (candidates) {
          const { status: statuses, body: bodies } = parts(candidates)
          // No state gives the body: the last few transactions.
          const last = candidates.length - 1
          return [...edges(statuses), ...edges(bodies), ...status === 200 && bodies.length === 0 ? [last - 2, last - 1, last] : []]
        }
      }
    }

    /** Keys the last few transactions minted, revoked or moved, or whose organization they changed: where a torn transaction shows. */
    const recentKeys = () => transactions.slice(Math.max(1, upper - 2), upper + 1).flatMap((txn) => [...txn.keys])
    const chooseKey = (management: boolean) => {
      const recent = recentKeys().map((name) => allKeys.find((key) => key.name === name)!).filter((key) => !management || key.kind === 'management' || poll.chance(0.15))
      if (recent.length > 0 && poll.chance(0.6)) return poll.pick(recent)
      const pool = management && poll.chance(0.85) ? allKeys.filter((key) => key.kind === 'management') : allKeys
      return poll.pick(pool)
    }

    async function ask (replica: Replica, kind: 'providers' | 'members', key: KeyRow) {
      const res = await replica.app.inject({ url: kind === 'providers' ? '/v1/providers' : `/v1/organization/members?offset=0&limit=${PAGE}`, headers: bearer(key.secret) })
      let body = ''
      if (res.statusCode === 200) {
        const json = res.json()
        body = kind === 'providers'
          ? (json.data as Provider[]).map(providerLine).join('\n')
          : pageOf(json.data, json.total_count)
      }
      return { status: res.statusCode, body }
    }

    let requests = 0
    let samples = 0
    async function pollReplica (replica: Replica) {
      while (!stop) {
        const roll = poll.random()
        if (roll < 0.2) {
          samples++
          const observation = stateObservation('its whole state, polled', servedOf(replica.lifecycle))
          check(replica, [replica.polled, replica.states], observation)
        } else {
          requests++
          const kind = roll < 0.6 ? 'providers' : 'members'
          const key = chooseKey(kind === 'members')
          const { status, body } = await ask(replica, kind, key)
          if (!stop) check(replica, [replica.polled], requestObservation(kind, key, status, body))
        }
        // Every few ms, or at once: writes, reads and installs interleave with the requests.
        const wait = poll.int(4)
        if (wait === 0) await new Promise((resolve) => setImmediate(resolve))
        else await sleep(wait)
      }
    }
    const pollers = replicas.map((replica) => pollReplica(replica))

    // The transactions, spread in time: some back to back, some a few ms apart, some far enough apart to be read alone.
    for (let step = 1; step <= STEPS && !stop; step++) {
      const txn = model.next(step)
      transactions.push(txn)
      views.push(model.view(step, views.at(-1)))
      await admin.query('BEGIN')
      for (const op of txn.ops.flatMap((op) => [op, ...op.then ?? []])) {
        try {
          await admin.query(op.text, op.values)
        } catch (error) {
          await admin.query('ROLLBACK')
          stop = true
          await Promise.all(pollers)
          throw new Error(`seed ${seed}, step ${step}: the model wrote a statement the database refused (${op.what}): ${(error as Error).message}`)
        }
      }
      upper = step
      await admin.query('COMMIT')
      committed = step
      await faults.after(step, proxy)
      const roll = g.random()
      if (roll < 0.25) continue
      await sleep(roll < 0.7 ? 1 + g.int(5) : 10 + g.int(50))
    }

    // Polled on while the replicas catch up: they must reach M_n.
    const last = views.at(-1)!
    const deadline = performance.now() + 15_000
    while (!stop && !replicas.every((replica) => sameState(servedOf(replica.lifecycle), last))) {
      if (performance.now() > deadline) {
        for (const replica of replicas) {
          const diff = differences(servedOf(replica.lifecycle), last)
          if (diff.length > 0) fail(replica, `did not converge to M_${last.index} within 15 s; it differs in:\n${diff.slice(0, 8).map((line) => `  ${line}`).join('\n')}`)
        }
        break
      }
      await sleep(20)
    }
    // And a while after, still polled: nothing moves.
    if (!stop) await sleep(200)
    stop = true
    await Promise.all(pollers)
    await faults.end()
    await proxy.close()

    // Converged: every key ever minted answers as M_n says, on both replicas.
    if (failures.length === 0) {
      for (const replica of replicas) {
        for (const key of allKeys) {
          for (const kind of ['providers', 'members'] as const) {
            const { status, body } = await ask(replica, kind, key)
            const observation = requestObservation(kind, key, status, body)
            if (!observation.matches(last)) fail(replica, `after converging, ${observation.what} answered ${observation.answer}, M_${last.index} answers otherwise\n  ${observation.explain(views).join('\n  ')}`)
          }
        }
      }
    }

    const seconds = ((performance.now() - started) / 1000).toFixed(1)
    console.log(`postgres-model: seed ${seed}: ${committed} transactions, ${requests} requests and ${samples} states polled, installs ${replicas.map((replica) => `${replica.name} ${replica.installs}`).join(', ')}, ` +
      `faults ${faults.describe()}, relists ${replicas.map((replica) => `${replica.name} ${replica.lifecycle.info().relists}`).join(', ')}, ` +
      `${failures.length === 0 ? 'no failure' : `${failures.length} failure(s)`} in ${seconds} s`)
    if (failures.length > 0) {
      expect.fail(`${failures.join('\n\n')}\n(replay with MODEL_SEED=${seed}${STEPS === 200 ? '' : ` MODEL_STEPS=${STEPS}`})`)
    }
  })
})
