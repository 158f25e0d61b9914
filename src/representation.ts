import { createHash } from 'node:crypto'
import { brotliCompress, brotliCompressSync, constants as zlib, gzip, gzipSync } from 'node:zlib'
import { LRUCache } from 'lru-cache'

/** The content codings a body is sent in. */
export type Coding = 'identity' | 'gzip' | 'br'

/** A body in one content coding, and its tag. */
export interface Representation {
  readonly body: Buffer
  readonly coding: Coding
  /** Strong entity tag: each coding has its own, since their bytes differ (RFC 9110, 8.8.3). */
  readonly etag: string
}

type Headers = Record<string, string>

/** The headers of a representation's answers, made once so that a route sets them in one call. */
export interface AnswerHeaders {
  /** Of a 200: content type, ETag, Vary and, when compressed, Content-Encoding. */
  readonly ok: Headers
  /** Of a 304: the ETag and Vary alone (RFC 9110, 15.4.5). */
  readonly notModified: Headers
}

const JSON_TYPE = 'application/json; charset=utf-8'

/**
 * The headers of the answers of a representation. `vary` is the same on every answer of an
 * operation, compressed or not (Accept-Encoding, and Origin with CORS), so that a cache never hands
 * a compressed body to a client that cannot read it.
 */
export function answerHeaders ({ etag, coding }: Pick<Representation, 'etag' | 'coding'>, vary: string): AnswerHeaders {
  const notModified = { etag, vary }
  const ok: Headers = coding === 'identity'
    ? { 'content-type': JSON_TYPE, ...notModified }
    : { 'content-type': JSON_TYPE, 'content-encoding': coding, ...notModified }
  return { ok, notModified }
}

/** A list serialized once, and compressed once in each coding. */
export interface SerializedList {
  readonly representations: Readonly<Record<Coding, Representation>>
  /** Starts compressing the codings not made yet on libuv's thread pool (once; then it does nothing). */
  compressInBackground(): void
}

/**
 * The bytes of `view` in memory of their own: zlib answers a view of its whole output chunk (64 KiB),
 * which a cache counting the view's length would keep dozens of times over.
 */
function exactCopy (view: Buffer): Buffer {
  if (view.byteOffset === 0 && view.length === view.buffer.byteLength) return view
  const copy = Buffer.allocUnsafeSlow(view.length)
  view.copy(copy)
  return copy
}

/** A list's tag is the hash of its bytes: the same data has the same tag on every replica. */
function representList (body: Buffer, coding: Coding): Representation {
  return { body: exactCopy(body), coding, etag: `"${createHash('sha256').update(body).digest('base64url')}"` }
}

const LIST_GZIP = { level: 9 }
const listBrotli = (json: Buffer) => ({
  params: { [zlib.BROTLI_PARAM_QUALITY]: 10, [zlib.BROTLI_PARAM_MODE]: zlib.BROTLI_MODE_TEXT, [zlib.BROTLI_PARAM_SIZE_HINT]: json.length }
})

/**
 * `{"data": records}` as JSON, and compressed at the levels that pay once per snapshot: gzip 9,
 * brotli 10 (brotli 11 costs several times the time for a few per cent). The compression runs on
 * libuv's thread pool, beside the request path, from when the list is made, or with `later` from
 * compressInBackground(); a request that needs a coding before it is ready compresses it then (the
 * same bytes: same library, same settings).
 */
export function serializeList (records: readonly unknown[], { later = false } = {}): SerializedList {
  const json = Buffer.from(JSON.stringify({ data: records }))
  const identity = representList(json, 'identity')
  const compressed: Partial<Record<'gzip' | 'br', Representation>> = {}
  let started = false
  const list: SerializedList = {
    representations: {
      identity,
      get gzip () { return (compressed.gzip ??= representList(gzipSync(json, LIST_GZIP), 'gzip')) },
      get br () { return (compressed.br ??= representList(brotliCompressSync(json, listBrotli(json)), 'br')) }
    },
    compressInBackground () {
      if (started) return
      started = true
      if (compressed.gzip === undefined) gzip(json, LIST_GZIP, (error, body) => { if (!error) compressed.gzip ??= representList(body, 'gzip') })
      if (compressed.br === undefined) brotliCompress(json, listBrotli(json), (error, body) => { if (!error) compressed.br ??= representList(body, 'br') })
    }
  }
  if (!later) list.compressInBackground()
  return list
}

// Below this a page is sent as it is: the compressed form would save a few bytes for the same cost.
const COMPRESS_FROM_BYTES = 1024
const PAGE_GZIP = { level: 6 }
const PAGE_BROTLI = { [zlib.BROTLI_PARAM_QUALITY]: 4, [zlib.BROTLI_PARAM_MODE]: zlib.BROTLI_MODE_TEXT }

