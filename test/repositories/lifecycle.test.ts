import { afterEach, describe, expect, it } from 'vitest'
import { createLifecycle, type Lifecycle } from '../../src/repositories/lifecycle.js'
import { DataError, type RecordKind } from '../../src/repositories/records.js'
import type { Change, ReadRequest, Source, SourceEvents } from '../../src/repositories/source.js'
import { MemberList } from '../../src/repositories/member-list.js'
import type { ApiKey } from '../../src/schemas/fixtures.js'
import { makeData, watchLifecycle } from '../helper.js'

/**
 * A Source over records held in memory, for the lifecycle's own tests: it reads what it holds when
 * asked, names what changed, and lets a test hold a read (`gate`) or make reads fail (`failing`).
 */
function memorySource () {
  const data = makeData()
  const records = Object.fromEntries(Object.entries(data).map(([kind, list]) => [kind, [...list]])) as unknown as { [K in RecordKind]: Array<Record<string, unknown>> }
  const keyOf: { [K in RecordKind]: string } = { providers: 'slug', endpoints: 'name', organizations: 'id', keys: 'name' }
  let events: SourceEvents | undefined
  const reads: Array<{ kind: RecordKind, keys: readonly string[] | 'all' }> = []
  const source = {
    records,
    reads,
    /** Held reads, by kind and `all` or `named`. */
    gates: new Map<string, Promise<void>>(),
    /** Holds the reads of a kind, whole or named, until the function it answers is called. */
    hold (kind: RecordKind, keys: 'all' | 'named'): () => void {
      let release = () => {}
      source.gates.set(`${kind}:${keys}`, new Promise((resolve) => { release = resolve }))
      return release
    },
    /** Reads of names that fail, as a name no table can hold makes them fail. */
    failing: new Set<string>(),
    /** Kinds whose data is bad: refused, each alone. */
    refusing: new Set<RecordKind>(),
    /** Reads that fail before answering (a connection cut), however many come next. */
    failNext: 0,
    change (kind: RecordKind, keys?: string[]) { events!.changed(kind, keys) },
    name: 'memory',
    location: 'memory',
    async read (requests: readonly ReadRequest[]): Promise<Array<Change | DataError>> {
      // One version: every kind asked for as it is now.
      const snapshots = requests.map(({ kind }) => records[kind].slice())
      for (const { kind, keys } of requests) reads.push({ kind, keys })
      for (const { kind, keys } of requests) await source.gates.get(`${kind}:${keys === 'all' ? 'all' : 'named'}`)
      if (source.failNext > 0) {
        source.failNext--
        throw new Error('Connection terminated unexpectedly')
      }
      return requests.map(({ kind, keys }, index) => {
        const snapshot = snapshots[index]!
        if (source.refusing.has(kind)) return new DataError(`${kind}.json: [0]: bad`)
        if (keys === 'all') return { kind, all: snapshot } as unknown as Change
        if (keys.some((key) => source.failing.has(key))) throw new Error('invalid byte sequence for encoding "UTF8": 0x00')
        const upsert = snapshot.filter((record) => keys.includes(record[keyOf[kind]] as string))
        return { kind, upsert, remove: keys.filter((key) => !upsert.some((record) => record[keyOf[kind]] === key)) } as unknown as Change
      })
    },
    watch (handlers: SourceEvents) { events = handlers },
    async close () {}
  } satisfies Source & Record<string, unknown>
  return source
}

let lifecycle: Lifecycle | undefined
afterEach(() => lifecycle?.close())

async function follow (source: ReturnType<typeof memorySource>) {
  lifecycle = createLifecycle(source)
  await lifecycle.load()
  return { lifecycle, ...watchLifecycle(lifecycle) }
}

const key = (name: string, organization = 'org_alpha'): ApiKey => ({ name, sha256: name.padEnd(64, '0').replace(/[^0-9a-f]/g, 'a'), kind: 'standard', organization_id: organization })

/**
 * Creates org_new and moves a new key `moved` into it, the organization's read held until `release()`:
 * resolves once the key's read is installed (without the key, which waits for its organization).
 */
