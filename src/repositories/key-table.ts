import { getRandomValues } from 'node:crypto'
import { quoteValue } from '../schemas/describe-error.js'
import { KEY_KINDS, RATE_LIMIT_MAX, type ApiKey } from '../schemas/keys-and-organizations.js'
import { IDENTIFIER_MAX } from '../schemas/common.js'
import { timestampMs, timestampText } from '../schemas/formats.js'
import { DataError } from './data-error.js'
import { createSlicer } from './slices.js'

/** A SHA-256 is 8 words of 32 bits. */
const SHA_WORDS = 8

/** A SHA-256 given as hex, read into words here to be compared with the table's without allocating. */
const probe = new Uint32Array(SHA_WORDS)
const probeBytes = Buffer.from(probe.buffer)

/**
 * Drawn once per process, so that no data set can know them: where a SHA-256 lands in the index
 * depends on these and on every bit of the hash.
 */
const SHA_SEED = getRandomValues(new Uint32Array(SHA_WORDS + 1))

/**
 * The slot hash of the SHA-256 at `words[at]` (8 words): its words mixed, seeded, then MurmurHash3's
 * finalizer. Hashes that share their first digits (placeholders such as lpad(n, 64, '0')), or values
 * made to share them, spread like real ones. The slot was the hash's first word (a real SHA-256 is
 * random already), which put such hashes all in one run of slots: building the index took time
 * quadratic in their number, and a lookup that landed in the run went through it.
 */
function shaSlotHash (words: Uint32Array, at: number): number {
  let h = SHA_SEED[SHA_WORDS]!
  for (let i = 0; i < SHA_WORDS; i++) {
    h = Math.imul(h ^ ((words[at + i]! + SHA_SEED[i]!) | 0), 0x9e3779b1)
    h ^= h >>> 15
  }
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b)
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35)
  return (h ^ (h >>> 16)) >>> 0
}

/**
 * Reads a SHA-256 in hex into `probe`; false when it is not 64 hex digits. (Buffer's native hex
 * decoding: a loop of our own over the 64 characters took four times as long.)
 */
function readProbe (sha256: string): boolean {
  return sha256.length === 64 && probeBytes.write(sha256, 'hex') === 32
}

/** Each byte's value as a lowercase hex digit (ApiKeySchema's pattern takes no capitals), -1 for any other byte. */
const HEX_DIGITS = new Int8Array(256).fill(-1)
for (let digit = 0; digit < 16; digit++) HEX_DIGITS['0123456789abcdef'.charCodeAt(digit)] = digit

/** The key kinds as UTF-8, to compare a kind given as bytes with. */
const KIND_BYTES = KEY_KINDS.map((kind) => Buffer.from(kind))

/** The fields a key may have besides its four. */
export type KeyOptions = Pick<ApiKey, 'expires_at' | 'disabled' | 'rate_limit_per_minute' | 'previous'>

/**
 * Whether `value` passes ApiKeySchema: its verdict, written out because a million keys are checked
 * at each whole read (a start, a change to keys.json), and the schema's pattern took longer than the
 * rest of a key's reading. recordProblem uses it; a test holds the two verdicts equal.
 */
export function isApiKey (value: unknown): boolean {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false
  const { name, sha256, kind, organization_id: organization } = value as Record<string, unknown>
  return typeof name === 'string' && name.length > 0 && name.length <= IDENTIFIER_MAX && name.isWellFormed() &&
    typeof organization === 'string' && organization.length > 0 && organization.length <= IDENTIFIER_MAX &&
    (KEY_KINDS as readonly unknown[]).includes(kind) &&
    // Hex decoding takes capitals too, which the pattern does not.
    isSha(sha256) && optionalFieldsValid(value as Record<string, unknown>)
}

/** A SHA-256 as a key holds it: 64 lowercase hex digits (hex decoding takes capitals too, which the pattern does not). */
const isSha = (value: unknown) => typeof value === 'string' && readProbe(value) && value.toLowerCase() === value

/** The checks of a key's optional fields, by name: absent (undefined) passes each, null too where the schema takes it. */
const OPTIONAL_FIELDS: Readonly<Record<string, (value: unknown) => boolean>> = {
  expires_at: (value) => value === null || value === undefined || isTimestamp(value),
  disabled: (value) => value === undefined || typeof value === 'boolean',
  rate_limit_per_minute: (value) => value === null || value === undefined || (Number.isInteger(value) && (value as number) >= 1 && (value as number) <= RATE_LIMIT_MAX),
  previous: (value) => {
    if (value === null || value === undefined) return true
    if (typeof value !== 'object' || Array.isArray(value)) return false
    const names = Object.getOwnPropertyNames(value)
    const { sha256, expires_at: end } = value as Record<string, unknown>
    return names.length === 2 && isSha(sha256) && isTimestamp(end)
  }
}

const isTimestamp = (value: unknown) => typeof value === 'string' && !Number.isNaN(timestampMs(value))

/** The four fields every key has, and no field but those and the optional ones, each valid. */
function optionalFieldsValid (value: Record<string, unknown>): boolean {
  const names = Object.getOwnPropertyNames(value)
  if (names.length === 4) return true
  let required = 0
  for (const name of names) {
    const check = OPTIONAL_FIELDS[name]
    if (check === undefined) {
      if (name === 'name' || name === 'sha256' || name === 'kind' || name === 'organization_id') required++
      else return false
    } else if (!check(value[name])) return false
  }
  return required === 4
}

