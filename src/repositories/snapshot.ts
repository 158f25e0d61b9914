import { hash } from 'node:crypto'
import type { ApiKey } from '../schemas/keys-and-organizations.js'
import { LayeredMap } from './layered-map.js'
import { KeyTable, KeyTableBuilder, expiryOf, hashOfKey, isPreviousSecret, nameHash, sameKey, secretOwner } from './key-table.js'
import { createSlicer } from './slices.js'
import { type Loaded, type Organization } from './records.js'
import { KINDS, LIST_KINDS, RECORD_KINDS, type RecordKind } from '../registry.js'
import type { Change, RefusedKeys, Whole } from './source.js'
import { serializeList, type SerializedList } from '../representation.js'
import type { MemberList } from './member-list.js'
import type { ListKind } from '../registry.js'

/** A list served whole (providers, endpoints): its records and its body, serialized once. */
interface ListIndex<T> {
  readonly records: readonly T[]
  readonly list: SerializedList
}

/**
 * A kind changed record by record (organizations, keys): its records by key, in a LayeredMap, and
 * the sum of their hashes, which a change updates for the records it touches.
 */
interface KeyedIndex<T> {
  readonly byKey: LayeredMap<string, T>
  readonly sum: number
}

/** Keys: a KeyTable, and the changes since it was built in the overlays of the maps over it. */
interface KeyIndex extends KeyedIndex<ApiKey> {
  readonly table: KeyTable
  /** The same keys by every secret that authenticates them (asPrevious), for authentication. */
  readonly bySha: LayeredMap<string, ApiKey>
  /** The names of the keys that name each previous secret: whether one key alone does. */
  readonly byPrevious: LayeredMap<string, readonly string[]>
}

interface OrganizationIndex extends KeyedIndex<Organization> {
  /** Members of all organizations. */
  readonly members: number
  /**
   * The organizations the source holds but whose records were refused (more members than the most,
   * a bad member row), with what is wrong: not served, yet told apart from one that does not exist,
   * whose keys' holders would otherwise be told their organization is gone.
   */
  readonly refused: ReadonlyMap<string, string>
}

/** How the snapshot indexes each kind, by the registry's `index`. */
type Indexes = {
  readonly [K in RecordKind]: (typeof KINDS)[K]['index'] extends 'list' ? ListIndex<Loaded<K>>
    : (typeof KINDS)[K]['index'] extends 'keys' ? KeyIndex : OrganizationIndex
}

export type Index<K extends RecordKind> = Indexes[K]

/** Any kind's index, for the code that walks the registry. */
type AnyIndex = ListIndex<unknown> | KeyIndex | OrganizationIndex


/** Records of each kind; `members` counts all organizations' members. */
export type RecordCounts = { [kind in RecordKind | 'members']: number }

/**
 * What a request is answered from: one immutable, versioned set of every kind's records and what the
 * hot path derives from them (the lists' bodies, the key index, the member pages). A change makes a
 * new snapshot that shares every index it did not touch, and, within an index, every record it did not
 * touch. A request reads the current snapshot once and answers from it to its last byte.
 */
export class Snapshot {
  private fingerprintMemo: string | undefined

  constructor (
    /** Counts the snapshots installed since the process started: 1 for the first. */
    readonly version: number,
    readonly indexes: Indexes,
    /** When it was installed (ms since the epoch). */
    readonly installedAt = Date.now()
  ) {}

  /** A kind served as a list whole, `{"data": [...]}` as JSON. */
  list (kind: ListKind): SerializedList {
    return this.indexes[kind].list
  }

  /** The key whose SHA-256 (lowercase hex) is given. */
  findKey (sha256: string): ApiKey | undefined {
    return this.indexes.keys.bySha.get(sha256)
  }

  /** When a key this snapshot found expires (ms since the epoch): NaN never, -Infinity when its expiry is no time at all. */
  expiryOf (key: ApiKey): number {
    return expiryOf(key)
  }

  /** Whether this snapshot found the key by the secret it had before its last rotation. */
  isPreviousSecret (key: ApiKey): boolean {
    return isPreviousSecret(key)
  }

  /** The organization's members, or undefined when the organization does not exist or is refused. */
  members (organizationId: string): MemberList | undefined {
    return this.indexes.organizations.byKey.get(organizationId)?.members
  }

  /** Starts compressing the lists on the thread pool, in the codings not made yet. */
  compressLists () {
    for (const kind of LIST_KINDS) this.list(kind).compressInBackground()
  }