async function keyIntoOrganizationBeingRead (source: ReturnType<typeof memorySource>) {
  const release = source.hold('organizations', 'named')
  source.records.organizations.push({ id: 'org_new', name: 'New', members: MemberList.of([]) })
  source.change('organizations', ['org_new'])
  source.records.keys.push(key('moved', 'org_new'))
  source.change('keys', ['moved'])
  await expect.poll(() => lifecycle!.info().version).toBeGreaterThan(1)
  return release
}

describe('the lifecycle of the data', () => {
  it('installs the kinds one burst of notices asks to read whole from one read, as one version', async () => {
    const source = memorySource()
    const { until } = await follow(source)
    const version = lifecycle!.info().version
    source.records.providers = source.records.providers.slice(1)
    source.records.keys = source.records.keys.slice(1)
    source.change('providers')
    source.change('keys')
    await until((data) => data.providers.length === 2 && data.keys.length === 3)
    expect(lifecycle!.info().version).toBe(version + 1)
    expect(source.reads.slice(-2)).toEqual([{ kind: 'providers', keys: 'all' }, { kind: 'keys', keys: 'all' }])
  })

  it('refuses a bad kind alone: the kind read with it installs, and the bad one keeps its last good records', async () => {
    const source = memorySource()
    const { until, refusal } = await follow(source)
    source.refusing.add('providers')
    source.records.providers = source.records.providers.slice(1)
    source.records.keys = source.records.keys.slice(1)
    source.change('providers')
    source.change('keys')
    expect(await refusal()).toEqual({ kind: 'providers', problem: 'providers.json: [0]: bad' })
    await until((data) => data.keys.length === 3)
    expect(lifecycle!.current().counts().providers).toBe(3)
    expect(lifecycle!.info().changes.providers).toEqual({ succeeded: 0, failed: 1 })
    source.refusing.clear()
    source.change('providers')
    await until((data) => data.providers.length === 2)
  })

  it('reads again after a read that failed, and installs what it then reads', async () => {
    const source = memorySource()
    const { until, warnings } = await follow(source)
    source.failNext = 2
    source.records.keys = source.records.keys.slice(1)
    source.change('keys')
    await until((data) => data.keys.length === 3)
    expect(warnings).toHaveLength(2)
    expect(lifecycle!.info().readFailures.keys).toBe(2)
  })

  it('installs a revocation while another kind is being read whole', async () => {
    const source = memorySource()
    const { until } = await follow(source)
    const release = source.hold('organizations', 'all')
    source.records.organizations = source.records.organizations.slice(1)
    source.change('organizations')
    await expect.poll(() => source.reads.some((read) => read.kind === 'organizations' && read.keys === 'all')).toBe(true)
    source.records.keys = source.records.keys.filter((record) => record.name !== 'alpha-standard')
    source.change('keys', ['alpha-standard'])
    await until((data) => !data.keys.some((record) => record.name === 'alpha-standard'))
    expect(lifecycle!.current().counts().organizations).toBe(2)
    release()
    await until((data) => data.organizations.length === 1)
  })

  it('reads the kind whole once a read of named records has failed twice, so that a bad name holds back nothing', async () => {
    const source = memorySource()
    const { until, warnings } = await follow(source)
    source.failing.add('\u0000')
    source.change('keys', ['\u0000'])
    source.records.keys = source.records.keys.filter((record) => record.name !== 'alpha-standard')
    source.change('keys', ['alpha-standard'])
    await until((data) => !data.keys.some((record) => record.name === 'alpha-standard'))
    expect(warnings.length).toBeGreaterThanOrEqual(1)
    expect(source.reads.at(-1)).toEqual({ kind: 'keys', keys: 'all' })
    expect(lifecycle!.info().readFailures.keys).toBeGreaterThanOrEqual(1)
  })

  it('installs named records while a whole read of their kind is held, and the whole read keeps them when it installs', async () => {
    const source = memorySource()
    const { until } = await follow(source)
    const release = source.hold('keys', 'all')
    source.records.keys.push(key('bulk-1'), key('bulk-2'))
    source.change('keys')
    await expect.poll(() => source.reads.some((read) => read.keys === 'all')).toBe(true)
    // Read whole while alpha-standard still held: the whole read must not bring it back.
    source.records.keys = source.records.keys.filter((record) => record.name !== 'alpha-standard')
    source.change('keys', ['alpha-standard'])
    await until((data) => !data.keys.some((record) => record.name === 'alpha-standard'))
    expect(lifecycle!.current().counts().keys).toBe(3)
    release()
    await until((data) => data.keys.length === 5)
    expect(lifecycle!.current().indexes.keys.byKey.get('alpha-standard')).toBeUndefined()
  })

  it('holds a key whose organization is being read until the organization is installed', async () => {
    const source = memorySource()
    const orphans: string[] = []
    lifecycle = createLifecycle(source)
    await lifecycle.load()
    lifecycle.follow({
      info () {
        const moved = lifecycle!.current().indexes.keys.byKey.get('moved')
        if (moved !== undefined && lifecycle!.current().indexes.organizations.byKey.get(moved.organization_id) === undefined) orphans.push(moved.name)
      },
      error () {},
      warn () {}
    })
    const release = await keyIntoOrganizationBeingRead(source)
    await new Promise((resolve) => setTimeout(resolve, 50))
    expect(lifecycle.current().indexes.keys.byKey.get('moved')).toBeUndefined()
    release()
    await expect.poll(() => lifecycle!.current().indexes.keys.byKey.get('moved')?.organization_id).toBe('org_new')
    expect(orphans).toEqual([])
  })

  it('never installs a held key after a whole read of the keys has removed it', async () => {
    const source = memorySource()
    const { until } = await follow(source)
    const release = await keyIntoOrganizationBeingRead(source)
    // Revoked by a statement too large to name its keys: a whole read.
    source.records.keys = source.records.keys.filter((record) => record.name !== 'moved' && record.name !== 'alpha-standard')
    source.change('keys')
    await until((data) => !data.keys.some((record) => record.name === 'alpha-standard'))
    release()
    await until((data) => data.organizations.some((organization) => organization.id === 'org_new'))
    await new Promise((resolve) => setTimeout(resolve, 100))
    expect(lifecycle!.current().indexes.keys.byKey.get('moved')).toBeUndefined()
  })

  it('removes an organization only once the keys moving out of it are read', async () => {
    const source = memorySource()
    lifecycle = createLifecycle(source)
    await lifecycle.load()
    const orphaned: string[] = []
    lifecycle.follow({
      info () {
        const key = lifecycle!.current().indexes.keys.byKey.get('alpha-standard')!
        if (lifecycle!.current().indexes.organizations.byKey.get(key.organization_id) === undefined) orphaned.push(key.organization_id)
      },
      error () {},
      warn () {}
    })
    const release = source.hold('keys', 'named')
    // One transaction: every key of org_alpha moves to org_beta, and org_alpha goes.
    source.records.keys = source.records.keys.map((record) => record.organization_id === 'org_alpha' ? { ...record, organization_id: 'org_beta' } : record)
    source.records.organizations = source.records.organizations.filter((record) => record.id !== 'org_alpha')
    const moved = source.records.keys.filter((record) => record.organization_id === 'org_beta').map((record) => record.name as string)
    source.change('organizations', ['org_alpha'])
    source.change('keys', moved)
    await expect.poll(() => source.reads.filter((read) => read.kind === 'organizations').length).toBe(2)
    await new Promise((resolve) => setTimeout(resolve, 50))
    expect(lifecycle.current().indexes.organizations.byKey.get('org_alpha')).toBeDefined()
    release()
    await expect.poll(() => lifecycle!.current().indexes.organizations.byKey.get('org_alpha')).toBeUndefined()
    expect(lifecycle.current().indexes.keys.byKey.get('alpha-standard')!.organization_id).toBe('org_beta')
    expect(orphaned).toEqual([])
  })
})
