import { hash } from 'node:crypto'
import type { ApiKey } from '../schemas/fixtures.js'
import type { Provider } from '../schemas/provider.js'
import type { Endpoint } from '../schemas/endpoint.js'
import { LayeredMap } from './layered-map.js'
import { hashId } from './member-list.js'
import { createSlicer } from './slices.js'
import { RECORD_KINDS, type Held, type Organization, type RecordKind } from './records.js'
import { serializeList, type SerializedList } from '../representation.js'
import { memberPagesOf, type MemberPage } from './views.js'

/**
 * A change to one kind, as a source reads it: every record of the kind, or the records a notice
 * named (`upsert`: those that exist, in full; `remove`: the keys of those that no longer do).
 */
export type PartChange<K extends RecordKind = RecordKind> =
  | { readonly kind: K, readonly all: ReadonlyArray<Held<K>> }
  | { readonly kind: K, readonly upsert: ReadonlyArray<Held<K>>, readonly remove: readonly string[] }

/** A list served whole (providers, endpoints): its records and its body, serialized once. */
interface ListPart<T> {
  readonly records: readonly T[]
  readonly list: SerializedList
}

/**
 * A kind changed record by record (organizations, keys): its records by key, in a LayeredMap, and
 * the sum of their hashes, which a change updates for the records it touches.
 */
interface KeyedPart<T> {
  readonly byKey: LayeredMap<string, T>
  readonly sum: number
}

interface KeyPart extends KeyedPart<ApiKey> {
  /** The same keys by SHA-256, for authentication. */
  readonly bySha: LayeredMap<string, ApiKey>
}

interface OrganizationPart extends KeyedPart<Organization> {
  /** Members of all organizations. */
  readonly members: number
}

export interface Parts {
  readonly providers: ListPart<Provider>
  readonly endpoints: ListPart<Endpoint>
  readonly organizations: OrganizationPart
  readonly keys: KeyPart
}

export type Part<K extends RecordKind> = Parts[K]

/** Records of each kind; `members` counts all organizations' members. */
export type RecordCounts = { [kind in RecordKind | 'members']: number }

/**
 * What a request is answered from: one immutable, versioned set of every kind's records and what the
 * hot path derives from them (the lists' bodies, the key index, the member pages). A change makes a
 * new snapshot that shares every part it did not touch, and, within a part, every record it did not
 * touch. A request reads the current snapshot once and answers from it to its last byte.
 */
export class Snapshot {
  private fingerprintMemo: string | undefined

  constructor (
    /** Counts the snapshots installed since the process started: 1 for the first. */
    readonly version: number,
    readonly parts: Parts,
    /** When it was installed (ms since the epoch). */
    readonly installedAt = Date.now()
  ) {}

  /** `{"data": Provider[]}` as JSON. */
  providers (): SerializedList {
    return this.parts.providers.list
  }

  /** `{"data": Endpoint[]}` as JSON. */
  zdrEndpoints (): SerializedList {
    return this.parts.endpoints.list
  }

  /** The key whose SHA-256 (lowercase hex) is given. */
  findKey (sha256: string): ApiKey | undefined {
    return this.parts.keys.bySha.get(sha256)
  }

  /** A page of the organization's members, or undefined when the organization does not exist. */
  memberPage (organizationId: string, offset: number, limit: number): MemberPage | undefined {
    const organization = this.parts.organizations.byKey.get(organizationId)
    return organization && memberPagesOf(organization.members).page(offset, limit)
  }

  counts (): RecordCounts {
    return {
      providers: this.parts.providers.records.length,
      endpoints: this.parts.endpoints.records.length,
      organizations: this.parts.organizations.byKey.size,
      members: this.parts.organizations.members,
      keys: this.parts.keys.byKey.size
    }
  }

  /**
   * 16 hex digits that depend on every record served and nothing else: replicas that serve the same
   * data show the same fingerprint, whatever their version numbers. Made of the lists' tags and the
   * sums of the records' hashes, so it costs nothing per record.
   */
  get fingerprint (): string {
    this.fingerprintMemo ??= hash('sha1', [
      this.parts.providers.list.representations.identity.etag,
      this.parts.endpoints.list.representations.identity.etag,
      this.parts.organizations.sum,
      this.parts.keys.sum
    ].join(','), 'hex').slice(0, 16)
    return this.fingerprintMemo
  }

