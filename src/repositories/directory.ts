import type { DirectoryData, RecordKind } from './records.js'
import { deriveView, type Snapshot } from './views.js'

export interface DirectoryInfo {
  /** The source of the data: `files`, `postgres`. */
  source: string
  /** When the current snapshot was installed (ms since the epoch). */
  loadedAt: number
  /** Records of each kind in the current snapshot; `members` counts all organizations' members. */
  records: { [kind in RecordKind | 'members']: number }
  /** Changes installed and refused since start. */
  reloads: { succeeded: number, failed: number }
}

/** The directory the server serves: the current snapshot's view, swapped whole when a change is installed. */
export interface Snapshots {
  /** The view to answer a request from; a request reads it once and keeps it to its last byte. */
  current(): Snapshot
  info(): DirectoryInfo
}

export function createDirectory (source: string, data: DirectoryData) {
  let view = deriveView(data)
  let loadedAt = Date.now()
  let records = countRecords(data)
  const reloads = { succeeded: 0, failed: 0 }

  return {
    current: () => view,
    info: (): DirectoryInfo => ({ source, loadedAt, records, reloads: { ...reloads } }),
    /** Derives the view of a new snapshot off to the side, then swaps it in with one assignment. */
    install (next: DirectoryData) {
      const nextView = deriveView(next)
      view = nextView
      loadedAt = Date.now()
      records = countRecords(next)
      reloads.succeeded++
    },
    refused () {
      reloads.failed++
    }
  } satisfies Snapshots & Record<string, unknown>
}

/** Records of each kind; `members` counts all organizations' members. */
export function countRecords (data: DirectoryData): DirectoryInfo['records'] {
  return {
    providers: data.providers.length,
    endpoints: data.endpoints.length,
    organizations: data.organizations.length,
    members: data.organizations.reduce((sum, organization) => sum + organization.members.length, 0),
    keys: data.keys.length
  }
}
