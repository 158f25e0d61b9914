import { Type, type Static } from '@sinclair/typebox'
import { EMAIL_MAX, IDENTIFIER_MAX, NAME_MAX, Nullable } from './common.js'

const memberExamples = [
  { id: 'user_acme0001', email: 'ada.hamilton.1@acme.example', first_name: 'Ada', last_name: 'Hamilton', role: 'org:admin' },
  { id: 'user_acme0002', email: 'grace.okafor.2@acme.example', first_name: 'Grace', last_name: null, role: 'org:member' }
]

export const MemberSchema = Type.Object({
  id: Type.String({ minLength: 1, maxLength: IDENTIFIER_MAX, description: 'Member identifier' }),
  email: Type.String({ maxLength: EMAIL_MAX, format: 'email', description: 'Member e-mail address' }),
  first_name: Nullable(Type.String({ maxLength: NAME_MAX }), { description: 'Member first name, or null when unknown' }),
  last_name: Nullable(Type.String({ maxLength: NAME_MAX }), { description: 'Member last name, or null when unknown' }),
  role: Type.Union([Type.Literal('org:admin'), Type.Literal('org:member')], { description: 'Role of the member in the organization' })
}, {
  $id: 'Member',
  additionalProperties: false,
  description: 'A member of an organization; all five keys are always present',
  examples: [memberExamples[0]]
})

export type Member = Static<typeof MemberSchema>

export const MemberPageSchema = Type.Object({
  data: Type.Array(MemberSchema, { description: 'The members of the page, in the order of the data file' }),
  total_count: Type.Integer({ minimum: 0, description: 'The total number of members, independent of the page returned' })
}, {
  additionalProperties: false,
  description: 'One page of the members of the organization tied to the key',
  examples: [{ data: memberExamples, total_count: 130 }]
})

// Both parameters are optional on the wire, which is what the document must say; once the
// schema has filled in the defaults, a handler always finds both, which is what its type says.
const MemberPageQueryWireSchema = Type.Object({
  offset: Type.Optional(Type.Integer({ minimum: 0, default: 0, description: 'Number of records to skip' })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 50, description: 'Maximum number of records to return (page size)' }))
})

// Defaults and bounds live here, not in the handler; the SDK sends these names.
export const MemberPageQuerySchema = Type.Unsafe<Required<Static<typeof MemberPageQueryWireSchema>>>(MemberPageQueryWireSchema)