  /** A new snapshot with `part` in place of its kind's, everything else shared. */
  withPart<K extends RecordKind> (kind: K, part: Part<K>, version: number): Snapshot {
    return new Snapshot(version, { ...this.parts, [kind]: part }, version === this.version ? this.installedAt : Date.now())
  }
}

/** The first snapshot, from every kind read whole. */
export async function createSnapshot (changes: { [K in RecordKind]: ReadonlyArray<Held<K>> }, version = 1): Promise<Snapshot> {
  const parts = Object.fromEntries(await Promise.all(RECORD_KINDS.map(async (kind) =>
    [kind, await applyChange(undefined, { kind, all: changes[kind] } as PartChange)] as const)))
  return new Snapshot(version, parts as unknown as Parts)
}

/** The part a change makes of the part it changes (undefined at start). */
export async function applyChange<K extends RecordKind> (previous: Part<K> | undefined, change: PartChange<K>): Promise<Part<K>> {
  const { kind } = change
  switch (kind) {
    case 'providers':
    case 'endpoints': {
      // A list is served as one body: any change serializes it again (a few hundred records).
      const records = 'all' in change ? change.all : applyToList(kind, (previous as ListPart<unknown>).records, change)
      return { records, list: serializeList(records) } as unknown as Part<K>
    }
    case 'organizations':
      return await applyKeyed(previous as OrganizationPart | undefined, change as PartChange<'organizations'>, organizationRules) as Part<K>
    case 'keys':
      return await applyKeyed(previous as KeyPart | undefined, change as PartChange<'keys'>, keyRules) as Part<K>
  }
  throw new Error(`unknown kind ${String(kind)}`)
}

/** Providers are keyed by slug: a change names the ones to replace, which keep their place. */
function applyToList (kind: 'providers' | 'endpoints', records: readonly unknown[], change: { upsert: readonly unknown[], remove: readonly string[] }): unknown[] {
  if (kind === 'endpoints') throw new Error('endpoints change as a whole list')
  const bySlug = new Map((change.upsert as Provider[]).map((record) => [record.slug, record]))
  const removed = new Set(change.remove)
  const kept = (records as Provider[]).filter((record) => !removed.has(record.slug)).map((record) => {
    const next = bySlug.get(record.slug)
    bySlug.delete(record.slug)
    return next ?? record
  })
  return [...kept, ...bySlug.values()]
}

/** What differs between the kinds changed record by record. */
interface KeyedRules<T, P extends KeyedPart<T>> {
  keyOf(record: T): string
  /** The same record as far as a request can tell: then the old object is kept. */
  same(a: T, b: T): boolean
  /** A hash of the record, below 2^52. */
  hashOf(record: T): number
  /** The part over a map, with its extra indexes updated for these changes. */
  make(byKey: LayeredMap<string, T>, sum: number, previous: P | undefined, changes: ReadonlyArray<readonly [string, T | undefined, T | undefined]>, rebuilt: boolean): P | Promise<P>
}

const HASH_RANGE = 2 ** 52
const hash52 = (text: string) => hashId(text) % HASH_RANGE

const keyRules: KeyedRules<ApiKey, KeyPart> = {
  keyOf: (key) => key.name,
  same: (a, b) => a.sha256 === b.sha256 && a.kind === b.kind && a.organization_id === b.organization_id,
  hashOf: (key) => hash52(`${key.name}\u0000${key.sha256}\u0000${key.kind}\u0000${key.organization_id}`),
  async make (byKey, sum, previous, changes, rebuilt) {
    if (rebuilt || previous === undefined) {
      const bySha = new Map<string, ApiKey>()
      const slicer = createSlicer()
      for (const key of byKey.values()) {
        bySha.set(key.sha256, key)
        if (slicer.due()) await slicer.pause()
      }
      return { byKey, sum, bySha: LayeredMap.of(bySha) }
    }
    // Old hashes out first, new ones in after: a hash that moves from one key to another in the
    // same change stays.
    const shaChanges: Array<[string, ApiKey | undefined]> = []
    for (const [, before] of changes) if (before) shaChanges.push([before.sha256, undefined])
    for (const [, , after] of changes) if (after) shaChanges.push([after.sha256, after])
    return { byKey, sum, bySha: previous.bySha.with(shaChanges) }
  }
}