  /** Whether the source holds the organization but its records were refused, so that it is not served. */
  isRefused (organizationId: string): boolean {
    return this.indexes.organizations.refused.has(organizationId)
  }

  counts (): RecordCounts {
    const counts = Object.fromEntries(RECORD_KINDS.map((kind) => {
      const index = this.indexes[kind] as AnyIndex
      return [kind, 'records' in index ? index.records.length : index.byKey.size]
    })) as RecordCounts
    counts.members = this.indexes.organizations.members
    return counts
  }

  /**
   * 16 hex digits that depend on every record served and nothing else: replicas that serve the same
   * data show the same fingerprint, whatever their version numbers. Made of the lists' tags and the
   * sums of the records' hashes, so it costs nothing per record.
   */
  get fingerprint (): string {
    this.fingerprintMemo ??= hash('sha1', RECORD_KINDS.map((kind) => {
      const index = this.indexes[kind] as AnyIndex
      return 'list' in index ? index.list.representations.identity.etag : index.sum
    }).join(','), 'hex').slice(0, 16)
    return this.fingerprintMemo
  }

  /** A new snapshot with `index` in place of its kind's, everything else shared. */
  withIndex<K extends RecordKind> (kind: K, index: Index<K>, version: number): Snapshot {
    return new Snapshot(version, { ...this.indexes, [kind]: index }, version === this.version ? this.installedAt : Date.now())
  }
}

/** The first snapshot, from every kind read whole. */
export async function createSnapshot (changes: { [K in RecordKind]: Whole<K> }, version = 1, refused: RefusedKeys = {}): Promise<Snapshot> {
  const indexes = Object.fromEntries(await Promise.all(RECORD_KINDS.map(async (kind) =>
    [kind, await applyChange(undefined, { kind, whole: changes[kind], refused: refused[kind] } as Change)] as const)))
  return new Snapshot(version, indexes as unknown as Indexes)
}

/** The index a change makes of the index it changes (undefined at start). */
export async function applyChange<K extends RecordKind> (previous: Index<K> | undefined, change: Change<K>): Promise<Index<K>> {
  const { kind } = change
  switch (KINDS[kind].index) {
    case 'list': {
      // A list is served as one body: any change serializes it again (a few hundred records).
      if (!('whole' in change)) throw new Error(`${kind} change as a whole list`)
      const records = change.whole as readonly unknown[]
      const { served } = KINDS[kind] as { served?: { record: (record: unknown) => unknown } }
      // The first snapshot's lists are compressed once the server has answered (Snapshot.compressLists),
      // not while the process starts: on one core, a container's limit, the thread pool took the core
      // from the start (brotli 10 of the bundled lists).
      const list = serializeList(served === undefined ? records : records.map(served.record), { later: previous === undefined })
      return { records, list } as unknown as Index<K>
    }
    case 'organizations':
      return await applyOrganizations(previous as OrganizationIndex | undefined, change as Change<'organizations'>) as Index<K>
    case 'keys':
      return await applyKeys(previous as KeyIndex | undefined, change as Change<'keys'>) as Index<K>
  }
}

/** A record's key, its value before and after (undefined: absent). */
type Edit<T> = readonly [key: string, before: T | undefined, after: T | undefined]

/** What differs between the kinds changed record by record. */
interface KeyedRules<T> {
  keyOf(record: T): string
  /** The same record as far as a request can tell: then the old object is kept. */
  same(a: T, b: T): boolean
  /** A hash of the record, below 2^52. */
  hashOf(record: T): number
}

const HASH_RANGE = 2 ** 52

/**
 * An organization's hash below 2^52, from its id, its name and its members' digest, each of which
 * changes it; mixed as a key's is, without a SHA-1 of its own: a SHA-1 of the three joined, in hex,
 * took some 0.12 s of a start of 100,000 organizations. Not seeded: replicas agree.
 */
function organizationHash ({ id, name, members }: Organization): number {
  let a = Math.imul(nameHash(id) ^ Math.imul(nameHash(name), 0x85ebca6b), 0x9e3779b1)
  let b = a ^ 0x27d4eb2d
  for (let i = 0; i < 5; i++) {
    a = Math.imul(a ^ (a >>> 15) ^ members.digestWord(i), 0x01000193)
    b = Math.imul(b ^ (b >>> 13) ^ members.digestWord(i), 0x5bd1e995)
  }
  return (a >>> 0) * 0x100000 + (b & 0xfffff)
}

