import { hash } from 'node:crypto'
import type { ApiKey } from '../schemas/fixtures.js'
import type { Provider } from '../schemas/provider.js'
import type { Endpoint } from '../schemas/endpoint.js'
import { LayeredMap } from './layered-map.js'
import { KeyTable, KeyTableBuilder, hashOfKey } from './key-table.js'
import { hashId } from './member-list.js'
import { createSlicer } from './slices.js'
import { DataError, RECORD_KINDS, type Held, type Organization, type RecordKind } from './records.js'
import { quoteValue } from '../schemas/describe-error.js'
import { serializeList, type SerializedList } from '../representation.js'
import { memberPagesOf, type MemberPage } from './views.js'

/** Every record of a kind: keys may come as a KeyTable, built as they were read. */
export type Whole<K extends RecordKind> = K extends 'keys' ? ReadonlyArray<Held<K>> | KeyTable : ReadonlyArray<Held<K>>

/**
 * A change to one kind, as a source reads it: every record of the kind, or the records a notice
 * named (`upsert`: those that exist, in full; `remove`: the keys of those that no longer do).
 */
export type PartChange<K extends RecordKind = RecordKind> = (
  | { readonly kind: K, readonly all: Whole<K> }
  | { readonly kind: K, readonly upsert: ReadonlyArray<Held<K>>, readonly remove: readonly string[] }
) & {
  /**
   * Records the read refused one by one (a bad row among good ones), each kept at its last good
   * version: what is wrong with each, naming table, row and field.
   */
  readonly refused?: readonly string[]
  /** The rows the read took from the source, when it counts them: what the change cost. */
  readonly rowsRead?: number
}

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

/** Keys: a KeyTable, and the changes since it was built in the overlays of two maps over it. */
interface KeyPart extends KeyedPart<ApiKey> {
  readonly table: KeyTable
  /** The same keys by SHA-256, for authentication. */
  readonly bySha: LayeredMap<string, ApiKey>
}

interface OrganizationPart extends KeyedPart<Organization> {
  /** Members of all organizations. */
  readonly members: number
}

interface Parts {
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
export async function createSnapshot (changes: { [K in RecordKind]: Whole<K> }, version = 1): Promise<Snapshot> {
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
      if (!('all' in change)) throw new Error(`${kind} change as a whole list`)
      const records = change.all as readonly unknown[]
      return { records, list: serializeList(records) } as unknown as Part<K>
    }
    case 'organizations':
      return await applyOrganizations(previous as OrganizationPart | undefined, change as PartChange<'organizations'>) as Part<K>
    case 'keys':
      return await applyKeys(previous as KeyPart | undefined, change as PartChange<'keys'>) as Part<K>
  }
  throw new Error(`unknown kind ${String(kind)}`)
}

/** A record's key, its value before and after (undefined: absent). */
type Change<T> = readonly [key: string, before: T | undefined, after: T | undefined]

/** What differs between the kinds changed record by record. */
interface KeyedRules<T> {
  keyOf(record: T): string
  /** The same record as far as a request can tell: then the old object is kept. */
  same(a: T, b: T): boolean
  /** A hash of the record, below 2^52. */
  hashOf(record: T): number
}

const HASH_RANGE = 2 ** 52
const hash52 = (text: string) => hashId(text) % HASH_RANGE

const keyRules: KeyedRules<ApiKey> = {
  keyOf: (key) => key.name,
  same: (a, b) => a.sha256 === b.sha256 && a.kind === b.kind && a.organization_id === b.organization_id,
  hashOf: hashOfKey
}

const organizationRules: KeyedRules<Organization> = {
  keyOf: (organization) => organization.id,
  same: (a, b) => a.name === b.name && a.members.version === b.members.version,
  hashOf: (organization) => hash52(`${organization.id}\u0000${organization.name}\u0000${organization.members.version}`)
}

/**
 * Changes larger than this build a new base rather than an overlay that would be folded at once; an
 * overlay change is applied in one pass, and this many take some 60 ms.
 */
