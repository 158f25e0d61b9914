import { Type, type SchemaOptions, type Static, type TSchema } from '@sinclair/typebox'
import './formats.js'

/**
 * The longest string of each sort a data file may hold, in characters (UTF-16 code units, as
 * JavaScript counts them). Every record is held in memory, and its strings end up in log lines,
 * messages and Redis keys: an unbounded one lets a single record cost what the file weighs. Each bound
 * is far above any real value (docs/data.md, "The data files", says why each).
 */
export const IDENTIFIER_MAX = 256
export const NAME_MAX = 1024
export const URL_MAX = 2048
/** RFC 5321 (section 4.5.3.1.3): a path is at most 256 octets, its angle brackets included. */
export const EMAIL_MAX = 254

/** `schema` or null; the options (a description) go on the whole, where a reader of the field looks. */
export function Nullable<T extends TSchema> (schema: T, options: SchemaOptions = {}) {
  return Type.Union([schema, Type.Null()], options)
}

/**
 * A list served whole, `{"data": [...]}`, of records of `schema`: its examples are the records' own,
 * together in one list.
 */
export function ListOf (schema: TSchema, description: string) {
  return Type.Object({ data: Type.Array(schema) }, {
    additionalProperties: false,
    description,
    examples: [{ data: schema.examples ?? [] }]
  })
}

/** Routes refer to the error body by this id; the errors plugin registers the schema under it. */
const ERROR_SCHEMA_ID = 'Error'

export const ErrorSchema = Type.Object({
  error: Type.Object({
    code: Type.Integer({ description: 'Numeric error code, equal to the HTTP status' }),
    message: Type.String({ description: 'Human-readable message' }),
    metadata: Type.Optional(Nullable(Type.Record(Type.String(), Type.Unknown()), { description: 'Free-form additional data' }))
  }, { additionalProperties: false, description: 'Error data' })
}, {
  $id: ERROR_SCHEMA_ID,
  additionalProperties: false,
  description: 'The error body shared by every failure',
  examples: [{ error: { code: 500, message: 'Internal Server Error' } }]
})

type ErrorBody = Static<typeof ErrorSchema>

/**
 * A documented error status of an operation: the shared Error schema by reference (one component
 * in the OpenAPI document, not a copy per status), with what the status means there and an
 * example of the message the server sends. The reference sits in an allOf because @fastify/swagger
 * drops the keywords written next to a bare $ref, the example among them.
 */
export function ErrorResponse (status: number, description: string, exampleMessage: string) {
  return Type.Unsafe<ErrorBody>({
    allOf: [Type.Ref(ERROR_SCHEMA_ID)],
    description,
    examples: [{ error: { code: status, message: exampleMessage } }]
  })
}

/** A conditional GET whose If-None-Match holds the current ETag: no body (the schema type null means none). */
export const NotModifiedResponse = Type.Null({
  description: 'Not Modified: the answer is unchanged since the ETag given in If-None-Match; no body'
})

/** 429 on every operation, with OpenRouter's body; `Retry-After` says in how many seconds to try again. */
const TooManyRequestsResponse = Type.Unsafe<ErrorBody>({
  allOf: [Type.Ref(ERROR_SCHEMA_ID)],
  description: 'Too many requests this minute for the key (or, without a valid key, for the client address). ' +
    'Retry-After gives the seconds until the window resets; X-RateLimit-Limit, X-RateLimit-Remaining and ' +
    'X-RateLimit-Reset come with every answer of the operation.',
  examples: [{ error: { code: 429, message: 'Rate limit exceeded', metadata: { error_type: 'rate_limit_exceeded' } } }]
})

/** Why any operation may answer 400, whatever its parameters. */
const MALFORMED_HEADERS = 'a repeated Host or Authorization header, or no Host header in HTTP/1.1'

/** 400 on every operation; `also` names the operation's own reasons. */
export const BadRequestResponse = (exampleMessage: string, also?: string) =>
  ErrorResponse(400, `The request is malformed: ${also ? `${also}; or ` : ''}${MALFORMED_HEADERS}`, exampleMessage)

/** The error answers every operation of /v1 may give, whatever it does; an operation documents its own beside them. */
export const SharedErrorResponses = {
  400: BadRequestResponse('The Authorization header is sent more than once'),
  // The example shows one of the three messages.
  401: ErrorResponse(401, 'The Authorization header is missing, malformed, or carries an unknown or expired key', 'Missing Authentication header: send Authorization: Bearer <key>'),
  // None takes a body, and a large one is not read (app.ts, BODY_LIMIT_BYTES).
  413: ErrorResponse(413, 'The request carries a body of more than 1 KiB; no operation takes a body', 'Request body is too large'),
  // Node.js would refuse an Expect other than 100-continue without a body.
  417: ErrorResponse(417, 'The request carries an Expect header other than 100-continue', "Expectation Failed: 'Expect: 200-ok' is not supported; only 100-continue is"),
  429: TooManyRequestsResponse,
  500: ErrorResponse(500, 'Unexpected server error', 'Internal Server Error'),
  503: ErrorResponse(503, 'The server could not confirm its keys as current for longer than its bound ' +
    '(MAX_STALENESS_MS, off unless set): it refuses every keyed request until it has caught up. Retry-After gives the seconds to wait.',
  'The data served cannot be confirmed current; try again later')
}
