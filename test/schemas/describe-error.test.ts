import { Value } from '@sinclair/typebox/value'
import { describe, expect, it } from 'vitest'
import { describeErrors } from '../../src/schemas/describe-error.js'
import { ApiKeySchema, OrganizationSchema } from '../../src/schemas/keys-and-organizations.js'
import { ProviderSchema } from '../../src/schemas/provider.js'

const KEY = { name: 'ci', sha256: 'a'.repeat(64), kind: 'standard', organization_id: 'org_1' }
const MEMBER = { id: 'user_1', email: 'ada@example.com', first_name: 'Ada', last_name: 'Lovelace', role: 'org:admin' }

describe('the message of a record that breaks its schema', () => {
  it('names the known field an unknown one was probably meant to be', () => {
    const { headquarters, ...rest } = { name: 'Acme', slug: 'acme', privacy_policy_url: null, headquarters: 'US' }
    expect(describeErrors(Value.Errors(ProviderSchema, { ...rest, headquarter: headquarters })))
      .toBe('headquarter: is not a known field; did you mean "headquarters"?')
  })

  it('names the unknown field a missing required one was probably written as', () => {
    const { organization_id: organizationId, ...rest } = KEY
    expect(describeErrors(Value.Errors(ApiKeySchema, { ...rest, organisation_id: organizationId })))
      .toBe('organization_id: is required; the record has "organisation_id", did you mean "organization_id"?')
  })

  it('finds the slip in a nested record too, by its place', () => {
    const { role, ...rest } = MEMBER
    const organization = { id: 'org_1', name: 'One', members: [MEMBER, { ...rest, rolee: role }] }
    expect(describeErrors(Value.Errors(OrganizationSchema, organization)))
      .toBe('members[1].role: is required; the record has "rolee", did you mean "role"?')
  })

  it('says only "is required" when no unknown field is close to the missing one', () => {
    const { organization_id: organizationId, ...rest } = KEY
    expect(describeErrors(Value.Errors(ApiKeySchema, { ...rest, owner: organizationId })))
      .toBe('organization_id: is required')
    // A known field close to the missing one is no typo of it.
    const { last_name: lastName, ...member } = MEMBER
    expect(describeErrors(Value.Errors(OrganizationSchema, { id: 'org_1', name: 'One', members: [{ ...member, first_name: lastName }] })))
      .toBe('members[0].last_name: is required')
  })

  it('answers nothing for a valid record', () => {
    expect(describeErrors(Value.Errors(ApiKeySchema, KEY))).toBeUndefined()
  })
})
