import type { ApiKey } from '../schemas/fixtures.js'
import type { DirectoryData } from './fixtures.js'

/**
 * Read access to the directory. The data never changes while the process runs, so every
 * body is serialized once here and the routes only pick the bytes to send.
 */
export interface DirectoryRepository {
  /** `{"data": Provider[]}` as JSON. */
  providersJson(): Buffer
  /** `{"data": Endpoint[]}` as JSON. */
  zdrEndpointsJson(): Buffer
  /** The key whose SHA-256 (lowercase hex) is given. */
  findKey(sha256: string): ApiKey | undefined
  /** `{"data": Member[], "total_count": n}` as JSON, or undefined when the organization does not exist. */
  memberPageJson(organizationId: string, offset: number, limit: number): string | undefined
}

export function createDirectoryRepository (data: DirectoryData): DirectoryRepository {
  const providersJson = Buffer.from(JSON.stringify({ data: data.providers }))
  const zdrEndpointsJson = Buffer.from(JSON.stringify({ data: data.endpoints }))
  const keysByHash = new Map(data.keys.map((key) => [key.sha256, key]))
  // Each member is serialized once; a page is a join of at most 100 precomputed strings.
  const membersJsonByOrganization = new Map(
    data.organizations.map((organization) => [organization.id, organization.members.map((member) => JSON.stringify(member))])
  )

  return {
    providersJson: () => providersJson,
    zdrEndpointsJson: () => zdrEndpointsJson,
    findKey: (sha256) => keysByHash.get(sha256),
    memberPageJson (organizationId, offset, limit) {
      const members = membersJsonByOrganization.get(organizationId)
      if (members === undefined) return undefined
      const page = offset < members.length ? members.slice(offset, offset + limit) : []
      return `{"data":[${page.join(',')}],"total_count":${members.length}}`
    }
  }
}