/** Where a key read from a KeyTable holds its expiry as a number (ms since the epoch). */
const EXPIRES_MS = Symbol('expiresMs')
/** Marks the key as seen through the secret it had before its last rotation (asPrevious). */
const PREVIOUS_SECRET = Symbol('previousSecret')

/** The secret a key had before its last rotation: its SHA-256 (hex) and when it stops (ms since the epoch). */
interface PreviousSecret {
  readonly sha256: string
  readonly endMs: number
}

/**
 * A key of a KeyTable with more than its four fields (an expiry, a flag, a limit, a previous secret):
 * the expiry as a number for auth (one comparison a request), as text (UTC, to the millisecond) only
 * when read, so that a request never formats it. A class, not an object literal with a getter: a
 * lookup makes one per request, and the literal cost 20 times as much to make (BENCHMARKS.md, "Key
 * table"). The optional fields are set only when the key has them, as in its record.
 */
class StoredKey implements ApiKey {
  readonly [EXPIRES_MS]: number
  declare readonly disabled?: boolean
  declare readonly rate_limit_per_minute?: number
  declare readonly [PREVIOUS_SECRET]?: true
  readonly #previous: PreviousSecret | undefined
  constructor (readonly name: string, readonly sha256: string, readonly kind: ApiKey['kind'], readonly organization_id: string, expiry: number,
    disabled: boolean, limit: number, previous: PreviousSecret | undefined, asPrevious = false) {
    this[EXPIRES_MS] = expiry
    this.#previous = previous
    const self = this as { -readonly [K in keyof StoredKey]: StoredKey[K] }
    if (disabled) self.disabled = true
    if (limit !== 0) self.rate_limit_per_minute = limit
    if (asPrevious) self[PREVIOUS_SECRET] = true
  }

  get expires_at (): string | undefined {
    return Number.isNaN(this[EXPIRES_MS]) ? undefined : timestampText(this[EXPIRES_MS])
  }

  get previous (): { sha256: string, expires_at: string } | undefined {
    return this.#previous === undefined ? undefined : { sha256: this.#previous.sha256, expires_at: timestampText(this.#previous.endMs) }
  }

  /** The key as its record: JSON.stringify (an export, a file) writes the fields it has, in the schema's order. */
  toJSON (): ApiKey {
    return {
      name: this.name,
      sha256: this.sha256,
      kind: this.kind,
      organization_id: this.organization_id,
      ...Number.isNaN(this[EXPIRES_MS]) ? {} : { expires_at: this.expires_at },
      ...this.disabled === true ? { disabled: true } : {},
      ...this.rate_limit_per_minute === undefined ? {} : { rate_limit_per_minute: this.rate_limit_per_minute },
      ...this.#previous === undefined ? {} : { previous: this.previous }
    }
  }
}

/**
 * When a key expires, in ms since the epoch; NaN when it never does, and -Infinity (long expired)
 * when its expiry is no time at all: a key fails closed.
 */
export function expiryOf (key: ApiKey): number {
  const held = (key as { [EXPIRES_MS]?: number })[EXPIRES_MS]
  if (held !== undefined) return held
  return instantOf(key.expires_at)
}

/** An expiry as ms since the epoch: NaN for none (null, absent), -Infinity for one that is no time. */
function instantOf (value: string | null | undefined): number {
  if (typeof value !== 'string') return NaN
  const ms = timestampMs(value)
  return Number.isNaN(ms) ? -Infinity : ms
}

/** A key's previous secret as a KeyTable holds it, or undefined. */
function previousOf (key: KeyOptions): PreviousSecret | undefined {
  if (key.previous == null) return undefined
  return { sha256: key.previous.sha256, endMs: instantOf(key.previous.expires_at) }
}

/**
 * The key as its previous secret authenticates it: that secret's SHA-256, and its end (the grace's,
 * or the key's own expiry when that comes first) as the key's expiry. A secret authenticates the key
 * whose current secret it is; else the one key that names it as its previous secret; where two keys
 * or more name it (only written by hand), none of them: which one it was cannot be told, and the
 * order of a table's rows or a file's records must not decide it.
 */
export function asPrevious (key: ApiKey): ApiKey | undefined {
  const previous = previousOf(key)
  if (previous === undefined) return undefined
  const own = expiryOf(key)
  // Ended by the key's own expiry first: it answers as an expired key, not as one rotated.
  const endedByKey = own <= previous.endMs
  return new StoredKey(key.name, previous.sha256, key.kind, key.organization_id, endedByKey ? own : previous.endMs,
    key.disabled === true, key.rate_limit_per_minute ?? 0, undefined, !endedByKey)
}

/**
 * The key a secret authenticates, as asPrevious says: `current`, the key whose current secret it is,
 * when there is one; else, as its previous secret, the one key of those that name it (`holders`, found
 * by `keyOf`) when there is one alone; else none. The key table and a change's edits both ask here.
 */
export function secretOwner<H> (current: ApiKey | undefined, holders: readonly H[] | undefined, keyOf: (holder: H) => ApiKey | undefined): ApiKey | undefined {
  if (current !== undefined) return current
  const key = holders?.length === 1 ? keyOf(holders[0]!) : undefined
  return key === undefined ? undefined : asPrevious(key)
}

