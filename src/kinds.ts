import type { TSchema } from '@sinclair/typebox'
import { ProviderSchema } from './schemas/provider.js'
import { EndpointRecordSchema, EndpointSchema, servedEndpoint } from './schemas/endpoint.js'
import { OrganizationSchema, ApiKeySchema } from './schemas/keys-and-organizations.js'

/** A public operation of the API, as GET / and the OpenAPI document name it. */
export interface Operation {
  /** Under /v1. */
  path: string
  operationId: string
  /** The OpenAPI tag it is listed under, and what the tag says. */
  tag: { name: string, description: string }
  summary: string
  description: string
  /**
   * The method of the official @openrouter/sdk client that calls it (`providers.list`), which
   * test/sdk.test.ts calls for every operation and which must parse the answer; null for an operation
   * the SDK has no method for, of which the docs claim no compatibility.
   */
  sdk: string | null
}

/** The operation that serves a list kind whole, and what the OpenAPI document says of the list. */
export interface ListOperation extends Operation {
  /** The list as served: its order, and where it comes from. */
  listDescription: string
}

/** What every kind's entry says. */
interface KindEntry {
  /** One record as a data file or a table holds it. */
  schema: TSchema
  file: string
  table: string
  /** The field that names a record in the change log and in messages. */
  key: string | undefined
  /**
   * The fields no two records share. A list kind's table holds each as a generated column named like it
   * (postgres-schema.ts, LIST_COLUMNS): one named `id` is the row's identity, its primary key, and none
   * may be named `position`, `document` or `document_bytes`, columns the table has of its own
   * (test/kinds.test.ts refuses them).
   */
  unique: readonly string[]
}

/** A kind served as a whole list by an operation of its own. */
interface ListKindEntry extends KindEntry {
  /** How the snapshot indexes it (snapshot.ts): a list, served whole. */
  index: 'list'
  operation: ListOperation
  /** A record as served, where that is not the record as loaded (a field the data may leave out): its schema, and how it is made. */
  served?: { schema: TSchema, record: (record: never) => unknown }
}

/** The keys, and the organizations with their member pages: held by key, served by routes of their own. */
interface KeyedKindEntry extends KindEntry {
  /** How the snapshot indexes it (snapshot.ts): by name (keys), or by id with member pages (organizations). */
  index: 'keys' | 'organizations'
  operation?: Operation
}

/**
 * The kinds of record the directory holds, and everything that differs between them. The sources, the
 * snapshot, the counts, `npm run check`, `npm run db`, the list routes, GET / and the OpenAPI document
 * all walk this registry (through registry.ts, which derives what they walk from it): a public list
 * operation is one entry here, its schema, its table's migration and its data (CONTRIBUTING.md, "A new
 * kind of record"). Nothing else is in this module, so that a test can hand in a registry of its own.
 */
export const KINDS = {
  providers: {
    schema: ProviderSchema,
    file: 'providers.json',
    table: 'providers',
    key: 'slug',
    unique: ['slug'],
    index: 'list',
    operation: {
      path: '/providers',
      operationId: 'listProviders',
      tag: { name: 'Providers', description: 'The upstream providers known to the service' },
      summary: 'List all providers',
      sdk: 'providers.list',
      description: 'Lists the upstream providers known to the service with their public contact and policy links and their country codes.',
      listDescription: 'The providers known to the service, in the order of the data file'
    }
  },
  endpoints: {
    schema: EndpointRecordSchema,
    served: { schema: EndpointSchema, record: servedEndpoint },
    file: 'zdr-endpoints.json',
    table: 'endpoints',
    key: undefined,
    unique: [],
    index: 'list',
    operation: {
      path: '/endpoints/zdr',
      operationId: 'listEndpointsZdr',
      tag: { name: 'Endpoints', description: 'Model endpoints and their availability under ZDR' },
      summary: 'Preview the impact of ZDR on the available endpoints',
      sdk: 'endpoints.listZdrEndpoints',
      description: 'Returns the model endpoints that are available under zero data retention (ZDR), with limits, pricing, latency, throughput and uptime figures.',
      listDescription: 'The endpoints available under ZDR, in the order of the data file, each record\'s keys in the order of its data'
    }
  },
  organizations: {
    schema: OrganizationSchema,
    file: 'organizations.json',
    table: 'organizations',
    key: 'id',
    unique: ['id'],
    index: 'organizations',
    operation: {
      path: '/organization/members',
      operationId: 'listOrganizationMembers',
      tag: { name: 'Organization', description: 'The organization tied to a management key' },
      summary: 'List organization members',
      sdk: 'organization.listMembers',
      description: 'Lists all members of the organization associated with the authenticated management key, one page at a time, ' +
        'in a stable order: pages concatenate to the whole list. A management key is required. ' +
        'An offset past the end answers an empty page with the true total_count. ' +
        'Each page carries a strong ETag, one per content coding, that changes when any member of the organization changes; ' +
        'If-None-Match with it answers 304.'
    }
  },
  keys: { schema: ApiKeySchema, file: 'keys.json', table: 'keys', key: 'name', unique: ['name', 'sha256'], index: 'keys' }
} as const satisfies Record<string, ListKindEntry | KeyedKindEntry>
