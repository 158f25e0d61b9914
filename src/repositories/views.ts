import { createHash } from 'node:crypto'
import { brotliCompress, brotliCompressSync, constants as zlib, gzip, gzipSync } from 'node:zlib'
import type { MemberList } from './member-list.js'

/** The content codings a list is kept in, each body compressed once. */
export type ListCoding = 'identity' | 'gzip' | 'br'

/** A body in one content coding, with its entity tags. */
export interface Representation {
  body: Buffer
  /** Strong entity tag of `body`: each coding has its own, since their bytes differ (RFC 9110, 8.8.3). */
  etag: string
  /** The same tag, weak (`W/"…"`), which If-None-Match may carry too. */
  weakEtag: string
}

/** A list serialized once, and compressed once in each coding, each body with its entity tags. */
export interface SerializedList {
  representations: Record<ListCoding, Representation>
}

/** A page of an organization's members. */
export interface MemberPage {
  /** `{"data": Member[], "total_count": n}` as JSON. */
  json: Buffer
  /**
   * The version of the organization's members: the same members give the same version on every
   * replica, and any change of a member gives another. With the offset and the limit, it names the page.
   */
  version: string
}

// Derived once per list of members, and collected with it.
const memberPages = new WeakMap<MemberList, MemberPages>()

/** The pages of a list of members. */
export function memberPagesOf (members: MemberList): MemberPages {
  let pages = memberPages.get(members)
  if (pages === undefined) {
    pages = pagesOf(members)
    memberPages.set(members, pages)
  }
  return pages
}

interface MemberPages {
  page(offset: number, limit: number): MemberPage
}

const PAGE_START = Buffer.from('{"data":[')

/**
 * Pages of a list of members, which holds them serialized already: a page is its slice between two
 * brackets, and costs the same whatever the size of the organization.
 */
function pagesOf (members: MemberList): MemberPages {
  const pageEnd = Buffer.from(`],"total_count":${members.length}}`)
  const pastTheEnd = Buffer.concat([PAGE_START, pageEnd])
  return {
    page (offset: number, limit: number): MemberPage {
      if (offset >= members.length) return { json: pastTheEnd, version: members.version }
      return { json: Buffer.concat([PAGE_START, ...members.json(offset, Math.min(offset + limit, members.length)), pageEnd]), version: members.version }
    }
  }
}

function representation (body: Buffer): Representation {
  const etag = `"${createHash('sha256').update(body).digest('base64url')}"`
  return { body, etag, weakEtag: `W/${etag}` }
}

let compressionHeld: Promise<void> | undefined

/**
 * Holds the background compression of the lists serialized from now on until the function it
 * answers is called: main.ts holds it from the start until the server listens.
 */
export function holdListCompression (): () => void {
  let release!: () => void
  compressionHeld = new Promise((resolve) => { release = resolve })
  return () => {
    compressionHeld = undefined
    release()
  }
}

const GZIP_OPTIONS = { level: 9 }
const brotliOptions = (json: Buffer) => ({
  params: { [zlib.BROTLI_PARAM_QUALITY]: 10, [zlib.BROTLI_PARAM_MODE]: zlib.BROTLI_MODE_TEXT, [zlib.BROTLI_PARAM_SIZE_HINT]: json.length }
})

/**
 * The list as JSON, and compressed at the levels that pay once per data snapshot: gzip 9, brotli 10
 * (brotli 11 saves 3 % more of the bundled endpoints for 3.5 times the time, 21 ms instead of 6).
 * Each coding's tag is the hash of its own bytes: the same data gives the same tag on every
 * replica, a change gives a new one, and a tag never names two different bodies.
 *
 * The compression runs on libuv's thread pool, beside a reload instead of in it, and at start once
 * the server listens (holdListCompression): its results come back through the main thread, which
 * delayed the first answer by some 15 ms. A request that needs a coding before it is ready
 * compresses it then (the same bytes: same library, same settings).
 */
export function serializeList (records: readonly unknown[]): SerializedList {
  const json = Buffer.from(JSON.stringify({ data: records }))
  const identity = representation(json)
  const compressed: Partial<Record<'gzip' | 'br', Representation>> = {}
  const compress = () => {
    gzip(json, GZIP_OPTIONS, (error, body) => { if (!error) compressed.gzip ??= representation(body) })
    brotliCompress(json, brotliOptions(json), (error, body) => { if (!error) compressed.br ??= representation(body) })
  }
  if (compressionHeld) void compressionHeld.then(compress)
  else compress()
  return {
    representations: {
      identity,
      get gzip () { return (compressed.gzip ??= representation(gzipSync(json, GZIP_OPTIONS))) },
      get br () { return (compressed.br ??= representation(brotliCompressSync(json, brotliOptions(json)))) }
    }
  }
}