/** Whether the key was found by the secret it had before its last rotation. */
export function isPreviousSecret (key: ApiKey): boolean {
  return (key as { [PREVIOUS_SECRET]?: true })[PREVIOUS_SECRET] === true
}

/** FNV-1a's offset basis and prime: a name's hash starts from the one, and takes each character in with the other. */
const FNV_BASIS = 0x811c9dc5
const FNV_PRIME = 0x01000193

/** A text's 32-bit hash (FNV-1a, mixed): the key table's, and the fingerprint's of an organization. */
export function nameHash (name: string): number {
  let h = FNV_BASIS
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), FNV_PRIME)
  return finishNameHash(h)
}

/**
 * FNV-1a's low bits alone follow the last characters: names that count up would fall in runs of
 * neighbouring slots. Mixed (MurmurHash3's finalizer), every bit depends on every character.
 */
function finishNameHash (h: number): number {
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b)
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35)
  return (h ^ (h >>> 16)) >>> 0
}

/** nameHash of the ASCII text at bytes[start, end) (a character is its byte); -1 when a byte is not ASCII. */
function asciiHash (bytes: Buffer, start: number, end: number): number {
  let h = FNV_BASIS
  for (let i = start; i < end; i++) {
    const byte = bytes[i]!
    if (byte >= 0x80) return -1
    h = Math.imul(h ^ byte, FNV_PRIME)
  }
  return finishNameHash(h)
}

/**
 * A hash of a whole key below 2^52, from the hashes of its name and organization, its kind and every
 * word of its SHA-256 at `sha[at]`: the snapshot's fingerprint sums them. Not a sum of its parts, so
 * that two keys that swap organizations change the fingerprint. Every word, not the first two: a
 * hash may differ from another only in its last digits (placeholders such as lpad(n, 64, '0')).
 * Not seeded: replicas that serve the same keys show the same fingerprint.
 */
function keyHash (name: number, organization: number, kind: number, sha: Uint32Array, at: number, expiry: number, extras: number): number {
  let a = Math.imul(name ^ kind, 0x01000193)
  // The fields a key may have besides, where it has any: a key without keeps its hash of before.
  if (extras !== 0) a = Math.imul(a ^ extras, 0x27d4eb2d)
  // An expiry (a whole number of ms, two words) where there is one: a key without keeps its hash of before.
  if (!Number.isNaN(expiry)) a = Math.imul(a ^ (expiry >>> 0) ^ Math.imul(Math.floor(expiry / 2 ** 32), 0x85ebca6b), 0xc2b2ae35)
  a = Math.imul(a ^ organization, 0x5bd1e995)
  let b = name
  for (let i = 0; i < SHA_WORDS; i++) {
    a = Math.imul(a ^ (a >>> 15) ^ sha[at + i]!, 0x01000193)
    b = Math.imul(b ^ (b >>> 13) ^ sha[at + i]!, 0x5bd1e995)
  }
  return (a >>> 0) * 0x100000 + (b & 0xfffff)
}

/** A hash of what a key holds besides its four fields and expiry; 0 when it holds none of it. */
function extrasHash (disabled: boolean, limit: number, previous: PreviousSecret | undefined): number {
  if (!disabled && limit === 0 && previous === undefined) return 0
  let h = Math.imul((disabled ? 0x5bd1e995 : 0x1b873593) ^ limit, 0x9e3779b1)
  if (previous !== undefined) {
    h = Math.imul(h ^ nameHash(previous.sha256), 0x85ebca6b)
    h = Math.imul(h ^ (previous.endMs >>> 0) ^ Math.imul(Math.floor(previous.endMs / 2 ** 32), 0xc2b2ae35), 0x01000193)
  }
  return h | 1
}

/** The hash of a key as an object; equal to its row's in a table. */
export function hashOfKey (key: ApiKey): number {
  readProbe(key.sha256)
  return keyHash(nameHash(key.name), nameHash(key.organization_id), KEY_KINDS.indexOf(key.kind), probe, 0, expiryOf(key),
    extrasHash(key.disabled === true, key.rate_limit_per_minute ?? 0, previousOf(key)))
}

/** Whether two keys hold the same, as far as a request can tell. */
export function sameKey (a: ApiKey, b: ApiKey): boolean {
  const [previousA, previousB] = [previousOf(a), previousOf(b)]
  return a.sha256 === b.sha256 && a.kind === b.kind && a.organization_id === b.organization_id && Object.is(expiryOf(a), expiryOf(b)) &&
    (a.disabled === true) === (b.disabled === true) && (a.rate_limit_per_minute ?? 0) === (b.rate_limit_per_minute ?? 0) &&
    previousA?.sha256 === previousB?.sha256 && Object.is(previousA?.endMs, previousB?.endMs)
}

/** What LayeredMap needs of its base: a Map is one, and so are a KeyTable's two indexes. */
export interface MapLike<K, V> {
  readonly size: number
  get(key: K): V | undefined
  has(key: K): boolean
  [Symbol.iterator](): Iterator<readonly [K, V]>
}

