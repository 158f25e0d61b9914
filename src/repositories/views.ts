import type { ApiKey } from '../schemas/fixtures.js'
import { serializeList, type SerializedList } from '../representation.js'
import type { MemberList } from './member-list.js'
import type { DirectoryData } from './records.js'

export type { SerializedList }

/**
 * What the hot path reads, derived from one snapshot of records when it is installed: the bodies
 * serialized, their tags, the key map and the member offsets. A request does no serialization and
 * no query, and one view answers a request from its authentication to its last byte.
 */
export interface Snapshot {
  /** `{"data": Provider[]}` as JSON. */
  providers(): SerializedList
  /** `{"data": Endpoint[]}` as JSON. */
  zdrEndpoints(): SerializedList
  /** The key whose SHA-256 (lowercase hex) is given. */
  findKey(sha256: string): ApiKey | undefined
  /** A page of the organization's members, or undefined when the organization does not exist. */
  memberPage(organizationId: string, offset: number, limit: number): MemberPage | undefined
}

export interface MemberPage {
  /** `{"data": Member[], "total_count": n}` as JSON. */
  json: Buffer
  /**
   * The version of the organization's members: the same members give the same version on every
   * replica, and any change of a member gives another. With the offset and the limit, it names the page.
   */
  version: string
}

// Derived parts, remembered by the identity of the records they come from. A source that changes
// one part of the data hands over the other parts as the very same arrays and objects, so a new
// key derives the key map again, not a million members; a part nobody holds any more is collected.
const lists = new WeakMap<readonly unknown[], SerializedList>()
const keyMaps = new WeakMap<readonly ApiKey[], Map<string, ApiKey>>()
const memberPages = new WeakMap<MemberList, MemberPages>()

function remember<K extends object, V> (cache: WeakMap<K, V>, key: K, derive: (key: K) => V): V {
  let value = cache.get(key)
  if (value === undefined) {
    value = derive(key)
    cache.set(key, value)
  }
  return value
}

export function deriveView (data: DirectoryData): Snapshot {
  const providers = remember(lists, data.providers, serializeList)
  const zdrEndpoints = remember(lists, data.endpoints, serializeList)
  const keysByHash = remember(keyMaps, data.keys, (keys) => new Map(keys.map((key) => [key.sha256, key])))
  const membersByOrganization = new Map(
    data.organizations.map((organization) => [organization.id, remember(memberPages, organization.members, pagesOf)])
  )

  return {
    providers: () => providers,
    zdrEndpoints: () => zdrEndpoints,
    findKey: (sha256) => keysByHash.get(sha256),
    memberPage (organizationId, offset, limit) {
      return membersByOrganization.get(organizationId)?.page(offset, limit)
    }
  }
}

interface MemberPages {
  page(offset: number, limit: number): MemberPage
}

const PAGE_START = Buffer.from('{"data":[')

/**
 * Pages of a list of members, which holds them serialized already: a page is its slice between two
 * brackets, and costs the same whatever the size of the organization.
 */
function pagesOf (members: MemberList): MemberPages {
  const pageEnd = Buffer.from(`],"total_count":${members.length}}`)
  const pastTheEnd = Buffer.concat([PAGE_START, pageEnd])
  return {
    page (offset: number, limit: number): MemberPage {
      if (offset >= members.length) return { json: pastTheEnd, version: members.version }
      return { json: Buffer.concat([PAGE_START, ...members.json(offset, Math.min(offset + limit, members.length)), pageEnd]), version: members.version }
    }
  }
}
