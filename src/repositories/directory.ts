import { createHash } from 'node:crypto'
import type { ApiKey } from '../schemas/fixtures.js'
import type { Member } from '../schemas/member.js'
import type { DirectoryData } from './fixtures.js'

/** A list serialized once, with its entity tags. */
export interface SerializedList {
  json: Buffer
  /** Strong entity tag of `json`. */
  etag: string
  /** The same tag, weak (`W/"…"`), which If-None-Match may carry too. */
  weakEtag: string
}

/**
 * Read access to the directory. The data never changes while the process runs, so every
 * body is serialized once here and the routes only pick the bytes to send.
 */
export interface DirectoryRepository {
  /** `{"data": Provider[]}` as JSON. */
  providers(): SerializedList
  /** `{"data": Endpoint[]}` as JSON. */
  zdrEndpoints(): SerializedList
  /** The key whose SHA-256 (lowercase hex) is given. */
  findKey(sha256: string): ApiKey | undefined
  /** `{"data": Member[], "total_count": n}` as JSON, or undefined when the organization does not exist. */
  memberPageJson(organizationId: string, offset: number, limit: number): Buffer | undefined
}

export function createDirectoryRepository (data: DirectoryData): DirectoryRepository {
  const providers = serializeList(data.providers)
  const zdrEndpoints = serializeList(data.endpoints)
  const keysByHash = new Map(data.keys.map((key) => [key.sha256, key]))
  const membersByOrganization = new Map(
    data.organizations.map((organization) => [organization.id, serializeMembers(organization.members)])
  )

  return {
    providers: () => providers,
    zdrEndpoints: () => zdrEndpoints,
    findKey: (sha256) => keysByHash.get(sha256),
    memberPageJson (organizationId, offset, limit) {
      return membersByOrganization.get(organizationId)?.page(offset, limit)
    }
  }
}

const PAGE_START = Buffer.from('{"data":[')

/**
 * All members of an organization serialized once, comma-separated, in one buffer, with the byte
 * offset where each ends. A page is a slice of it between two brackets: its cost does not depend
 * on the size of the organization, and a million members are two objects for the garbage
 * collector instead of a million strings.
 */
function serializeMembers (members: Member[]) {
  const texts = members.map((member) => JSON.stringify(member))
  const ends = new Uint32Array(texts.length)
  const json = Buffer.allocUnsafe(texts.reduce((sum, text) => sum + Buffer.byteLength(text) + 1, 0))
  let at = 0
  texts.forEach((text, index) => {
    at += json.write(text, at)
    ends[index] = at
    at += json.write(',', at)
  })
  const pageEnd = Buffer.from(`],"total_count":${members.length}}`)
  const pastTheEnd = Buffer.concat([PAGE_START, pageEnd])
  return {
    page (offset: number, limit: number): Buffer {
      if (offset >= members.length) return pastTheEnd
      const last = Math.min(offset + limit, members.length) - 1
      const start = offset === 0 ? 0 : ends[offset - 1]! + 1
      return Buffer.concat([PAGE_START, json.subarray(start, ends[last]), pageEnd])
    }
  }
}

function serializeList (records: unknown[]): SerializedList {
  const json = Buffer.from(JSON.stringify({ data: records }))
  const etag = `"${createHash('sha256').update(json).digest('base64url')}"`
  return { json, etag, weakEtag: `W/${etag}` }
}