/**
 * A million keys held compactly: columns of typed arrays (the SHA-256 as 32 bytes, the kind as one,
 * the organization as an index into its ids, the names in one buffer of UTF-8) and two open-addressed
 * indexes (by name, by SHA-256) of 4 bytes a slot, instead of a million objects and two Maps. The
 * names are bytes rather than strings so that the garbage collector has a million objects fewer to
 * copy at a load and to mark at every full collection. A key is made into an ApiKey object
 * only when it is asked for. Immutable once built (KeyTableBuilder): changes go in a LayeredMap's
 * overlay above it, and a compaction builds a new table.
 */
export class KeyTable {
  /** The keys by name and by every secret that authenticates them (lowercase hex), as maps for a LayeredMap's base. */
  readonly byName: MapLike<string, ApiKey>
  readonly bySha: MapLike<string, ApiKey>
  /** The names of the keys that name each previous secret, for a LayeredMap's base. */
  readonly byPrevious: MapLike<string, readonly string[]>

  constructor (
    readonly size: number,
    /** The sum of the keys' hashes modulo 2^52 (the snapshot's fingerprint). */
    readonly sum: number,
    // The columns, row by row (read by KeyTableBuilder.copy). Row n's name is nameBytes from
    // nameEnds[n - 1] (0 for row 0) to nameEnds[n].
    readonly nameBytes: Buffer,
    readonly nameEnds: Uint32Array,
    readonly nameHashes: Uint32Array,
    readonly shas: Uint32Array,
    readonly kinds: Uint8Array,
    readonly organizations: Uint32Array,
    readonly organizationIds: readonly string[],
    /** When each key expires (ms since the epoch), NaN when it never does. */
    readonly expiries: Float64Array,
    /** 1 where the key is disabled. */
    readonly disabled: Uint8Array,
    /** Each key's own rate limit a minute, 0 where it has none. */
    readonly limits: Uint32Array,
    /** The secrets keys had before their last rotation, by row: few at a time (a grace lasts hours), so a Map. */
    readonly previous: ReadonlyMap<number, PreviousSecret>,
    /** The rows that name each of those secrets, by SHA-256: one row, or more where keys share one (written by hand). */
    private readonly previousRows: ReadonlyMap<string, readonly number[]>,
    private readonly nameSlots: Int32Array,
    private readonly shaSlots: Int32Array
  ) {
    this.byName = this.view((name) => this.rowOfName(name), (row) => this.nameOf(row))
    this.bySha = this.secretView()
    const namesOf = (rows: readonly number[]) => rows.map((row) => this.nameOf(row))
    this.byPrevious = {
      size: previousRows.size,
      get: (sha256) => {
        const rows = previousRows.get(sha256)
        return rows === undefined ? undefined : namesOf(rows)
      },
      has: (sha256) => previousRows.has(sha256),
      * [Symbol.iterator] () {
        for (const [sha256, rows] of previousRows) yield [sha256, namesOf(rows)] as const
      }
    }
  }

  static of (keys: Iterable<ApiKey>, where: string): KeyTable {
    const builder = new KeyTableBuilder(where)
    for (const key of keys) builder.add(key)
    return builder.finishAtOnce()
  }

  nameOf (row: number): string {
    return nameText(this.nameBytes, this.nameEnds, row)
  }

  key (row: number): ApiKey {
    const name = this.nameOf(row)
    const sha256 = this.shaOf(row)
    const kind = KEY_KINDS[this.kinds[row]!]!
    const organization = this.organizationIds[this.organizations[row]!]!
    const expiry = this.expiries[row]!
    const disabled = this.disabled[row] === 1
    const limit = this.limits[row]!
    const previous = this.previous.size === 0 ? undefined : this.previous.get(row)
    if (Number.isNaN(expiry) && !disabled && limit === 0 && previous === undefined) return { name, sha256, kind, organization_id: organization }
    return new StoredKey(name, sha256, kind, organization, expiry, disabled, limit, previous)
  }

  /** Every key, in row order. */
  * values (): IterableIterator<ApiKey> {
    for (let row = 0; row < this.size; row++) yield this.key(row)
  }

  /** The row of the key of this name, or -1. */
  rowOfName (name: string): number {
    const hash = nameHash(name)
    const mask = this.nameSlots.length - 1
    for (let slot = hash & mask; ; slot = (slot + 1) & mask) {
      const entry = this.nameSlots[slot]!
      if (entry === 0) return -1
      if (this.nameHashes[entry - 1] === hash && nameIs(this.nameBytes, this.nameEnds, entry - 1, name)) return entry - 1
    }
  }

  /** The row of the key whose SHA-256 (lowercase hex) this is, or -1. */
  rowOfSha (sha256: string): number {
    if (!readProbe(sha256)) return -1
    const mask = this.shaSlots.length - 1
    for (let slot = shaSlotHash(probe, 0) & mask; ; slot = (slot + 1) & mask) {
      const entry = this.shaSlots[slot]!
      if (entry === 0) return -1
      if (this.shaIsProbe(entry - 1)) return entry - 1
    }
  }

  /**
   * The longest run of filled slots in the index by SHA-256: the most slots a lookup looks at, found
   * or not. Tests hold it short whatever the hashes are.
   */
  longestShaRun (): number {
    const slots = this.shaSlots
    // From an empty slot (at most half are filled), so that a run across the end is counted whole.
    const start = slots.indexOf(0)
    let longest = 0
    for (let i = 1, run = 0; i <= slots.length; i++) {
      run = slots[(start + i) & (slots.length - 1)] === 0 ? 0 : run + 1
      if (run > longest) longest = run
    }
    return longest
  }

