import { createHash } from 'node:crypto'
import type { ApiKey } from '../schemas/fixtures.js'
import type { DirectoryData } from './fixtures.js'

/**
 * Read access to the directory. The data never changes while the process runs, so every
 * body is serialized once here and the routes only pick the bytes to send.
 */
export interface SerializedList {
  json: Buffer
  /** Strong entity tag of `json`. */
  etag: string
}

export interface DirectoryRepository {
  /** `{"data": Provider[]}` as JSON. */
  providers(): SerializedList
  /** `{"data": Endpoint[]}` as JSON. */
  zdrEndpoints(): SerializedList
  /** The key whose SHA-256 (lowercase hex) is given. */
  findKey(sha256: string): ApiKey | undefined
  /** `{"data": Member[], "total_count": n}` as JSON, or undefined when the organization does not exist. */
  memberPageJson(organizationId: string, offset: number, limit: number): string | undefined
}

export function createDirectoryRepository (data: DirectoryData): DirectoryRepository {
  const providers = serializeList(data.providers)
  const zdrEndpoints = serializeList(data.endpoints)
  const keysByHash = new Map(data.keys.map((key) => [key.sha256, key]))
  // Each member is serialized once; a page is a join of at most 100 precomputed strings.
  const membersJsonByOrganization = new Map(
    data.organizations.map((organization) => [organization.id, organization.members.map((member) => JSON.stringify(member))])
  )

  return {
    providers: () => providers,
    zdrEndpoints: () => zdrEndpoints,
    findKey: (sha256) => keysByHash.get(sha256),
    memberPageJson (organizationId, offset, limit) {
      const members = membersJsonByOrganization.get(organizationId)
      if (members === undefined) return undefined
      const page = offset < members.length ? members.slice(offset, offset + limit) : []
      return `{"data":[${page.join(',')}],"total_count":${members.length}}`
    }
  }
}

function serializeList (records: unknown[]): SerializedList {
  const json = Buffer.from(JSON.stringify({ data: records }))
  return { json, etag: `"${createHash('sha256').update(json).digest('base64url')}"` }
}