const REBUILD_FROM = 16384

/** The changes that `upsert` and `remove` make to `old`: a record equal to the one in place is none. */
function changesTo<T> (old: LayeredMap<string, T>, upsert: readonly T[], remove: readonly string[], rules: KeyedRules<T>): Array<Change<T>> {
  const changes: Array<Change<T>> = []
  for (const record of upsert) {
    const key = rules.keyOf(record)
    const before = old.get(key)
    if (before === undefined || !rules.same(before, record)) changes.push([key, before, record])
  }
  for (const key of remove) {
    const before = old.get(key)
    if (before !== undefined) changes.push([key, before, undefined])
  }
  return changes
}

/** The sum of the records' hashes after these changes. */
function sumAfter<T> (sum: number, changes: ReadonlyArray<Change<T>>, rules: KeyedRules<T>): number {
  for (const [, before, after] of changes) {
    if (before !== undefined) sum = (sum - rules.hashOf(before) + HASH_RANGE) % HASH_RANGE
    if (after !== undefined) sum = (sum + rules.hashOf(after)) % HASH_RANGE
  }
  return sum
}

async function applyOrganizations (previous: OrganizationPart | undefined, change: PartChange<'organizations'>): Promise<OrganizationPart> {
  const slicer = createSlicer()
  const old = previous?.byKey
  let changes: Array<Change<Organization>>
  if ('all' in change) {
    const records = change.all
    if (old === undefined) return await build(records)
    // Only what differs from the part in place: the rest keeps its objects and its place.
    const seen = new Set<string>()
    const changed: Organization[] = []
    for (const record of records) {
      seen.add(record.id)
      const before = old.get(record.id)
      if (before === undefined || !organizationRules.same(before, record)) changed.push(record)
      if (slicer.due()) await slicer.pause()
    }
    const gone: string[] = []
    for (const record of old.values()) {
      if (!seen.has(record.id)) gone.push(record.id)
      if (slicer.due()) await slicer.pause()
    }
    if (changed.length + gone.length > REBUILD_FROM) {
      // Keep the objects of the records that did not change: their derived forms go on being shared.
      return await build(records.map((record) => {
        const before = old.get(record.id)
        return before !== undefined && organizationRules.same(before, record) ? before : record
      }))
    }
    changes = changesTo(old, changed, gone, organizationRules)
  } else {
    if (previous === undefined) throw new Error('a partial change needs the part it changes')
    changes = changesTo(previous.byKey, change.upsert, change.remove, organizationRules)
  }
  return withOrganizationChanges(previous!, changes)

  async function build (records: readonly Organization[]): Promise<OrganizationPart> {
    const map = new Map<string, Organization>()
    let sum = 0
    let members = 0
    for (const record of records) {
      map.set(record.id, record)
      sum = (sum + organizationRules.hashOf(record)) % HASH_RANGE
      members += record.members.length
      if (slicer.due()) await slicer.pause()
    }
    return { byKey: LayeredMap.of(map), sum, members }
  }
}

function withOrganizationChanges (previous: OrganizationPart, changes: ReadonlyArray<Change<Organization>>): OrganizationPart {
  let members = previous.members
  for (const [, before, after] of changes) members += (after?.members.length ?? 0) - (before?.members.length ?? 0)
  return {
    byKey: previous.byKey.with(changes.map(([key, , after]) => [key, after] as const)),
    sum: sumAfter(previous.sum, changes, organizationRules),
    members
  }
}

/** The kinds changed record by record, by their keys. */
export type KeyedKind = 'keys' | 'organizations'

/**
 * A keyed part with these records put in and the records of these keys taken out, at once (no
 * turn of the event loop): what a change that names its records makes.
 */
export function withRecords<K extends KeyedKind> (part: Part<K>, upsert: ReadonlyArray<Held<K>>, remove: readonly string[]): Part<K> {
  if ('table' in part) return withKeyChanges(part, changesTo(part.byKey, upsert as readonly ApiKey[], remove, keyRules)) as Part<K>
  const organizations = part as OrganizationPart
  return withOrganizationChanges(organizations, changesTo(organizations.byKey, upsert as readonly Organization[], remove, organizationRules)) as Part<K>
}

