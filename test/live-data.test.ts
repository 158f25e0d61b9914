import { mkdir, mkdtemp, rename, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { DATA_FILES } from '../src/repositories/sources/files.js'
import { type DirectoryData } from '../src/repositories/records.js'
import { RECORD_KINDS } from '../src/registry.js'
import { KEYS, makeData, sha256 } from './helper.js'
import { startServer, type RunningServer } from './process.js'
import { generation, storm } from './storm.js'
import { PATIENCE_MS } from './patience.js'

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
  await Promise.all(RECORD_KINDS.map((kind) => replaceFile(DATA_FILES[kind], data[kind])))
}

const status = async (path: string, key: string) => (await fetch(`${server!.url}${path}`, { headers: { authorization: `Bearer ${key}` } })).status

/** Waits for the log line that says `message`, however long the test's own timeout allows. */
async function logLine (message: string, after = 0) {
  const line = await vi.waitFor(() => {
    const found = server!.output().slice(after).split('\n').find((text) => text.includes(`"msg":"${message}"`))
    if (found === undefined) throw new Error(`no log line says ${message}`)
    return found
  }, { timeout: PATIENCE_MS, interval: 20 })
  return JSON.parse(line) as Record<string, unknown>
}

describe('data that changes while the server runs (files)', () => {
  it('stops accepting a revoked key without a restart, and keeps the others', async () => {
    await writeData(makeData())
    server = await startServer({ DATA_DIR: dir })
    expect(await status('/v1/providers', KEYS.alphaStandard)).toBe(200)

    await replaceFile('keys.json', makeData().keys.filter((key) => key.name !== 'alpha-standard'))
    while (await status('/v1/providers', KEYS.alphaStandard) !== 401);
    expect(await status('/v1/providers', KEYS.alphaManagement)).toBe(200)
    expect(await logLine('change installed')).toMatchObject({ change: 'keys: read whole', records: { keys: 3 } })
  })

  it.each([
    ['a kind that does not exist', { kind: 'admin' }, '[4].kind: "admin" is not one of "standard", "management"'],
    // Held as UTF-8, it would come back as another name: refused on a change as at a start.
    ['a name with a lone surrogate', { name: 'typo\ud800' }, '[4].name: "typo\\ud800" is not well-formed Unicode (a lone surrogate)']
  ])('refuses a bad change (%s) with one log line naming file, record and field, and keeps serving the data it has', async (_case, spoil, problem) => {
    await writeData(makeData())
    server = await startServer({ DATA_DIR: dir })
    await replaceFile('keys.json', [...makeData().keys, { name: 'typo', sha256: sha256('new'), kind: 'standard', organization_id: 'org_alpha', ...spoil }])
    expect(await logLine('change refused: keys keeps its last good records, the other kinds follow their changes')).toMatchObject({
      level: 50,
      kind: 'keys',
      problem: `keys.json: ${problem}`
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
    server = await startServer({ DATA_DIR: dir })
    const before = server.output().length
    server.process.kill('SIGHUP')
    expect(await logLine('change installed', before)).toMatchObject({ change: expect.stringMatching(/: read whole$/) })
    expect(await status('/v1/providers', KEYS.alphaStandard)).toBe(200)
    expect(server.process.exitCode).toBeNull()
  })

  it('answers every request of a reload storm, each from exactly one snapshot', async () => {
    // Swapped the way the kubelet updates a mounted ConfigMap: four files in one rename.
    const publish = async (n: number) => {
      const version = join(dir, `..gen_${n}`)
      await mkdir(version)
      const data = generation(n)
      await Promise.all(RECORD_KINDS.map((kind) => writeFile(join(version, DATA_FILES[kind]), JSON.stringify(data[kind]))))
      await symlink(`..gen_${n}`, join(dir, '..data_tmp'))
      await rename(join(dir, '..data_tmp'), join(dir, '..data'))
    }
    await publish(0)
    await Promise.all(RECORD_KINDS.map((kind) => symlink(join('..data', DATA_FILES[kind]), join(dir, DATA_FILES[kind]))))
    // Thousands of requests a second with one key: no rate limit here.
    server = await startServer({ DATA_DIR: dir, RATE_LIMIT_PER_MINUTE: '0' })

    // Ten changes a second for ten seconds.
    const { failures, answers, seen } = await storm(server.url, publish, { changes: 100, intervalMs: 100 })
    expect(failures.slice(0, 5)).toEqual([])
    expect(answers).toBeGreaterThan(1000)
    // Generations were served as they came, not only the first and the last.
    expect(seen.size).toBeGreaterThan(10)
  })
})