const keyRules: KeyedRules<ApiKey> = {
  keyOf: (key) => key.name,
  same: sameKey,
  hashOf: hashOfKey
}

const organizationRules: KeyedRules<Organization> = {
  keyOf: (organization) => organization.id,
  same: (a, b) => a.name === b.name && a.members.sameMembers(b.members),
  hashOf: organizationHash
}

/** The edits that `upsert` and `remove` make to `old` (a change, as an index applies it): a record equal to the one in place is none. */
function editsTo<T> (old: LayeredMap<string, T>, upsert: readonly T[], remove: readonly string[], rules: KeyedRules<T>): Array<Edit<T>> {
  const edits: Array<Edit<T>> = []
  for (const record of upsert) {
    const key = rules.keyOf(record)
    const before = old.get(key)
    if (before === undefined || !rules.same(before, record)) edits.push([key, before, record])
  }
  for (const key of remove) {
    const before = old.get(key)
    if (before !== undefined) edits.push([key, before, undefined])
  }
  return edits
}

/** The sum of the records' hashes after these edits. */
function sumAfter<T> (sum: number, edits: ReadonlyArray<Edit<T>>, rules: KeyedRules<T>): number {
  for (const [, before, after] of edits) {
    if (before !== undefined) sum = (sum - rules.hashOf(before) + HASH_RANGE) % HASH_RANGE
    if (after !== undefined) sum = (sum + rules.hashOf(after)) % HASH_RANGE
  }
  return sum
}

async function applyOrganizations (previous: OrganizationIndex | undefined, change: Change<'organizations'>): Promise<OrganizationIndex> {
  if (!('whole' in change)) {
    if (previous === undefined) throw new Error('a change of named records needs the index it edits')
    return withRecords(previous, change.upsert, change.remove, change.refused) as OrganizationIndex
  }
  // Every organization: a new base, the index in place left as it is.
  const slicer = createSlicer()
  const map = new Map<string, Organization>()
  let sum = 0
  let members = 0
  for (const record of change.whole) {
    map.set(record.id, record)
    sum = (sum + organizationRules.hashOf(record)) % HASH_RANGE
    members += record.members.length
    if (slicer.due()) await slicer.pause()
  }
  return { byKey: LayeredMap.of(map), sum, members, refused: change.refused ?? NONE_REFUSED }
}

const NONE_REFUSED: ReadonlyMap<string, string> = new Map()

/**
 * The index with these edits, and these organizations refused: a change that names an organization
 * says all there is of it, so one it names is refused only if the change refuses it.
 */
function withOrganizationEdits (previous: OrganizationIndex, edits: ReadonlyArray<Edit<Organization>>, named: Iterable<string>,
  refused: ReadonlyMap<string, string> = NONE_REFUSED): OrganizationIndex {
  let members = previous.members
  for (const [, before, after] of edits) members += (after?.members.length ?? 0) - (before?.members.length ?? 0)
  return {
    byKey: previous.byKey.with(edits.map(([key, , after]) => [key, after] as const)),
    sum: sumAfter(previous.sum, edits, organizationRules),
    members,
    refused: refusedAfter(previous.refused, named, refused)
  }
}

/** `previous` without the organizations named, then with those refused; shared as it is when neither touches it (the usual case). */
function refusedAfter (previous: ReadonlyMap<string, string>, named: Iterable<string>, refused: ReadonlyMap<string, string>): ReadonlyMap<string, string> {
  let next: Map<string, string> | undefined
  if (previous.size > 0) {
    for (const key of named) {
      if (!previous.has(key)) continue
      next ??= new Map(previous)
      next.delete(key)
    }
  }
  if (refused.size === 0) return next ?? previous
  next ??= new Map(previous)
  for (const [key, problem] of refused) next.set(key, problem)
  return next
}

/** The kinds changed record by record, by their keys. */
export type KeyedKind = 'keys' | 'organizations'

/**
 * A keyed index with these records put in and the records of these keys taken out, at once (no
 * turn of the event loop): what a change that names its records makes.
 */
export function withRecords<K extends KeyedKind> (index: Index<K>, upsert: ReadonlyArray<Loaded<K>>, remove: readonly string[], refused?: ReadonlyMap<string, string>): Index<K> {
  if ('table' in index) return withKeyEdits(index, editsTo(index.byKey, upsert as readonly ApiKey[], remove, keyRules)) as Index<K>
  const organizations = index as OrganizationIndex
  const named = [...(upsert as readonly Organization[]).map((organization) => organization.id), ...remove]
  return withOrganizationEdits(organizations, editsTo(organizations.byKey, upsert as readonly Organization[], remove, organizationRules), named, refused) as Index<K>
}

