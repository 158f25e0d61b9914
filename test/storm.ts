import { Agent, get } from 'node:http'
import { vi } from 'vitest'
import type { DirectoryData } from '../src/repositories/records.js'
import { KEYS, makeData, makeMembers, makeProvider, sha256 } from './helper.js'
import { PATIENCE_MS } from './patience.js'

/**
 * Generation N of a reload storm: N + 1 providers and N + 1 members, all named after N, and the
 * management key moved to another organization. A body mixing two generations, or new keys with
 * old organizations, would show.
 */
export function generation (n: number): DirectoryData {
  const organization = `org_${n % 2}`
  return makeData({
    providers: Array.from({ length: n + 1 }, (_, i) => makeProvider(i, { name: `Generation ${n}` })),
    organizations: [{ id: organization, name: `Generation ${n}`, members: makeMembers(`g${n}`, n + 1) }],
    keys: [{ name: 'storm', sha256: sha256(KEYS.alphaManagement), kind: 'management', organization_id: organization }]
  })
}

export interface StormResult {
  /** What went wrong: a failed request, or an answer from more than one generation. */
  failures: string[]
  answers: number
  /** The generations the provider lists came from. */
  seen: Set<number>
}

/**
 * Loads the server at `url` with 50 connections (providers and member pages, the management key)
 * while `publish(n)` installs generations 1 to `changes`, one every `intervalMs`; stops once the last
 * one is served. Checks every answer against the generations.
 */
export async function storm (url: string, publish: (n: number) => Promise<void>, { changes, intervalMs }: { changes: number, intervalMs: number }): Promise<StormResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: 50 })
  const failures: string[] = []
  const seen = new Set<number>()
  let answers = 0
  let storming = true
  const check = (path: string, body: string) => {
    if (path === '/v1/providers') {
      const names = new Set(JSON.parse(body).data.map((provider: { name: string }) => provider.name))
      const n = JSON.parse(body).data.length - 1
      if (names.size !== 1 || !names.has(`Generation ${n}`)) return `providers from more than one snapshot: ${[...names].join(', ')}`
      seen.add(n)
    } else {
      const page = JSON.parse(body)
      const n = page.total_count - 1
      if (!page.data.every((member: { id: string }) => member.id.startsWith(`user_g${n}_`))) return `a member page from more than one snapshot (total ${page.total_count})`
    }
  }
  const request = (path: string) => new Promise<void>((resolve) => {
    get(`${url}${path}`, { agent, headers: { authorization: `Bearer ${KEYS.alphaManagement}` } }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk) => { body += chunk })
      res.on('end', () => {
        answers++
        const problem = res.statusCode === 200 ? check(path, body) : `${path}: ${res.statusCode} ${body}`
        if (problem) failures.push(problem)
        resolve()
      })
    }).on('error', (error) => { failures.push(`${path}: ${error.message}`); resolve() })
  })
  const load = Array.from({ length: 50 }, async (_, connection) => {
    while (storming) await request(connection % 2 ? '/v1/providers' : '/v1/organization/members?limit=100')
  })

  for (let n = 1; n <= changes; n++) {
    await publish(n)
    await new Promise((resolve) => setTimeout(resolve, intervalMs))
  }
  // The last generation arrives, then the load stops.
  await vi.waitFor(() => { if (!seen.has(changes) && failures.length === 0) throw new Error(`generation ${changes} not served yet`) }, { timeout: PATIENCE_MS, interval: 20 })
  storming = false
  await Promise.all(load)
  agent.destroy()
  return { failures, answers, seen }
}