/** The part of keys whose base is `table`, without changes above it. */
function keyPartOf (table: KeyTable): KeyPart {
  return { table, byKey: LayeredMap.of(table.byName), bySha: LayeredMap.of(table.bySha), sum: table.sum }
}

async function applyKeys (previous: KeyPart | undefined, change: PartChange<'keys'>): Promise<KeyPart> {
  if (previous === undefined) {
    if (!('all' in change)) throw new Error('a partial change needs the part it changes')
    return keyPartOf(change.all instanceof KeyTable ? change.all : KeyTable.of(change.all, 'keys'))
  }
  // A table is what a source reads when most keys changed: the new base.
  if ('all' in change && change.all instanceof KeyTable) return keyPartOf(change.all)
  if ('all' in change) {
    const all = change.all as readonly ApiKey[]
    change = await readKeyChange(previous, 'keys', async (add) => { for (const key of all) add(key) })
    if ('all' in change) return keyPartOf(change.all as KeyTable)
  }
  return withKeyChanges(previous, changesTo(previous.byKey, change.upsert, change.remove, keyRules))
}

/** Thrown by KeyDiff past REBUILD_FROM changes. */
const TOO_MANY = Symbol('too many changes')

/**
 * Every key, read by `read` (which hands each to `add`, in order), as a change to the keys in
 * `previous`: the keys that differ and the names gone, when they are few, so that a revocation in
 * a million keys costs a lookup a key and a new overlay entry; or a new KeyTable when more than
 * REBUILD_FROM differ, removals included (then `read` runs twice). A name or a SHA-256 met twice is
 * a DataError naming both records (`where: [5].name: ... duplicates [2].name`); when a file holds
 * several repeats, the pair named may not be the first a whole check would name.
 */
export async function readKeyChange (previous: KeyPart | undefined, where: string, read: (add: (key: ApiKey) => void) => Promise<void>): Promise<PartChange<'keys'>> {
  if (previous !== undefined) {
    const diff = new KeyDiff(previous, where)
    try {
      await read((key) => diff.add(key))
      return diff.finish()
    } catch (error) {
      if (error !== TOO_MANY) throw error
    }
  }
  const builder = new KeyTableBuilder(where, previous?.byKey.size)
  await read((key) => builder.add(key))
  return { kind: 'keys', all: builder.finish() }
}

/** The keys read, compared one by one with those in place (KeyPart: a table and an overlay above it). */
class KeyDiff {
  /** Per row of the table: 1 + the index of the record read with its name; 0 while none was. */
  private readonly seen: Int32Array
  /** Names read that are not in the table, or that the overlay holds: where they were read. */
  private readonly others = new Map<string, number>()
  /** Keys read that differ from those in place, by name, and where they were read. */
  private readonly changed = new Map<string, { key: ApiKey, index: number }>()
  private count = 0

  constructor (private readonly previous: KeyPart, private readonly where: string) {
    this.seen = new Int32Array(previous.table.size)
  }

  add (key: ApiKey) {
    const index = this.count++
    const { table, byKey } = this.previous
    const row = byKey.overlays(key.name) ? -1 : table.rowOfName(key.name)
    if (row >= 0) {
      if (this.seen[row] !== 0) this.duplicate(index, 'name', key.name, this.seen[row]! - 1)
      this.seen[row] = index + 1
      if (table.sameKey(row, key)) return
    } else {
      const first = this.others.get(key.name)
      if (first !== undefined) this.duplicate(index, 'name', key.name, first)
      this.others.set(key.name, index)
      const before = byKey.get(key.name)
      if (before !== undefined && keyRules.same(before, key)) return
    }
    // Only what it becomes: withKeyChanges looks up what it was.
    this.changed.set(key.name, { key, index })
    if (this.changed.size > REBUILD_FROM) throw TOO_MANY
  }

