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
export function answerHeaders ({ etag, coding }: Representation, vary: string): AnswerHeaders {
  const notModified = { etag, vary }
  const ok: Headers = coding === 'identity'
    ? { 'content-type': JSON_TYPE, ...notModified }
    : { 'content-type': JSON_TYPE, 'content-encoding': coding, ...notModified }
  return { ok, notModified }
}

/** A list serialized once, and compressed once in each coding. */
export interface SerializedList {
  readonly representations: Readonly<Record<Coding, Representation>>
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
 * brotli 10 (brotli 11 costs several times the time for a few per cent). The compression starts on
 * libuv's thread pool when the list is made, beside the request path; a request that needs a
 * coding before it is ready compresses it then (the same bytes: same library, same settings).
 */
export function serializeList (records: readonly unknown[]): SerializedList {
  const json = Buffer.from(JSON.stringify({ data: records }))
  const identity = representList(json, 'identity')
  const compressed: Partial<Record<'gzip' | 'br', Representation>> = {}
  gzip(json, LIST_GZIP, (error, body) => { if (!error) compressed.gzip ??= representList(body, 'gzip') })
  brotliCompress(json, listBrotli(json), (error, body) => { if (!error) compressed.br ??= representList(body, 'br') })
  return {
    representations: {
      identity,
      get gzip () { return (compressed.gzip ??= representList(gzipSync(json, LIST_GZIP), 'gzip')) },
      get br () { return (compressed.br ??= representList(brotliCompressSync(json, listBrotli(json)), 'br')) }
    }
  }
}

// Below this a page is sent as it is: the compressed form would save a few bytes for the same cost.
const COMPRESS_FROM_BYTES = 1024
const PAGE_GZIP = { level: 6 }
const PAGE_BROTLI = { [zlib.BROTLI_PARAM_QUALITY]: 4, [zlib.BROTLI_PARAM_MODE]: zlib.BROTLI_MODE_TEXT }

/** A page of a list that the snapshot holds by digest; its body is made only when it is sent. */
export interface PageSource {
  json: Buffer
  /** Changes whenever an item of the whole list changes; the same on every replica. */
  digest: string
}

/**
 * Compressed pages, by tag, up to this many bytes of them: the pages clients ask for again (the
 * first pages of the organizations in use) are compressed once, not on every request.
 */
export const COMPRESSED_PAGES_MAX_BYTES = 16 * 1024 * 1024

/** The compressed pages an app keeps, by tag: least recently used out first. */
export type CompressedPages = LRUCache<string, Buffer>

export function compressedPages (maxBytes = COMPRESSED_PAGES_MAX_BYTES): CompressedPages {
  return new LRUCache<string, Buffer>({ maxSize: maxBytes, sizeCalculation: (body) => body.length })
}

/**
 * A page in the coding the client prefers, tagged without hashing it: the list's digest, the
 * page's bounds and the coding name the bytes, so two replicas with the same data give the same
 * tag, and any change of the list gives a new one. The body is compressed only when read (a
 * 304 needs none), and kept by its tag in `cache` (the tag names its bytes: a page kept never goes
 * stale): synchronous zlib at fast levels (gzip 6, brotli 4), since a stream or the thread pool
 * costs more than the compression itself at this size.
 */
export class PageRepresentation implements Representation {
  readonly etag: string
  readonly coding: Coding
  readonly #json: Buffer
  readonly #cache: CompressedPages

  constructor ({ json, digest }: PageSource, offset: number, limit: number, accepted: Coding, cache: CompressedPages) {
    this.#json = json
    this.#cache = cache
    this.coding = json.length < COMPRESS_FROM_BYTES ? 'identity' : accepted
    this.etag = `"${digest}.${offset}.${limit}.${this.coding}"`
  }

  get body (): Buffer {
    if (this.coding === 'identity') return this.#json
    let body = this.#cache.get(this.etag)
    if (body === undefined) {
      const json = this.#json
      body = exactCopy(this.coding === 'gzip'
        ? gzipSync(json, PAGE_GZIP)
        : brotliCompressSync(json, { params: { ...PAGE_BROTLI, [zlib.BROTLI_PARAM_SIZE_HINT]: json.length } }))
      this.#cache.set(this.etag, body)
    }
    return body
  }
}
