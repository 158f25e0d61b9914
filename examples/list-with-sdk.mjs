// The official OpenRouter SDK, unchanged, against this server. With the server running (`npm start`):
//
//   node examples/list-with-sdk.mjs
//
// OPENROUTER_BASE_URL and OPENROUTER_API_KEY, which the SDK reads itself, point it elsewhere; the
// defaults are the local server and the bundled development management key of Acme AI.
import { OpenRouter } from '@openrouter/sdk'

process.env.OPENROUTER_BASE_URL ??= 'http://127.0.0.1:3000/v1'
process.env.OPENROUTER_API_KEY ??= 'sk-or-v1-dev-acme-mgmt-6f1d0c7a9b2e4f8c8d3a1b5e7c9f0a2d'

// No retries: against a local server, an error is better seen at once.
const client = new OpenRouter({ retryConfig: { strategy: 'none' } })

const providers = await client.providers.list()
console.log(`${providers.data.length} providers, for example:`, providers.data[0])

const endpoints = await client.endpoints.listZdrEndpoints()
console.log(`${endpoints.data.length} endpoints under zero data retention, for example:`, endpoints.data[0]?.name)

// The SDK's own pager asks for the next page until the members run out.
let members = 0
for await (const page of await client.organization.listMembers({ limit: 100 })) {
  members += page.result.data.length
  console.log(`members page: ${page.result.data.length} (${members} of ${page.result.totalCount})`)
}
