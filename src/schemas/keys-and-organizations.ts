import { Type, type Static } from '@sinclair/typebox'
import { MemberSchema } from './member.js'
import { TIMESTAMP_FORMAT, WELL_FORMED_FORMAT } from './formats.js'
import { IDENTIFIER_MAX, NAME_MAX } from './common.js'

// Shapes of the data files that are not served as-is. Their descriptions are docs/data.md's tables of
// the files' formats (npm run docs).
export const OrganizationSchema = Type.Object({
  id: Type.String({ minLength: 1, maxLength: IDENTIFIER_MAX, description: 'Identifier of the organization, which its keys name in organization_id; unique' }),
  name: Type.String({ minLength: 1, maxLength: NAME_MAX, description: 'Display name of the organization' }),
  members: Type.Array(MemberSchema, { description: 'The members of the organization, in the order its member pages serve them; each id once' })
}, { additionalProperties: false, description: 'An organization, with its members' })


export const KEY_KINDS = ['standard', 'management'] as const

/** The highest rate limit a key may carry of its own: a billion requests a minute is no limit at all. */
export const RATE_LIMIT_MAX = 1_000_000_000

export const ApiKeySchema = Type.Object({
  // Held as UTF-8 (key-table.ts), which cannot hold a lone surrogate.
  name: Type.String({
    minLength: 1,
    maxLength: IDENTIFIER_MAX,
    format: WELL_FORMED_FORMAT,
    description: 'Name of the key, which npm run key takes to rotate or revoke it; unique, not empty, and well-formed Unicode (a lone surrogate such as "\\ud800" is refused: names are held as UTF-8)'
  }),
  // The pattern says 64 characters; the length says it too, for what bounds a value before it reads it (sources/postgres.ts).
  sha256: Type.String({ maxLength: 64, pattern: '^[0-9a-f]{64}$', description: 'SHA-256 of the key, lowercase hex; the key itself is never stored' }),
  kind: Type.Union(KEY_KINDS.map((kind) => Type.Literal(kind)), { description: 'What the key may do: a management key also lists the members of its organization' }),
  organization_id: Type.String({ minLength: 1, maxLength: IDENTIFIER_MAX, description: 'Identifier of the organization of the key; one that does not exist is valid, and its member listing answers 404 (npm run check warns of it, and refuses it with --strict; npm run key refuses to mint one)' }),
  expires_at: Type.Optional(Type.Union([Type.String({ format: TIMESTAMP_FORMAT }), Type.Null()], {
    description: 'The instant from which the key answers 401 (This API key has expired), an RFC 3339 timestamp with a time zone; absent or null, it never expires'
  })),
  disabled: Type.Optional(Type.Boolean({ description: 'True: the key answers 401 (This API key is disabled) until it is enabled again (npm run key -- disable, enable); absent, false' })),
  rate_limit_per_minute: Type.Optional(Type.Union([Type.Integer({ minimum: 1, maximum: RATE_LIMIT_MAX }), Type.Null()], {
    description: `Requests a minute this key may make, in place of RATE_LIMIT_PER_MINUTE (1 to ${RATE_LIMIT_MAX}); absent or null, that setting's`
  })),
  previous: Type.Optional(Type.Union([Type.Object({
    sha256: Type.String({ maxLength: 64, pattern: '^[0-9a-f]{64}$', description: 'SHA-256 of the secret the key had before its last rotation, lowercase hex' }),
    expires_at: Type.String({ format: TIMESTAMP_FORMAT, description: 'The instant from which that secret answers 401 (the end of the rotation\'s grace), an RFC 3339 timestamp with a time zone' })
  }, { additionalProperties: false }), Type.Null()], {
    description: 'The secret the key had before its last rotation, which keeps working until the end of the grace (npm run key -- rotate); absent or null, none'
  }))
}, { additionalProperties: false, description: 'An API key, held as its name, the SHA-256 of the key (never the key itself), its kind, its organization, its expiry, whether it is disabled, its own rate limit and the secret it had before its last rotation' })

export type ApiKey = Static<typeof ApiKeySchema>
