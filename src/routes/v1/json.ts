import { brotliCompressSync, constants as zlib, gzipSync } from 'node:zlib'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { ListCoding, Representation, SerializedList } from '../../repositories/views.js'
import { memoize } from '../../memoize.js'

/**
 * Sends a body that was validated and serialized when its snapshot was installed: a Buffer goes out
 * as it is (the route's response schema only documents it), under the JSON content type.
 */
function sendSerialized (reply: FastifyReply, json: Buffer) {
  return reply.type('application/json; charset=utf-8').send(json)
}

/**
 * Sends a list in the coding the client prefers, compressed once per snapshot, with that representation's
 * strong ETag, or a bodiless 304 when the client already has that representation.
 * (@fastify/etag would hash every other response of the scope, errors included, and only knows
 * a single exact tag; this is the whole of If-None-Match, RFC 9110 section 13.1.2, in a few lines.)
 */
export function sendList (request: FastifyRequest, reply: FastifyReply, list: SerializedList) {
  const coding = negotiate(request.headers['accept-encoding'])
  const chosen = list.representations[coding]
  varyOnAcceptEncoding(reply)
  reply.header('etag', chosen.etag)
  if (isNotModified(request.headers['if-none-match'], chosen)) return reply.code(304).send()
  if (coding !== 'identity') reply.header('content-encoding', coding)
  return sendSerialized(reply, chosen.body)
}

// Below this a page is sent as it is: the compressed form would save a few bytes for the same cost.
const COMPRESS_FROM_BYTES = 1024
const BROTLI_PAGE = { [zlib.BROTLI_PARAM_QUALITY]: 4, [zlib.BROTLI_PARAM_MODE]: zlib.BROTLI_MODE_TEXT }

/**
 * Sends a page made for this request, compressed for it when the client asks. Synchronous zlib at
 * fast levels (gzip 6, brotli 4: about 50 µs for a page of 100 members, 12.6 KB to 1.5 KB): a
 * stream, or zlib's thread pool, costs more than the compression itself at this size, and the
 * server runs on one core.
 */
export function sendPage (request: FastifyRequest, reply: FastifyReply, json: Buffer) {
  const coding = negotiate(request.headers['accept-encoding'])
  varyOnAcceptEncoding(reply)
  if (coding === 'identity' || json.length < COMPRESS_FROM_BYTES) return sendSerialized(reply, json)
  reply.header('content-encoding', coding)
  return sendSerialized(reply, coding === 'gzip'
    ? gzipSync(json, { level: 6 })
    : brotliCompressSync(json, { params: { ...BROTLI_PAGE, [zlib.BROTLI_PARAM_SIZE_HINT]: json.length } }))
}

function varyOnAcceptEncoding (reply: FastifyReply) {
  // Appended: CORS may have put Origin there.
  const vary = reply.getHeader('vary')
  reply.header('vary', vary ? `${String(vary)}, Accept-Encoding` : 'Accept-Encoding')
}

function isNotModified (header: string | undefined, { etag, weakEtag }: Representation): boolean {
  if (header === undefined) return false
  if (header.trim() === '*') return true
  // Weak comparison: W/"x" matches "x".
  return header.split(',').some((tag) => {
    const trimmed = tag.trim()
    return trimmed === etag || trimmed === weakEtag
  })
}

// Clients send a handful of distinct Accept-Encoding values; each is parsed once.
const preferredCodingOf = memoize((header) => preferredCoding(header), 100)

/** The coding to answer in: no header, identity. */
function negotiate (header: string | undefined): ListCoding {
  return header === undefined ? 'identity' : preferredCodingOf(header)
}

// On equal weights the smaller body wins.
const PREFERENCE: ListCoding[] = ['br', 'gzip', 'identity']
const QUALITY = /^q=([01](\.[0-9]{0,3})?)$/i

/**
 * The acceptable coding of highest weight (RFC 9110, section 12.5.3): `q=0` refuses a coding, `*`
 * stands for every coding not named, identity is acceptable unless refused. When nothing is
 * acceptable (`identity;q=0, *;q=0`), the body goes out uncompressed rather than as a 406.
 */
function preferredCoding (header: string): ListCoding {
  const weights = new Map<string, number>()
  for (const entry of header.split(',')) {
    const [name = '', ...parameters] = entry.split(';').map((part) => part.trim())
    if (name === '') continue
    const quality = parameters.map((parameter) => QUALITY.exec(parameter)).find((match) => match !== null)
    // x-gzip is gzip (RFC 9110, section 8.4.1.3).
    weights.set(name.toLowerCase() === 'x-gzip' ? 'gzip' : name.toLowerCase(), quality ? Number(quality[1]) : 1)
  }
  const any = weights.get('*')
  let best: ListCoding = 'identity'
  let bestWeight = 0
  for (const coding of PREFERENCE) {
    const weight = weights.get(coding) ?? any ?? (coding === 'identity' ? 1 : 0)
    if (weight > bestWeight) {
      best = coding
      bestWeight = weight
    }
  }
  return best
}
