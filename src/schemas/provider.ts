import { Type, type Static } from '@sinclair/typebox'
import { COUNTRY_CODE_FORMAT } from './formats.js'
import { Nullable } from './common.js'

const CountryCodeSchema = Type.String({
  format: COUNTRY_CODE_FORMAT,
  description: 'ISO 3166-1 alpha-2 country code'
})

const UrlSchema = Type.String({ format: 'uri' })

export const ProviderSchema = Type.Object({
  name: Type.String({ minLength: 1, description: 'Display name of the provider' }),
  slug: Type.String({ pattern: '^[a-z0-9][a-z0-9._-]*$', description: 'URL-friendly identifier of the provider' }),
  privacy_policy_url: Nullable(UrlSchema),
  status_page_url: Type.Optional(Nullable(UrlSchema)),
  terms_of_service_url: Type.Optional(Nullable(UrlSchema)),
  headquarters: Type.Optional(Nullable(CountryCodeSchema)),
  datacenters: Type.Optional(Nullable(Type.Array(CountryCodeSchema)))
}, { $id: 'Provider', additionalProperties: false })

export type Provider = Static<typeof ProviderSchema>

export const ProviderListSchema = Type.Object({
  data: Type.Array(ProviderSchema)
}, { additionalProperties: false })
