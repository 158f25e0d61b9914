import { execFile } from 'node:child_process'
import { cp, mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { sha256 } from '../helper.js'
import { startServer } from '../process.js'

const run = promisify(execFile)
const mintKey = (...args: string[]) => run(process.execPath, ['dist/cli/mint-key.js', ...args])

describe('npm run key', () => {
  let dir: string
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'keys-'))
    await cp('fixtures', dir, { recursive: true })
  })
  afterEach(() => rm(dir, { recursive: true, force: true }))

  it('prints a strong key once and records only its hash; the server then accepts it', async () => {
    const { stdout } = await mintKey('--kind', 'management', '--org', 'org_2vQmGlobex002', '--name', 'ci', '--data-dir', dir)
    const key = stdout.trim()
    expect(key).toMatch(/^sk-or-v1-[0-9a-f]{64}$/)
    const file = await readFile(join(dir, 'keys.json'), 'utf8')
    expect(file).not.toContain(key)
    expect(JSON.parse(file).at(-1)).toEqual({ name: 'ci', sha256: sha256(key), kind: 'management', organization_id: 'org_2vQmGlobex002' })

    const server = await startServer({ DATA_DIR: dir })
    try {
      const res = await fetch(`${server.url}/v1/organization/members`, { headers: { authorization: `Bearer ${key}` } })
      expect(res.status).toBe(200)
      expect((await res.json()).total_count).toBe(8)
    } finally {
      server.process.kill('SIGTERM')
      await server.exited
    }
    expect(server.output()).not.toContain(key)
  })

  it('mints a different key every time', async () => {
    const a = await mintKey('--kind', 'standard', '--org', 'org_2vQmAcme0001', '--name', 'a', '--data-dir', dir)
    const b = await mintKey('--kind', 'standard', '--org', 'org_2vQmAcme0001', '--name', 'b', '--data-dir', dir)
    expect(a.stdout).not.toBe(b.stdout)
  })

  it.each([
    // A command line it does not understand exits 2, bad data 1.
    [['--kind', 'root', '--org', 'o', '--name', 'x'], 2, '--kind "root" is not standard or management; see npm run key -- --help'],
    [['--org', 'o', '--name', 'x'], 2, 'minting needs --kind; usage:'],
    [['--kind', 'standard', '--org', 'org_2vQmAcme0001', '--name', 'acme-management'], 1, 'exists already']
  ])('refuses %o and leaves keys.json as it was', async (args, code, message) => {
    const before = await readFile(join(dir, 'keys.json'), 'utf8')
    await expect(mintKey(...args, '--data-dir', dir)).rejects.toMatchObject({ code, stderr: expect.stringContaining(message) })
    expect(await readFile(join(dir, 'keys.json'), 'utf8')).toBe(before)
  })
})

describe('npm run key -- revoke, and keys in a folder', () => {
  let dir: string
  beforeEach(async () => { dir = await mkdtemp(join(tmpdir(), 'keys-')) })
  afterEach(() => rm(dir, { recursive: true, force: true }))
  const env = { PATH: process.env.PATH ?? '' }

  it('removes the record of the key named and keeps the others', async () => {
    await cp('fixtures', dir, { recursive: true })
    const before = JSON.parse(await readFile(join(dir, 'keys.json'), 'utf8')) as Array<{ name: string }>
    const { stderr } = await run(process.execPath, ['dist/cli/mint-key.js', 'revoke', '--name', 'acme-management', '--data-dir', dir], { env })
    expect(stderr).toContain(`revoked key "acme-management" in ${join(dir, 'keys.json')}`)
    expect(JSON.parse(await readFile(join(dir, 'keys.json'), 'utf8'))).toEqual(before.filter((key) => key.name !== 'acme-management'))
  })

  it('refuses to revoke a name it does not know, and leaves keys.json as it was', async () => {
    await cp('fixtures', dir, { recursive: true })
    const before = await readFile(join(dir, 'keys.json'), 'utf8')
    await expect(run(process.execPath, ['dist/cli/mint-key.js', 'revoke', '--name', 'nobody', '--data-dir', dir], { env }))
      .rejects.toMatchObject({ code: 1, stderr: `no key named "nobody" in ${join(dir, 'keys.json')}\n` })
    expect(await readFile(join(dir, 'keys.json'), 'utf8')).toBe(before)
  })

  it('creates keys.json in a folder that has none yet', async () => {
    await cp('fixtures/organizations.json', join(dir, 'organizations.json'))
    const { stdout } = await run(process.execPath, ['dist/cli/mint-key.js', '--kind', 'standard', '--org', 'org_2vQmAcme0001', '--name', 'first', '--data-dir', dir], { env })
    expect(JSON.parse(await readFile(join(dir, 'keys.json'), 'utf8'))).toEqual([{ name: 'first', sha256: sha256(stdout.trim()), kind: 'standard', organization_id: 'org_2vQmAcme0001' }])
  })

  it('refuses to write into the bundled fixtures when no folder or database is given', async () => {
    const before = await readFile('fixtures/keys.json', 'utf8')
    await expect(run(process.execPath, ['dist/cli/mint-key.js', '--kind', 'standard', '--org', 'org_x', '--name', 'stray'], { env }))
      .rejects.toMatchObject({ code: 1, stderr: expect.stringMatching(/^no data to write into: pass --data-dir <dir>[^\n]*\n$/) })
    expect(await readFile('fixtures/keys.json', 'utf8')).toBe(before)
  })
})
