import type { MemberList } from './member-list.js'

/** A page of an organization's members. */
export interface MemberPage {
  /** `{"data": Member[], "total_count": n}` as JSON. */
  json: Buffer
  /**
   * The version of the organization's members: the same members give the same version on every
   * replica, and any change of a member gives another. With the offset and the limit, it names the page.
   */
  version: string
}

// Derived once per list of members, and collected with it.
const memberPages = new WeakMap<MemberList, MemberPages>()

/** The pages of a list of members. */
export function memberPagesOf (members: MemberList): MemberPages {
  let pages = memberPages.get(members)
  if (pages === undefined) {
    pages = pagesOf(members)
    memberPages.set(members, pages)
  }
  return pages
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
      return { json: Buffer.concat([PAGE_START, members.json(offset, Math.min(offset + limit, members.length)), pageEnd]), version: members.version }
    }
  }
}
