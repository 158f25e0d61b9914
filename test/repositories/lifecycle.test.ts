import { afterEach, describe, expect, it } from 'vitest'
import { createLifecycle, type Lifecycle } from '../../src/repositories/lifecycle.js'
import { DataError } from '../../src/repositories/records.js'
import { KINDS, RECORD_KINDS, type RecordKind } from '../../src/registry.js'
import type { Batch, Change, Refusal, Source, SourceEvents } from '../../src/repositories/source.js'
import type { ApiKey } from '../../src/schemas/keys-and-organizations.js'
import { makeData, watchLifecycle } from '../helper.js'

/**
 * A Source over records held in memory, for the lifecycle's own tests: a numbered log of what each
 * commit changed (a kind whole, or records by key), read as PostgreSQL's is, from a position. A test
 * can hold reads (`hold`), make them fail (`failNext`), or make a kind's data bad (`refusing`).
 */
function memorySource () {
  const data = makeData()
  const records = Object.fromEntries(Object.entries(data).map(([kind, list]) => [kind, [...list]])) as unknown as { [K in RecordKind]: Array<Record<string, unknown>> }
  const keyOf = (kind: RecordKind): string => KINDS[kind].key ?? 'name'
  const log: Array<{ kind: RecordKind, keys?: readonly string[] }> = []
  let events: SourceEvents | undefined
  let gate: Promise<void> | undefined
  const source = {
    records,
    /** The positions each read started from ('list' for a whole one). */
    reads: [] as string[],
    /** Holds every read until the function it answers is called. */
    hold (): () => void {
      let release = () => {}
      gate = new Promise((resolve) => { release = resolve })
      return () => { gate = undefined; release() }
    },
    /** Kinds whose data is bad: refused, each alone. */
    refusing: new Set<RecordKind>(),
    /** Reads that fail before answering (a connection cut), however many come next. */
    failNext: 0,
    /** Commits a change of a kind (of these keys, or whole) and wakes the lifecycle. */
    commit (...changes: Array<{ kind: RecordKind, keys?: readonly string[] }>) {
      log.push(...changes)
      events?.wake()
    },
    name: 'memory',
    location: 'memory',
    mode: 'notify' as const,
    async list (): Promise<Batch> {
      source.reads.push('list')
      return read(RECORD_KINDS.map((kind) => ({ kind })))
    },
    async changesSince (position: string): Promise<Batch> {
      source.reads.push(position)
      return read(log.slice(Number(position)))
    },
    async watch (handlers: SourceEvents) { events = handlers },
    async close () {}
  } satisfies Source & Record<string, unknown>

  /** What these entries changed, read as of now (one position: the log's length). */
  async function read (entries: ReadonlyArray<{ kind: RecordKind, keys?: readonly string[] }>): Promise<Batch> {
    const position = String(log.length)
    const now = Object.fromEntries(RECORD_KINDS.map((kind) => [kind, records[kind].slice()])) as typeof records
    await gate
    if (source.failNext > 0) {
      source.failNext--
      throw new Error('Connection terminated unexpectedly')
    }
    const named = new Map<RecordKind, Set<string> | 'all'>()
    for (const { kind, keys } of entries) {
      const names = named.get(kind) ?? new Set<string>()
      if (keys === undefined || names === 'all') named.set(kind, 'all')
      else named.set(kind, new Set([...names, ...keys]))
    }
    const changes = RECORD_KINDS.filter((kind) => named.has(kind)).map((kind): Change | Refusal => {
      if (source.refusing.has(kind)) return { kind, error: new DataError(`${kind}.json: [0]: bad`) }
      const keys = named.get(kind)!
      if (keys === 'all') return { kind, whole: now[kind] } as unknown as Change
      const upsert = now[kind].filter((record) => keys.has(record[keyOf(kind)] as string))
      return { kind, upsert, remove: [...keys].filter((key) => !upsert.some((record) => record[keyOf(kind)] === key)) } as unknown as Change
    })
    return { position, changes }
  }
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

describe('the lifecycle of the data', () => {
  it('installs what one read hands over of several kinds as one snapshot, one version', async () => {
    const source = memorySource()
    const { until } = await follow(source)
    const version = lifecycle!.info().version
    source.records.providers = source.records.providers.slice(1)
    source.records.keys = source.records.keys.filter((record) => record.name !== 'alpha-standard')
    source.commit({ kind: 'providers' }, { kind: 'keys', keys: ['alpha-standard'] })
    await until((data) => data.providers.length === 2 && data.keys.length === 3)
    expect(lifecycle!.info().version).toBe(version + 1)
  })

  it('reads from the position it installed last, once, for the wake-ups that came while it read', async () => {
    const source = memorySource()
    const { until } = await follow(source)
    const release = source.hold()
    source.records.keys.push(key('first'))
    source.commit({ kind: 'keys', keys: ['first'] })
    await expect.poll(() => source.reads.length).toBe(2)
    for (const name of ['second', 'third']) {
      source.records.keys.push(key(name))
      source.commit({ kind: 'keys', keys: [name] })
    }
    release()
    await until((data) => data.keys.length === 7)
    // The list at 0; then from 0, which read "first" at position 1; then from 1, for the two others.
    expect(source.reads).toEqual(['list', '0', '1'])
  })

  it('refuses a bad kind alone: the kind read with it installs, and the bad one keeps its last good records', async () => {
    const source = memorySource()
    const { until, refusal } = await follow(source)
    source.refusing.add('providers')
    source.records.providers = source.records.providers.slice(1)
    source.records.keys = source.records.keys.slice(1)
    source.commit({ kind: 'providers' }, { kind: 'keys' })
    expect(await refusal()).toEqual({ kind: 'providers', problem: 'providers.json: [0]: bad' })
    await until((data) => data.keys.length === 3)
    expect(lifecycle!.current().counts().providers).toBe(3)
    expect(lifecycle!.info().changes.providers).toEqual({ succeeded: 0, failed: 1 })
    // A change of the bad kind reads it again: the fix brings it in.
    source.refusing.clear()
    source.commit({ kind: 'providers' })
    await until((data) => data.providers.length === 2)
  })

  it('reads again from the same position after a read that failed, and installs what it then reads', async () => {
    const source = memorySource()
    const { until, warnings } = await follow(source)
    source.failNext = 2
    source.records.keys = source.records.keys.slice(1)
    source.commit({ kind: 'keys' })
    await until((data) => data.keys.length === 3)
    expect(warnings).toHaveLength(2)
    expect(lifecycle!.info().readFailures).toBe(2)
    expect(source.reads).toEqual(['list', '0', '0', '0'])
  })

  it('lists every kind again on reload, and follows on from there', async () => {
    const source = memorySource()
    const { until, installs } = await follow(source)
    source.records.keys.push(key('quiet'))
    lifecycle!.reload()
    await until((data) => data.keys.length === 5)
    expect(await installs(RECORD_KINDS.length)).toBe(RECORD_KINDS.length)
    source.records.keys = source.records.keys.filter((record) => record.name !== 'quiet')
    source.commit({ kind: 'keys', keys: ['quiet'] })
    await until((data) => data.keys.length === 4)
    expect(source.reads).toEqual(['list', 'list', '0'])
  })
})
