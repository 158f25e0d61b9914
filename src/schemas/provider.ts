import { Type, type Static } from '@sinclair/typebox'
import { COUNTRY_CODE_FORMAT } from './formats.js'
import { IDENTIFIER_MAX, NAME_MAX, Nullable, URL_MAX } from './common.js'

const CountryCodeSchema = Type.String({
  format: COUNTRY_CODE_FORMAT,
  description: 'ISO 3166-1 alpha-2 country code'
})

const UrlSchema = Type.String({ maxLength: URL_MAX, format: 'uri' })

const providerExample = {
  name: 'OpenAI',
  slug: 'openai',
  privacy_policy_url: 'https://openai.com/privacy',
  terms_of_service_url: 'https://openai.com/terms',
  status_page_url: 'https://status.openai.com',
  headquarters: 'US',
  datacenters: ['US']
}

export const ProviderSchema = Type.Object({
  name: Type.String({ minLength: 1, maxLength: NAME_MAX, description: 'Display name of the provider' }),
  slug: Type.String({ maxLength: IDENTIFIER_MAX, pattern: '^[a-z0-9][a-z0-9._-]*$', description: 'URL-friendly identifier of the provider' }),
  privacy_policy_url: Nullable(UrlSchema, { description: "URL of the provider's privacy policy; the key is always present, the value may be null" }),
  status_page_url: Type.Optional(Nullable(UrlSchema, { description: "URL of the provider's status page" })),
  terms_of_service_url: Type.Optional(Nullable(UrlSchema, { description: "URL of the provider's terms of service" })),
  headquarters: Type.Optional(Nullable(CountryCodeSchema, { description: "ISO 3166-1 alpha-2 country code of the provider's headquarters" })),
  datacenters: Type.Optional(Nullable(Type.Array(CountryCodeSchema), { description: "ISO 3166-1 alpha-2 country codes of the provider's datacenter locations" }))
}, {
  $id: 'Provider',
  additionalProperties: false,
  description: 'An upstream provider, with its public contact and policy links and its country codes',
  examples: [providerExample, { name: 'Sparse Labs', slug: 'sparse-labs', privacy_policy_url: null, headquarters: null, datacenters: null }]
})

export type Provider = Static<typeof ProviderSchema>
