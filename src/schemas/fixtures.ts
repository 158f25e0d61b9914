import { Type, type Static } from '@sinclair/typebox'
import { MemberSchema } from './member.js'
import { TIMESTAMP_FORMAT, WELL_FORMED_FORMAT } from './formats.js'
import { IDENTIFIER_MAX, NAME_MAX } from './common.js'

// Shapes of the data files that are not served as-is.
export const OrganizationSchema = Type.Object({
  id: Type.String({ minLength: 1, maxLength: IDENTIFIER_MAX }),
  name: Type.String({ minLength: 1, maxLength: NAME_MAX }),
  members: Type.Array(MemberSchema)
}, { additionalProperties: false })


export const KEY_KINDS = ['standard', 'management'] as const

export const ApiKeySchema = Type.Object({
  // Held as UTF-8 (key-table.ts), which cannot hold a lone surrogate.
  name: Type.String({ minLength: 1, maxLength: IDENTIFIER_MAX, format: WELL_FORMED_FORMAT }),
  // The pattern says 64 characters; the length says it too, for what bounds a value before it reads it (sources/postgres.ts).
  sha256: Type.String({ maxLength: 64, pattern: '^[0-9a-f]{64}$', description: 'SHA-256 of the key, lowercase hex; the key itself is never stored' }),
  kind: Type.Union(KEY_KINDS.map((kind) => Type.Literal(kind))),
  organization_id: Type.String({ minLength: 1, maxLength: IDENTIFIER_MAX }),
  // From this instant on the key answers 401; absent or null, it never expires.
  expires_at: Type.Optional(Type.Union([Type.String({ format: TIMESTAMP_FORMAT, description: 'RFC 3339, with a time zone' }), Type.Null()]))
}, { additionalProperties: false })

export type ApiKey = Static<typeof ApiKeySchema>
