import Negotiator from 'negotiator'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { PageCache, answerHeaders, type AnswerHeaders, type Coding, type Paged, type Representation, type SerializedList } from '../../representation.js'
import { memoize } from '../../memoize.js'

/** How a route sends its lists and pages. */
export interface Senders {
  /**
   * Sends a list in the coding the client prefers, as its snapshot made it, or a bodiless 304 when
   * the client already has that representation. (@fastify/etag would hash every other response of
   * the scope, errors included.)
   */
  sendList(request: FastifyRequest, reply: FastifyReply, list: SerializedList): FastifyReply
  /** Sends a page of a list, tagged by the list's digest and the page's bounds, compressed only for a 200. */
  sendPage(request: FastifyRequest, reply: FastifyReply, list: Paged, offset: number, limit: number): FastifyReply
}

/**
 * The senders of an app whose answers vary on `vary`: each list representation's headers are made
 * once, on its first answer (a snapshot's lists live as long as it does: a WeakMap lets them go);
 * each page's, with its bodies, once while its cache keeps it.
 */
export function createSenders (vary: string, pages: PageCache): Senders {
  const listHeaders = new WeakMap<Representation, AnswerHeaders>()
  function headersOfList (representation: Representation): AnswerHeaders {
    let headers = listHeaders.get(representation)
    if (headers === undefined) listHeaders.set(representation, headers = answerHeaders(representation, vary))
    return headers
  }
  return {
    sendList (request, reply, list) {
      const representation = list.representations[negotiate(request.headers['accept-encoding'])]
      return send(request, reply, representation, headersOfList(representation))
    },
    sendPage (request, reply, list, offset, limit) {
      const answer = pages.answer(list, offset, limit, negotiate(request.headers['accept-encoding']))
      if (isNotModified(request.headers['if-none-match'], answer.etag)) return reply.code(304).headers(answer.headers.notModified).send()
      return reply.headers(answer.headers.ok).send(answer.body(list))
    }
  }
}

function send (request: FastifyRequest, reply: FastifyReply, representation: Representation, headers: AnswerHeaders) {
  if (isNotModified(request.headers['if-none-match'], representation.etag)) return reply.code(304).headers(headers.notModified).send()
  return reply.headers(headers.ok).send(representation.body)
}

/**
 * The tags an If-None-Match names, without their weak prefix (the comparison is weak, RFC 9110
 * section 13.1.2), or true for `*`. Clients repeat the few tags they hold: each header is read once.
 */
const tagsOf = memoize((header): Set<string> | true => {
  if (header.trim() === '*') return true
  return new Set(header.split(',').map((tag) => tag.trim().replace(/^W\//, '')))
}, 100)

function isNotModified (header: string | undefined, etag: string): boolean {
  if (header === undefined) return false
  // The usual case, a client sending back the one tag it was given, needs no parsing.
  if (header === etag) return true
  const tags = tagsOf(header)
  return tags === true || tags.has(etag)
}

// On equal weights the smaller body wins. x-gzip is gzip (RFC 9110, section 8.4.1.3), offered
// only to a header that names it: through `*` it would bring gzip back where gzip;q=0 refused it.
const CODINGS = ['br', 'gzip', 'identity']
const CODINGS_AND_ALIAS = ['br', 'gzip', 'x-gzip', 'identity']
const NAMES_ALIAS = /x-gzip/i
// @types/negotiator lacks the `preferred` option that negotiator documents.
type PreferringNegotiator = Negotiator & { encodings(available: readonly string[], options: { preferred: readonly string[] }): string[] }

/**
 * The acceptable coding of highest weight, by negotiator (RFC 9110, section 12.5.3: weights, `*`,
 * identity acceptable unless refused, case-insensitive names). Nothing acceptable
 * (`identity;q=0, *;q=0`): the body goes out uncompressed rather than as a 406. Clients send a
 * handful of distinct values: each is negotiated once.
 */
const preferredCodingOf = memoize((header): Coding => {
  const offered = NAMES_ALIAS.test(header) ? CODINGS_AND_ALIAS : CODINGS
  const [best] = (new Negotiator({ headers: { 'accept-encoding': header } }) as PreferringNegotiator).encodings(offered, { preferred: offered })
  return best === 'x-gzip' ? 'gzip' : (best as Coding | undefined) ?? 'identity'
}, 100)

function negotiate (header: string | undefined): Coding {
  return header === undefined ? 'identity' : preferredCodingOf(header)
}