  private shaIsProbe (row: number): boolean {
    const at = row * SHA_WORDS
    for (let i = 0; i < SHA_WORDS; i++) if (this.shas[at + i] !== probe[i]) return false
    return true
  }

  private shaOf (row: number): string {
    return Buffer.from(this.shas.buffer, this.shas.byteOffset + row * SHA_WORDS * 4, SHA_WORDS * 4).toString('hex')
  }

  /**
   * The keys by every secret that authenticates them, as asPrevious says: the current one, then a
   * previous one that one key alone names and no key has as its current.
   */
  private secretView (): MapLike<string, ApiKey> {
    const current = this.view((sha256) => this.rowOfSha(sha256), (row) => this.shaOf(row))
    if (this.previousRows.size === 0) return current
    const table = this
    // Where no key has it as its current secret (the current view, asked first, answers those).
    const previousOf = (sha256: string) => table.rowOfSha(sha256) >= 0 ? undefined : secretOwner(undefined, table.previousRows.get(sha256), (row) => table.key(row))
    let served = 0
    for (const sha256 of this.previousRows.keys()) if (previousOf(sha256) !== undefined) served++
    return {
      size: this.size + served,
      get: (sha256) => current.get(sha256) ?? previousOf(sha256),
      has: (sha256) => current.has(sha256) || previousOf(sha256) !== undefined,
      * [Symbol.iterator] () {
        yield * current
        for (const sha256 of table.previousRows.keys()) {
          const key = previousOf(sha256)
          if (key !== undefined) yield [sha256, key] as const
        }
      }
    }
  }

  private view (rowOf: (key: string) => number, keyOf: (row: number) => string): MapLike<string, ApiKey> {
    const table = this
    return {
      size: this.size,
      get: (key) => {
        const row = rowOf(key)
        return row < 0 ? undefined : table.key(row)
      },
      has: (key) => rowOf(key) >= 0,
      * [Symbol.iterator] () {
        for (let row = 0; row < table.size; row++) yield [keyOf(row), table.key(row)] as const
      }
    }
  }
}

/**
 * Builds a KeyTable a key at a time; a name or a SHA-256 met twice is a DataError naming both rows,
 * thrown by finish. The indexes are built there, once the rows are counted, with as many slots as
 * they need: built as the rows came, they were built again, in one step, each time the rows
 * outgrew the room and once more at the end where fewer came than room was made for (a million
 * keys read after PostgreSQL's estimate had fallen short held the event loop 0.4 to 0.6 s).
 */
export class KeyTableBuilder {
  private size = 0
  private sum = 0
  private nameBytes: Buffer
  private nameEnds: Uint32Array
  private shas: Uint32Array
  /** The same memory as `shas`, where addBytes writes a SHA-256 a byte at a time. */
  private shaBytes: Uint8Array
  private kinds: Uint8Array
  private organizations: Uint32Array
  private nameHashes: Uint32Array
  private expiries: Float64Array
  private disabled: Uint8Array
  private limits: Uint32Array
  private readonly previous = new Map<number, PreviousSecret>()
  private readonly previousRows = new Map<string, number[]>()
  private readonly organizationIds: string[] = []
  private readonly organizationIndex = new Map<string, number>()
  private readonly organizationHashes: number[] = []
  /**
   * The organizations addBytes met, by their ids' bytes: open-addressed slots of an entry + 1, and
   * each entry's organization and where its id is in organizationBytes. Found without making the
   * id a string, as a million keys of a hundred thousand organizations are read.
   */
  private organizationSlots = new Int32Array(1024)
  /** Entry n's start in organizationBytes, length and organization, at 3n: one cache line a lookup, not three. */
  private organizationEntries = new Int32Array(3 * 512)
  private organizationEntryCount = 0
  private organizationBytes = Buffer.allocUnsafeSlow(16 * 1024)
  private organizationBytesUsed = 0
  /** The indexes, built by finish. */
  private nameSlots = new Int32Array(0)
  private shaSlots = new Int32Array(0)

  /** `where` names the file or table in messages; `expected` sizes the arrays (they grow past it). */
  constructor (private readonly where: string, expected = 1024) {
    const capacity = Math.max(16, expected)
    // Names of some ten to twenty bytes; the buffer grows past it.
    this.nameBytes = Buffer.allocUnsafeSlow(capacity * 16)
    this.nameEnds = new Uint32Array(capacity)
    this.shas = new Uint32Array(capacity * SHA_WORDS)
    this.shaBytes = new Uint8Array(this.shas.buffer)
    this.kinds = new Uint8Array(capacity)
    this.organizations = new Uint32Array(capacity)
    this.nameHashes = new Uint32Array(capacity)
    this.expiries = new Float64Array(capacity)
    this.disabled = new Uint8Array(capacity)
    this.limits = new Uint32Array(capacity)
  }