/** A list that the snapshot holds by digest, whose pages are made only when asked for. */
export interface Paged {
  /** Changes whenever an item of the whole list changes; the same on every replica. */
  readonly digest: string
  /** The page's JSON, in memory of its own (the cache counts its length). */
  page(offset: number, limit: number): Buffer
  /** The length of page(offset, limit), without making it. */
  pageLength(offset: number, limit: number): number
}

/**
 * The pages an app keeps, up to this many bytes: their bodies in each coding sent, and ANSWER_BYTES
 * for the objects of each answer.
 */
export const PAGE_CACHE_MAX_BYTES = 16 * 1024 * 1024

/**
 * What the objects of a kept answer take besides its body (the key, the cache's entry, the tag, two
 * header objects, the body's buffer object), counted above what they were measured to take
 * (docs/performance.md, "How the data is held"), so that pages of a few members, which are mostly
 * these objects, keep the bound too.
 */
const ANSWER_BYTES = 1536

/**
 * A page's answer in one coding: its tag and headers at once, its body when a 200 first needs it
 * (a 304 needs none), then kept. A page's tag is made without hashing it: the list's digest, the
 * page's bounds and the coding name the bytes, so two replicas with the same data give the same tag,
 * and any change of the list gives a new one. A compressed body is made with synchronous zlib at fast
 * levels (gzip 6, brotli 4), since a stream or the thread pool costs more than the compression itself
 * at this size.
 */
class PageAnswer {
  readonly etag: string
  readonly headers: AnswerHeaders
  #body: Buffer | undefined

  constructor (key: string, readonly coding: Coding, vary: string, private readonly offset: number, private readonly limit: number, private readonly kept: (bytes: number) => void) {
    this.etag = `"${key}.${coding}"`
    this.headers = answerHeaders(this, vary)
  }

  /** The body, made from `list` (any list of the page's digest: they hold the same bytes) the first time. */
  body (list: Paged): Buffer {
    if (this.#body === undefined) {
      const json = list.page(this.offset, this.limit)
      this.#body = this.coding === 'identity'
        ? json
        : exactCopy(this.coding === 'gzip'
          ? gzipSync(json, PAGE_GZIP)
          : brotliCompressSync(json, { params: { ...PAGE_BROTLI, [zlib.BROTLI_PARAM_SIZE_HINT]: json.length } }))
      this.kept(this.#body.length)
    }
    return this.#body
  }
}

/** A page's answers in the codings asked for so far. */
interface PageAnswers {
  /** Whether the page is long enough to be sent compressed. */
  readonly compressible: boolean
  identity?: PageAnswer
  gzip?: PageAnswer
  br?: PageAnswer
  /** What the cache counts: ANSWER_BYTES for each answer, and the bodies made. */
  bytes: number
}

/**
 * Pages of lists, kept as they are sent (the bodies, their tags, their headers) by the list's digest
 * and the page's bounds, least recently used out first: a page asked for again costs a lookup, as a
 * list does, instead of being joined, tagged and given headers on every request. The key names the
 * bytes (the digest changes with any item of the list), so a page kept never goes stale: a changed
 * list is asked for by another key, and its old pages age out. A body is kept in the codings it was
 * sent in, so that a page sent compressed only holds no uncompressed copy. `vary` as for answerHeaders.
 */
export class PageCache {
  readonly #entries: LRUCache<string, PageAnswers>
  readonly #vary: string

  constructor (vary: string, maxBytes = PAGE_CACHE_MAX_BYTES) {
    this.#vary = vary
    this.#entries = new LRUCache<string, PageAnswers>({ maxSize: maxBytes, sizeCalculation: (answers) => answers.bytes })
  }

  /** The page's answer in `accepted`, or uncompressed when the page is too short to gain from it. */
  answer (list: Paged, offset: number, limit: number, accepted: Coding): PageAnswer {
    const key = `${list.digest}.${offset}.${limit}`
    const kept = this.#entries.get(key)
    const answers = kept ?? { compressible: list.pageLength(offset, limit) >= COMPRESS_FROM_BYTES, bytes: 0 }
    const coding = answers.compressible ? accepted : 'identity'
    let answer = answers[coding]
    if (answer === undefined) {
      answer = answers[coding] = new PageAnswer(key, coding, this.#vary, offset, limit, (bytes) => this.#grow(key, answers, bytes))
      answers.bytes += ANSWER_BYTES
      if (kept === undefined) this.#entries.set(key, answers)
      else this.#grow(key, answers, 0)
    }
    return answer
  }

  /**
   * Counts `bytes` more for a page: set() of the entry already there would keep its size, so it is
   * set anew. A page evicted meanwhile is not brought back.
   */
  #grow (key: string, answers: PageAnswers, bytes: number) {
    answers.bytes += bytes
    if (this.#entries.peek(key) !== answers) return
    this.#entries.delete(key)
    this.#entries.set(key, answers)
  }

  /** The pages kept, and the bytes counted for them. */
  get usage (): { pages: number, bytes: number } {
    return { pages: this.#entries.size, bytes: this.#entries.calculatedSize }
  }
}