const organizationRules: KeyedRules<Organization, OrganizationPart> = {
  keyOf: (organization) => organization.id,
  same: (a, b) => a.name === b.name && a.members.version === b.members.version,
  hashOf: (organization) => hash52(`${organization.id}\u0000${organization.name}\u0000${organization.members.version}`),
  make (byKey, sum, previous, changes, rebuilt) {
    let members = 0
    if (rebuilt || previous === undefined) {
      for (const organization of byKey.values()) members += organization.members.length
    } else {
      members = previous.members
      for (const [, before, after] of changes) members += (after?.members.length ?? 0) - (before?.members.length ?? 0)
    }
    return { byKey, sum, members }
  }
}

/** Changes larger than this build a new base rather than an overlay that would be folded at once. */
const REBUILD_FROM = 65536

async function applyKeyed<T, P extends KeyedPart<T>> (previous: P | undefined, change: PartChange, rules: KeyedRules<T, P>): Promise<P> {
  const slicer = createSlicer()
  const old = previous?.byKey
  let upsert: readonly T[]
  let remove: readonly string[]
  if ('all' in change) {
    const records = change.all as unknown as readonly T[]
    if (old === undefined) return await build(records)
    // Only what differs from the part in place: the rest keeps its objects and its place.
    const seen = new Set<string>()
    const changed: T[] = []
    for (const record of records) {
      const key = rules.keyOf(record)
      seen.add(key)
      const before = old.get(key)
      if (before === undefined || !rules.same(before, record)) changed.push(record)
      if (slicer.due()) await slicer.pause()
    }
    const gone: string[] = []
    for (const record of old.values()) {
      if (!seen.has(rules.keyOf(record))) gone.push(rules.keyOf(record))
      if (slicer.due()) await slicer.pause()
    }
    if (changed.length + gone.length > REBUILD_FROM) {
      // Keep the objects of the records that did not change: their derived forms go on being shared.
      return await build(records.map((record) => {
        const before = old.get(rules.keyOf(record))
        return before !== undefined && rules.same(before, record) ? before : record
      }))
    }
    upsert = changed
    remove = gone
  } else {
    upsert = change.upsert as unknown as readonly T[]
    remove = change.remove
  }
  if (old === undefined) throw new Error('a partial change needs the part it changes')
  let sum = previous!.sum
  const changes: Array<readonly [string, T | undefined, T | undefined]> = []
  for (const record of upsert) {
    const key = rules.keyOf(record)
    const before = old.get(key)
    if (before !== undefined && rules.same(before, record)) continue
    changes.push([key, before, record])
  }
  for (const key of remove) {
    const before = old.get(key)
    if (before !== undefined) changes.push([key, before, undefined])
  }
  for (const [, before, after] of changes) {
    if (before !== undefined) sum = (sum - rules.hashOf(before) + HASH_RANGE) % HASH_RANGE
    if (after !== undefined) sum = (sum + rules.hashOf(after)) % HASH_RANGE
  }
  const byKey = old.with(changes.map(([key, , after]) => [key, after] as const))
  return await rules.make(byKey, sum, previous, changes, false)

  async function build (records: readonly T[]): Promise<P> {
    const map = new Map<string, T>()
    let sum = 0
    for (const record of records) {
      map.set(rules.keyOf(record), record)
      sum = (sum + rules.hashOf(record)) % HASH_RANGE
      if (slicer.due()) await slicer.pause()
    }
    return await rules.make(LayeredMap.of(map), sum, undefined, [], true)
  }
}

/** The part with its maps folded into new bases, or undefined when none has grown enough to need it. */
export async function compactPart<K extends RecordKind> (part: Part<K>): Promise<Part<K> | undefined> {
  if (!('byKey' in part) || !part.byKey.overgrown) return undefined
  const byKey = await part.byKey.compacted()
  const bySha = 'bySha' in part ? await part.bySha.compacted() : undefined
  return { ...part, byKey, ...(bySha ? { bySha } : {}) } as Part<K>
}

/**
 * `current` moved onto the compaction of `from` (an earlier part of the same kind); undefined when
 * `current` is no longer over the same bases.
 */
export function rebasePart<K extends RecordKind> (current: Part<K>, from: Part<K>, compacted: Part<K>): Part<K> | undefined {
  if (!('byKey' in current) || !('byKey' in from) || !('byKey' in compacted)) return undefined
  const byKey = current.byKey.rebase(from.byKey as never, compacted.byKey as never)
  if (byKey === undefined) return undefined
  if (!('bySha' in current)) return { ...current, byKey } as Part<K>
  const bySha = current.bySha.rebase((from as KeyPart).bySha, (compacted as KeyPart).bySha)
  return bySha === undefined ? undefined : { ...current, byKey, bySha } as Part<K>
}