  /** Adds a key, the next row (row n is record [n] in messages). */
  add (key: ApiKey) {
    if (!readProbe(key.sha256)) throw new DataError(`${this.where}: [${this.size}].sha256: not 64 hex digits`)
    const row = this.reserve()
    this.shas.set(probe, row * SHA_WORDS)
    // A UTF-16 code unit is at most 3 bytes of UTF-8.
    const start = this.nameRoom(row, key.name.length * 3)
    // Well-formed (ApiKeySchema): UTF-8 gives back the same name.
    this.nameEnds[row] = start + this.nameBytes.write(key.name, start, 'utf8')
    this.fill(row, nameHash(key.name), KEY_KINDS.indexOf(key.kind), this.organizationIndexOf(key.organization_id), expiryOf(key),
      key.disabled === true, key.rate_limit_per_minute ?? 0, previousOf(key))
  }

  /** Adds row `row` of `table` as the next row. */
  copy (table: KeyTable, row: number) {
    const next = this.reserve()
    this.shas.set(table.shas.subarray(row * SHA_WORDS, (row + 1) * SHA_WORDS), next * SHA_WORDS)
    const from = nameStart(table.nameEnds, row)
    const length = table.nameEnds[row]! - from
    const start = this.nameRoom(next, length)
    table.nameBytes.copy(this.nameBytes, start, from, from + length)
    this.nameEnds[next] = start + length
    this.fill(next, table.nameHashes[row]!, table.kinds[row]!, this.organizationIndexOf(table.organizationIds[table.organizations[row]!]!), table.expiries[row]!,
      table.disabled[row] === 1, table.limits[row]!, table.previous.size === 0 ? undefined : table.previous.get(row))
  }

  /**
   * Adds a key given as UTF-8, the next row, without a string for its fields: its name, sha256, kind
   * and organization_id are at `bytes`, as (start, length) pairs from fields[at] on, in that order (a
   * length of -1 for NULL); `options`, its other fields, as add takes them. Answers false, having
   * added nothing, for a key it cannot take from the bytes alone: a field ApiKeySchema may refuse, a
   * NULL, or a name or organization id that is not ASCII (their hashes are of UTF-16 text). The caller
   * then checks the key as a record (recordProblem), which says what is wrong, and adds it if valid.
   */
  addBytes (bytes: Buffer, fields: Int32Array, at: number, options: KeyOptions | undefined): boolean {
    const name = fields[at]!
    const nameLength = fields[at + 1]!
    const sha = fields[at + 2]!
    const organization = fields[at + 6]!
    const organizationLength = fields[at + 7]!
    // ASCII: as many characters as bytes.
    if (nameLength < 1 || nameLength > IDENTIFIER_MAX || organizationLength < 1 || organizationLength > IDENTIFIER_MAX || fields[at + 3] !== 64) return false
    const kind = kindOfBytes(bytes, fields[at + 4]!, fields[at + 5]!)
    if (kind < 0) return false
    const organizationHash = asciiHash(bytes, organization, organization + organizationLength)
    if (organizationHash < 0) return false
    if (options !== undefined) {
      for (const field in options) {
        const check = OPTIONAL_FIELDS[field]
        if (check === undefined || !check(options[field as keyof KeyOptions])) return false
      }
    }
    // Written in place, row `row` not yet counted: a field found wrong halfway leaves nothing behind.
    const row = this.reserve()
    const shaBytes = this.shaBytes
    for (let i = 0, to = row * SHA_WORDS * 4; i < 64; i += 2) {
      const high = HEX_DIGITS[bytes[sha + i]!]!
      const low = HEX_DIGITS[bytes[sha + i + 1]!]!
      if ((high | low) < 0) return false
      shaBytes[to++] = (high << 4) | low
    }
    // Copied a byte at a time as it is hashed: Buffer's copy costs more than that for a few bytes.
    const start = this.nameRoom(row, nameLength)
    const nameBytes = this.nameBytes
    let hash = FNV_BASIS
    for (let i = 0; i < nameLength; i++) {
      const byte = bytes[name + i]!
      if (byte >= 0x80) return false
      nameBytes[start + i] = byte
      hash = Math.imul(hash ^ byte, FNV_PRIME)
    }
    hash = finishNameHash(hash)
    this.nameEnds[row] = start + nameLength
    this.fill(row, hash, kind, this.organizationOfBytes(bytes, organization, organization + organizationLength, organizationHash),
      instantOf(options?.expires_at), options?.disabled === true, options?.rate_limit_per_minute ?? 0, options === undefined ? undefined : previousOf(options))
    return true
  }

  /**
   * Room for `rows` more rows, the columns widened a slice at a time where they lack it: a reader
   * of rows asks before each batch, so that a batch never widens them in one step (a million keys'
   * columns are some 60 MB to copy).
   */
  async makeRoom (rows: number) {
    if (this.size + rows > this.kinds.length) await inSlices(this.resize(Math.max(this.kinds.length * 2, this.size + rows)))
  }

  /** The table, its indexes built a slice at a time; a DataError when a name or a SHA-256 is met twice. */
  async finish (): Promise<KeyTable> {
    await inSlices(this.finishing())
    return this.table()
  }

  /** finish in one step, for a table built in one (KeyTable.of). */
  finishAtOnce (): KeyTable {
    for (const _ of this.finishing());
    return this.table()
  }