/** The index of keys whose base is `table`, without edits above it. */
function keyIndexOf (table: KeyTable): KeyIndex {
  return { table, byKey: LayeredMap.of(table.byName), bySha: LayeredMap.of(table.bySha), byPrevious: LayeredMap.of(table.byPrevious), sum: table.sum }
}

async function applyKeys (previous: KeyIndex | undefined, change: Change<'keys'>): Promise<KeyIndex> {
  if ('whole' in change) {
    // Every key: a new base, the index in place left as it is.
    if (change.whole instanceof KeyTable) return keyIndexOf(change.whole)
    const slicer = createSlicer()
    const builder = new KeyTableBuilder('keys', change.whole.length)
    for (const key of change.whole) {
      builder.add(key)
      if (slicer.due()) await slicer.pause()
    }
    return keyIndexOf(await builder.finish())
  }
  if (previous === undefined) throw new Error('a change of named records needs the index it edits')
  return withKeyEdits(previous, editsTo(previous.byKey, change.upsert, change.remove, keyRules))
}

function withKeyEdits (previous: KeyIndex, edits: ReadonlyArray<Edit<ApiKey>>): KeyIndex {
  const byKey = previous.byKey.with(edits.map(([key, , after]) => [key, after] as const))
  // The keys that name each previous secret the edits take away or add.
  const holders = new Map<string, string[]>()
  const holdersOf = (sha256: string) => {
    let names = holders.get(sha256)
    if (names === undefined) holders.set(sha256, names = [...previous.byPrevious.get(sha256) ?? []])
    return names
  }
  for (const [name, before, after] of edits) {
    if (before?.previous != null) holders.set(before.previous.sha256, holdersOf(before.previous.sha256).filter((holder) => holder !== name))
    if (after?.previous != null) holdersOf(after.previous.sha256).push(name)
  }
  // Most changes touch no previous secret: the map is shared as it is, its overlay not copied.
  const byPrevious = holders.size === 0
    ? previous.byPrevious
    : previous.byPrevious.with([...holders].map(([sha256, names]) => [sha256, names.length === 0 ? undefined : names] as const))
  // The current secrets the edits take away (undefined) or give, the latter after the former: a
  // secret that moves from one key to another in the same change stays.
  const currents = new Map<string, ApiKey | undefined>()
  for (const [, before] of edits) if (before !== undefined) currents.set(before.sha256, undefined)
  for (const [, , after] of edits) if (after !== undefined) currents.set(after.sha256, after)
  // Every secret the edits touch, given again to the key it authenticates after them (asPrevious):
  // the one whose current secret it is, else the one key alone that names it as its previous.
  const owner = (sha256: string): ApiKey | undefined => {
    const current = currents.has(sha256) ? currents.get(sha256) : previous.bySha.get(sha256)
    return secretOwner(current === undefined || isPreviousSecret(current) ? undefined : current, byPrevious.get(sha256), (name) => byKey.get(name))
  }
  const touched = new Set<string>(currents.keys())
  for (const sha256 of holders.keys()) touched.add(sha256)
  return {
    table: previous.table,
    byKey,
    bySha: previous.bySha.with([...touched].map((sha256) => [sha256, owner(sha256)] as const)),
    byPrevious,
    sum: sumAfter(previous.sum, edits, keyRules)
  }
}

/** The index with its maps folded into new bases, or undefined when none has grown enough to need it. */
export async function compactIndex<K extends RecordKind> (index: Index<K>): Promise<Index<K> | undefined> {
  if (!('byKey' in index) || !index.byKey.overgrown) return undefined
  if (!('table' in index)) return { ...index, byKey: await index.byKey.compacted() } as Index<K>
  // Keys: the rows of the table that no change touched, then the keys the changes left.
  const slicer = createSlicer()
  const builder = new KeyTableBuilder('keys', index.byKey.size)
  for (let row = 0; row < index.table.size; row++) {
    if (!index.byKey.overlays(index.table.nameOf(row))) builder.copy(index.table, row)
    if (slicer.due()) await slicer.pause()
  }
  for (const name of index.byKey.overlaid()) {
    const key = index.byKey.get(name)
    if (key !== undefined) builder.add(key)
    if (slicer.due()) await slicer.pause()
  }
  return keyIndexOf(await builder.finish()) as Index<K>
}
