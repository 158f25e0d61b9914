import { Agent, get } from 'node:http'
import { mkdir, mkdtemp, rename, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { FIXTURE_FILES } from '../src/repositories/sources/files.js'
import { RECORD_KINDS, type DirectoryData } from '../src/repositories/records.js'
import { KEYS, makeData, makeMembers, makeProvider, sha256 } from './helper.js'
import { startServer, type RunningServer } from './process.js'

let dir: string
let server: RunningServer | undefined
beforeEach(async () => { dir = await mkdtemp(join(tmpdir(), 'live-data-')) })
afterEach(async () => {
  server?.process.kill('SIGKILL')
  server = undefined
  await rm(dir, { recursive: true, force: true })
})

/** Writes one file whole, by rename, as an editor or `mv` does: a reader never sees half of it. */
async function replaceFile (name: string, value: unknown) {
  await writeFile(join(dir, `${name}.tmp`), JSON.stringify(value))
  await rename(join(dir, `${name}.tmp`), join(dir, name))
}

async function writeData (data: DirectoryData) {
  await Promise.all(RECORD_KINDS.map((kind) => replaceFile(FIXTURE_FILES[kind], data[kind])))
}

const status = async (path: string, key: string) => (await fetch(`${server!.url}${path}`, { headers: { authorization: `Bearer ${key}` } })).status

/** Waits for the log line that says `message`, however long the test's own timeout allows. */
async function logLine (message: string, after = 0) {
  for (;;) {
    const line = server!.output().slice(after).split('\n').find((text) => text.includes(`"msg":"${message}"`))
    if (line) return JSON.parse(line) as Record<string, unknown>
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

describe('data that changes while the server runs (files)', () => {
  it('stops accepting a revoked key without a restart, and keeps the others', async () => {
    await writeData(makeData())
    server = await startServer({ FIXTURES_DIR: dir })
    expect(await status('/v1/providers', KEYS.alphaStandard)).toBe(200)

    await replaceFile('keys.json', makeData().keys.filter((key) => key.name !== 'alpha-standard'))
    while (await status('/v1/providers', KEYS.alphaStandard) !== 401);
    expect(await status('/v1/providers', KEYS.alphaManagement)).toBe(200)
    expect(await logLine('directory reloaded')).toMatchObject({ change: 'files changed', source: 'files', records: { keys: 3 } })
  })

  it('refuses a bad change with one log line naming file, record and field, and keeps serving the data it has', async () => {
    await writeData(makeData())
    server = await startServer({ FIXTURES_DIR: dir })
    await replaceFile('keys.json', [...makeData().keys, { name: 'typo', sha256: sha256('new'), kind: 'admin', organization_id: 'org_alpha' }])
    expect(await logLine('change refused; the current data keeps serving')).toMatchObject({
      level: 50,
      problem: 'keys.json: [4].kind: "admin" is not one of "standard", "management"'
    })
    expect(await status('/v1/organization/members', KEYS.alphaManagement)).toBe(200)
    // No secret in the log: neither a key nor a hash.
    for (const record of makeData().keys) expect(server.output()).not.toContain(record.sha256)

    // The next good change is installed.
    await replaceFile('keys.json', makeData().keys.slice(1))
    while (await status('/v1/organization/members', KEYS.alphaManagement) !== 401);
  })

  it('reloads on SIGHUP and keeps running', async () => {
    await writeData(makeData())
    server = await startServer({ FIXTURES_DIR: dir })
    const before = server.output().length
    server.process.kill('SIGHUP')
    expect(await logLine('directory reloaded', before)).toMatchObject({ change: 'reload requested' })
    expect(await status('/v1/providers', KEYS.alphaStandard)).toBe(200)
    expect(server.process.exitCode).toBeNull()
  })

  it('answers every request of a reload storm, each from exactly one snapshot', async () => {
    // Each generation N holds N + 1 providers and N + 1 members, all named after N, and moves the
    // management key to another organization: a body mixing two generations, or new keys with
    // old organizations, would show.
    const generation = (n: number): DirectoryData => {
      const organization = `org_${n % 2}`
      return makeData({
        providers: Array.from({ length: n + 1 }, (_, i) => makeProvider(i, { name: `Generation ${n}` })),
        organizations: [{ id: organization, name: `Generation ${n}`, members: makeMembers(`g${n}`, n + 1) }],
        keys: [{ name: 'storm', sha256: sha256(KEYS.alphaManagement), kind: 'management', organization_id: organization }]
      })
    }
    // Swapped the way the kubelet updates a mounted ConfigMap: four files in one rename.
    const publish = async (n: number) => {
      const version = join(dir, `..gen_${n}`)
      await mkdir(version)
      const data = generation(n)
      await Promise.all(RECORD_KINDS.map((kind) => writeFile(join(version, FIXTURE_FILES[kind]), JSON.stringify(data[kind]))))
      await symlink(`..gen_${n}`, join(dir, '..data_tmp'))
      await rename(join(dir, '..data_tmp'), join(dir, '..data'))
    }
    await publish(0)
    await Promise.all(RECORD_KINDS.map((kind) => symlink(join('..data', FIXTURE_FILES[kind]), join(dir, FIXTURE_FILES[kind]))))
    // Thousands of requests a second with one key: no rate limit here.
    server = await startServer({ FIXTURES_DIR: dir, RATE_LIMIT_PER_MINUTE: '0' })

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
      get(`${server!.url}${path}`, { agent, headers: { authorization: `Bearer ${KEYS.alphaManagement}` } }, (res) => {
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

    // Ten changes a second for ten seconds.
    for (let n = 1; n <= 100; n++) {
      await publish(n)
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    // The last generation arrives, then the load stops.
    while (!seen.has(100) && failures.length === 0) await new Promise((resolve) => setTimeout(resolve, 20))
    storming = false
    await Promise.all(load)
    agent.destroy()

    expect(failures.slice(0, 5)).toEqual([])
    expect(answers).toBeGreaterThan(1000)
    // Generations were served as they came, not only the first and the last.
    expect(seen.size).toBeGreaterThan(10)
  }, 60_000)
})