  private * finishing (): Generator<void> {
    // Columns sized for about the rows that came (PostgreSQL's estimate, with its headroom) are kept,
    // as views of their first rows. Columns grown past their rows (doubled), or sized for many more
    // (the table this one replaces was larger), are copied, not to hold the room.
    if (this.kinds.length > this.size * 1.25) yield * this.resize(this.size)
    yield * this.index()
  }

  private table (): KeyTable {
    const size = this.size
    const nameBytes = Buffer.allocUnsafeSlow(nameStart(this.nameEnds, size))
    this.nameBytes.copy(nameBytes, 0, 0, nameBytes.length)
    const fit = <T extends Uint32Array | Uint8Array | Float64Array>(column: T, length: number): T => column.subarray(0, length) as T
    return new KeyTable(size, this.sum, nameBytes, fit(this.nameEnds, size), fit(this.nameHashes, size),
      fit(this.shas, size * SHA_WORDS), fit(this.kinds, size),
      fit(this.organizations, size), this.organizationIds, fit(this.expiries, size), fit(this.disabled, size),
      fit(this.limits, size), this.previous, this.previousRows, this.nameSlots, this.shaSlots)
  }

  /** Where row `row`'s name starts, with room for `bytes` bytes after it (the buffer doubled, or more, when short). */
  private nameRoom (row: number, bytes: number): number {
    const start = nameStart(this.nameEnds, row)
    if (this.nameBytes.length - start < bytes) {
      const wider = Buffer.allocUnsafeSlow(Math.max(start + bytes, this.nameBytes.length * 2))
      this.nameBytes.copy(wider, 0, 0, start)
      this.nameBytes = wider
    }
    return start
  }

  /** The index of an organization by its id, added when new. */
  private organizationIndexOf (organization: string): number {
    let index = this.organizationIndex.get(organization)
    if (index === undefined) {
      index = this.organizationIds.push(organization) - 1
      this.organizationIndex.set(organization, index)
      this.organizationHashes.push(nameHash(organization))
    }
    return index
  }

  /** organizationIndexOf the ASCII id at bytes[start, end), whose nameHash is `hash`: its text made only the first time it is met. */
  private organizationOfBytes (bytes: Buffer, start: number, end: number, hash: number): number {
    const slots = this.organizationSlots
    const mask = slots.length - 1
    const length = end - start
    let entries = this.organizationEntries
    const known = this.organizationBytes
    let slot = hash & mask
    for (let entry = slots[slot]!; entry !== 0; entry = slots[slot]!) {
      const at = 3 * (entry - 1)
      if (entries[at + 1] === length) {
        const from = entries[at]!
        let i = 0
        while (i < length && known[from + i] === bytes[start + i]) i++
        if (i === length) return entries[at + 2]!
      }
      slot = (slot + 1) & mask
    }
    const index = this.organizationIndexOf(bytes.toString('latin1', start, end))
    if (known.length - this.organizationBytesUsed < length) {
      const wider = Buffer.allocUnsafeSlow(Math.max(known.length * 2, this.organizationBytesUsed + length))
      known.copy(wider, 0, 0, this.organizationBytesUsed)
      this.organizationBytes = wider
    }
    bytes.copy(this.organizationBytes, this.organizationBytesUsed, start, end)
    const count = ++this.organizationEntryCount
    if (entries.length < 3 * count) {
      const wider = new Int32Array(entries.length * 2)
      wider.set(entries)
      this.organizationEntries = entries = wider
    }
    entries.set([this.organizationBytesUsed, length, index], 3 * (count - 1))
    this.organizationBytesUsed += length
    slots[slot] = count
    // At most half full: twice the slots, the entries placed again by their organizations' hashes.
    if (count * 2 > slots.length) {
      const wider = new Int32Array(slots.length * 2)
      const widerMask = wider.length - 1
      for (let entry = 1; entry <= count; entry++) {
        let at = this.organizationHashes[entries[3 * entry - 1]!]! & widerMask
        while (wider[at] !== 0) at = (at + 1) & widerMask
        wider[at] = entry
      }
      this.organizationSlots = wider
    }
    return index
  }

  private reserve (): number {
    if (this.size === this.kinds.length) for (const _ of this.resize(this.kinds.length * 2));
    return this.size
  }

  /** Row `row`'s columns, its name's bytes written already. */
  private fill (row: number, hash: number, kind: number, index: number, expiry: number,
    disabled: boolean, limit: number, previous: PreviousSecret | undefined) {
    const at = row * SHA_WORDS
    this.nameHashes[row] = hash
    this.kinds[row] = kind
    this.organizations[row] = index
    this.expiries[row] = expiry
    this.disabled[row] = disabled ? 1 : 0
    this.limits[row] = limit
    if (previous !== undefined) {
      this.previous.set(row, previous)
      const rows = this.previousRows.get(previous.sha256)
      if (rows === undefined) this.previousRows.set(previous.sha256, [row])
      else rows.push(row)
    }
    this.sum = (this.sum + keyHash(hash, this.organizationHashes[index]!, kind, this.shas, at, expiry, extrasHash(disabled, limit, previous))) % 2 ** 52
    this.size++
  }

  private sameSha (row: number, other: number): boolean {
    for (let i = 0; i < SHA_WORDS; i++) if (this.shas[row * SHA_WORDS + i] !== this.shas[other * SHA_WORDS + i]) return false
    return true
  }