  finish (): PartChange<'keys'> {
    const { table, byKey, bySha } = this.previous
    let gone = 0
    for (let row = 0; row < table.size; row++) if (this.seen[row] === 0) gone++
    // Removals count too: a file cut from a million keys to a hundred is a new table, not a million tombstones.
    if (this.changed.size + gone > REBUILD_FROM) throw TOO_MANY
    const remove: string[] = []
    for (let row = 0; row < table.size; row++) {
      if (this.seen[row] === 0 && !byKey.overlays(table.nameOf(row))) remove.push(table.nameOf(row))
    }
    for (const name of byKey.overlaid()) {
      if (!this.others.has(name) && byKey.get(name) !== undefined) remove.push(name)
    }
    const removed = new Set(remove)
    // A SHA-256 a changed key takes must be free: held by no other changed key, and by no key in
    // place that keeps it.
    const shas = new Map<string, number>()
    for (const { key, index } of this.changed.values()) {
      const first = shas.get(key.sha256)
      if (first !== undefined) this.duplicate(Math.max(index, first), 'sha256', undefined, Math.min(index, first))
      shas.set(key.sha256, index)
      const holder = bySha.get(key.sha256)
      if (holder === undefined || holder.name === key.name || removed.has(holder.name)) continue
      const next = this.changed.get(holder.name)
      if (next !== undefined && next.key.sha256 !== key.sha256) continue
      const at = next?.index ?? this.indexOf(holder.name)
      this.duplicate(Math.max(index, at), 'sha256', undefined, Math.min(index, at))
    }
    return { kind: 'keys', upsert: [...this.changed.values()].map(({ key }) => key), remove }
  }

  /** Where the key of this name, unchanged, was read. */
  private indexOf (name: string): number {
    const row = this.previous.byKey.overlays(name) ? -1 : this.previous.table.rowOfName(name)
    return row >= 0 ? this.seen[row]! - 1 : this.others.get(name)!
  }

  private duplicate (index: number, field: 'name' | 'sha256', value: string | undefined, first: number): never {
    throw new DataError(`${this.where}: [${index}].${field}: ${quoteValue(value, field)} duplicates [${first}].${field}`)
  }
}

function withKeyChanges (previous: KeyPart, changes: ReadonlyArray<Change<ApiKey>>): KeyPart {
  // Old hashes out first, new ones in after: a hash that moves from one key to another in the
  // same change stays.
  const shaChanges: Array<[string, ApiKey | undefined]> = []
  for (const [, before] of changes) if (before) shaChanges.push([before.sha256, undefined])
  for (const [, , after] of changes) if (after) shaChanges.push([after.sha256, after])
  return {
    table: previous.table,
    byKey: previous.byKey.with(changes.map(([key, , after]) => [key, after] as const)),
    bySha: previous.bySha.with(shaChanges),
    sum: sumAfter(previous.sum, changes, keyRules)
  }
}

/** The part with its maps folded into new bases, or undefined when none has grown enough to need it. */
export async function compactPart<K extends RecordKind> (part: Part<K>): Promise<Part<K> | undefined> {
  if (!('byKey' in part) || !part.byKey.overgrown) return undefined
  if (!('table' in part)) return { ...part, byKey: await part.byKey.compacted() } as Part<K>
  // Keys: the rows of the table that no change touched, then the keys the changes left.
  const slicer = createSlicer()
  const builder = new KeyTableBuilder('keys', part.byKey.size)
  for (let row = 0; row < part.table.size; row++) {
    if (!part.byKey.overlays(part.table.nameOf(row))) builder.copy(part.table, row)
    if (slicer.due()) await slicer.pause()
  }
  for (const name of part.byKey.overlaid()) {
    const key = part.byKey.get(name)
    if (key !== undefined) builder.add(key)
    if (slicer.due()) await slicer.pause()
  }
  return keyPartOf(builder.finish()) as Part<K>
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
  return bySha === undefined ? undefined : { ...current, table: (compacted as KeyPart).table, byKey, bySha } as Part<K>
}
