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
  organization_id: Type.String({ minLength: 1, maxLength: IDENTIFIER_MAX, description: 'Identifier of the organization of the key; one that does not exist is valid, and its member listing answers 404 (npm run check warns of it, npm run key refuses to mint one)' }),
  expires_at: Type.Optional(Type.Union([Type.String({ format: TIMESTAMP_FORMAT }), Type.Null()], {
    description: 'The instant from which the key answers 401 (This API key has expired), an RFC 3339 timestamp with a time zone; absent or null, it never expires'
  }))
}, { additionalProperties: false, description: 'An API key, held as its name, the SHA-256 of the key (never the key itself), its kind, its organization and its expiry' })

export type ApiKey = Static<typeof ApiKeySchema>