  private duplicate (field: 'name' | 'sha256', value: string | undefined, row: number, first: number): never {
    // Never the hash itself: quoteValue says "the value" for it.
    throw new DataError(`${this.where}: [${row}].${field}: ${quoteValue(value, field)} duplicates [${first}].${field}`)
  }

  /** The columns copied into arrays of `capacity` rows, a slice of rows at a time. */
  private * resize (capacity: number): Generator<void> {
    const resized = <T extends Uint32Array | Uint8Array | Float64Array>(array: T, width: number): T =>
      new (array.constructor as new (length: number) => T)(capacity * width)
    const columns = [this.nameEnds, this.shas, this.kinds, this.organizations, this.nameHashes, this.expiries, this.disabled, this.limits] as const
    const widths = [1, SHA_WORDS, 1, 1, 1, 1, 1, 1]
    const copies = columns.map((column, i) => resized(column, widths[i]!))
    for (let from = 0; from < this.size; from += SLICE_ROWS) {
      const to = Math.min(this.size, from + SLICE_ROWS)
      for (const [i, column] of columns.entries()) copies[i]!.set(column.subarray(from * widths[i]!, to * widths[i]!), from * widths[i]!)
      yield
    }
    [this.nameEnds, this.shas, this.kinds, this.organizations, this.nameHashes, this.expiries, this.disabled, this.limits] = copies as unknown as typeof columns
    this.shaBytes = new Uint8Array(this.shas.buffer)
  }

  /**
   * Both indexes, a slice of rows at a time, in row order: a row whose name or SHA-256 an earlier
   * row has is the duplicate, named with that row.
   */
  private * index (): Generator<void> {
    const slots = slotsFor(this.size)
    const names = this.nameSlots = new Int32Array(slots)
    const shas = this.shaSlots = new Int32Array(slots)
    const mask = slots - 1
    for (let from = 0; from < this.size; from += SLICE_ROWS) {
      for (let row = from, to = Math.min(this.size, from + SLICE_ROWS); row < to; row++) {
        const hash = this.nameHashes[row]!
        let slot = hash & mask
        for (let entry = names[slot]!; entry !== 0; entry = names[slot]!) {
          if (this.nameHashes[entry - 1] === hash && sameName(this.nameBytes, this.nameEnds, row, entry - 1)) {
            this.duplicate('name', nameText(this.nameBytes, this.nameEnds, row), row, entry - 1)
          }
          slot = (slot + 1) & mask
        }
        names[slot] = row + 1
        slot = shaSlotHash(this.shas, row * SHA_WORDS) & mask
        for (let entry = shas[slot]!; entry !== 0; entry = shas[slot]!) {
          if (this.sameSha(row, entry - 1)) this.duplicate('sha256', undefined, row, entry - 1)
          slot = (slot + 1) & mask
        }
        shas[slot] = row + 1
      }
      yield
    }
  }
}

/** Rows a step of resize or index takes: some milliseconds for a million keys' columns. */
const SLICE_ROWS = 16_384

/** Runs the steps, with a turn of the event loop between them once they have held it for a slice (slices.ts). */
async function inSlices (steps: Iterable<void>) {
  const slicer = createSlicer()
  for (const _ of steps) if (slicer.overdue()) await slicer.pause()
}

/** The index in KEY_KINDS of the kind at bytes[start, start + length), -1 for none. */
function kindOfBytes (bytes: Buffer, start: number, length: number): number {
  for (let kind = 0; kind < KIND_BYTES.length; kind++) {
    const expected = KIND_BYTES[kind]!
    if (expected.length !== length) continue
    let i = 0
    while (i < length && bytes[start + i] === expected[i]) i++
    if (i === length) return kind
  }
  return -1
}

/** Where row `row`'s name starts in a table's name bytes. */
function nameStart (ends: Uint32Array, row: number): number {
  return row === 0 ? 0 : ends[row - 1]!
}

/** Whether row `row`'s name is `name`: compared byte to character while both are ASCII, without encoding `name`. */
function nameIs (bytes: Buffer, ends: Uint32Array, row: number, name: string): boolean {
  const start = nameStart(ends, row)
  const length = ends[row]! - start
  // UTF-8 takes at least one byte for each UTF-16 unit, and exactly one only for ASCII.
  if (length < name.length) return false
  if (length === name.length) {
    let i = 0
    for (; i < length; i++) {
      const byte = bytes[start + i]!
      if (byte >= 0x80) break
      if (byte !== name.charCodeAt(i)) return false
    }
    if (i === length) return true
  }
  return nameText(bytes, ends, row) === name
}

/** Row `row`'s name as text. */
function nameText (bytes: Buffer, ends: Uint32Array, row: number): string {
  return bytes.toString('utf8', nameStart(ends, row), ends[row])
}

/** Whether rows `a` and `b` have the same name. */
function sameName (bytes: Buffer, ends: Uint32Array, a: number, b: number): boolean {
  const startA = nameStart(ends, a)
  const startB = nameStart(ends, b)
  return bytes.compare(bytes, startB, ends[b], startA, ends[a]) === 0
}

/** Slots for `rows` rows: a power of two, at most half full. */
function slotsFor (rows: number): number {
  let slots = 16
  while (slots < rows * 2) slots *= 2
  return slots
}
