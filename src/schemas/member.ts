import { Type, type Static } from '@sinclair/typebox'
import { Nullable } from './common.js'

export const MemberSchema = Type.Object({
  id: Type.String({ minLength: 1 }),
  email: Type.String({ format: 'email' }),
  first_name: Nullable(Type.String()),
  last_name: Nullable(Type.String()),
  role: Type.Union([Type.Literal('org:admin'), Type.Literal('org:member')])
}, { $id: 'Member', additionalProperties: false })

export type Member = Static<typeof MemberSchema>

export const MemberPageSchema = Type.Object({
  data: Type.Array(MemberSchema),
  total_count: Type.Integer({ minimum: 0, description: 'Number of members of the organization, whatever the page' })
}, { additionalProperties: false })

// Defaults and bounds live here, not in the handler; the SDK sends these names.
export const MemberPageQuerySchema = Type.Object({
  offset: Type.Integer({ minimum: 0, default: 0, description: 'Number of records to skip' }),
  limit: Type.Integer({ minimum: 1, maximum: 100, default: 50, description: 'Maximum number of records to return' })
})

export type MemberPageQuery = Static<typeof MemberPageQuerySchema>
