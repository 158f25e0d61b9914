import { execFile } from 'node:child_process'
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { promisify } from 'node:util'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { writeManyKeys } from '../helper.js'
import { countRecords, describeCounts } from '../../src/repositories/records.js'
import { loadDataFolder } from '../../src/repositories/sources/files.js'
import { PATIENCE_MS } from '../patience.js'

const run = promisify(execFile)
// Killed short of the test's own timeout: a check that hangs must not outlive the test.
const check = (...args: string[]) => run(process.execPath, ['dist/cli/check.js', ...args], { timeout: PATIENCE_MS }).then(
  ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
  (error: { code: number, stdout: string, stderr: string }) => ({ code: error.code, stdout: error.stdout, stderr: error.stderr }))

describe('npm run check', () => {
  let dir: string
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'check-'))
    await cp('fixtures', dir, { recursive: true })
  })
  afterEach(() => rm(dir, { recursive: true, force: true }))

  it('says a valid folder is valid, with its counts, and exits 0', async () => {
    const { code, stdout } = await check('--data-dir', dir)
    expect(code).toBe(0)
    expect(stdout).toBe(`${dir}: valid: ${describeCounts(countRecords(await loadDataFolder('fixtures')))}\n`)
  })

  it('checks the bundled fixtures when given no folder, found from the bundled command as from tsc\'s output', async () => {
    const { stdout } = await run(process.execPath, ['dist/cli/check.js'], { env: { PATH: process.env.PATH ?? '' }, timeout: PATIENCE_MS })
    expect(stdout).toBe(`${resolve('fixtures')}: valid: ${describeCounts(countRecords(await loadDataFolder('fixtures')))}\n`)
  })

  it("takes the folder by its option's former name, --fixtures-dir, and refuses both naming different folders", async () => {
    expect((await check('--fixtures-dir', dir)).stdout).toBe(`${dir}: valid: ${describeCounts(countRecords(await loadDataFolder('fixtures')))}\n`)
    expect(await check('--fixtures-dir', dir, '--data-dir', 'fixtures')).toEqual({ code: 2, stdout: '', stderr: '--fixtures-dir is the former name of --data-dir: give one of them; see npm run check -- --help\n' })
  })

  it('says a key of an organization organizations.json does not have is valid, with a warning naming the key and the organization, never its hash', async () => {
    const keys = JSON.parse(await readFile(join(dir, 'keys.json'), 'utf8')) as Array<{ sha256: string }>
    const orphan = { name: 'early', sha256: 'ab'.repeat(32), kind: 'management', organization_id: 'org_nope' }
    await writeFile(join(dir, 'keys.json'), JSON.stringify([...keys, orphan]))
    const { code, stdout, stderr } = await check('--data-dir', dir)
    // The server serves such a key (its member listing answers 404): check agrees, and says so.
    expect(code).toBe(0)
    expect(stdout).toMatch(/: valid: /)
    // The bundled data holds one such key on purpose (the 404 the README shows); then the one added.
    expect(stderr).toBe('warning: keys.json: key "deleted-org-management" is of organization "org_2vQmDeleted03", which organizations.json does not have; its member listing answers 404\n' +
      'warning: keys.json: key "early" is of organization "org_nope", which organizations.json does not have; its member listing answers 404\n')
    expect(stderr).not.toContain(orphan.sha256)
  })

  it('refuses with --strict, exit 1, a key whose organization organizations.json does not have, naming the key and the organization, never its hash', async () => {
    const keys = JSON.parse(await readFile(join(dir, 'keys.json'), 'utf8')) as Array<{ organization_id: string }>
    // The bundled data's one such key, kept on purpose for the 404 the README shows, is refused too.
    expect(await check('--data-dir', dir, '--strict')).toEqual({ code: 1, stdout: '',
      stderr: 'invalid: keys.json: key "deleted-org-management" is of organization "org_2vQmDeleted03", which organizations.json does not have; its member listing answers 404\n' })
    await writeFile(join(dir, 'keys.json'), JSON.stringify(keys.filter((key) => key.organization_id !== 'org_2vQmDeleted03')))
    const { code, stdout, stderr } = await check('--data-dir', dir, '--strict')
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' })
    expect(stdout).toMatch(/: valid: /)
  })

  it('names file, record and field of the first problem in one line, and exits 1', async () => {
    await writeFile(join(dir, 'providers.json'), JSON.stringify([{ name: 'A', slug: 'a', privacy_policy_url: null, headquarters: 'ZZ' }]))
    const { code, stdout, stderr } = await check('--data-dir', dir)
    expect(code).toBe(1)
    expect(stdout).toBe('')
    expect(stderr).toBe('invalid: providers.json: [0].headquarters: "ZZ" is not an ISO 3166-1 alpha-2 code\n')
  })

  it('names the known field an unknown one was probably meant to be, in any file', async () => {
    await writeFile(join(dir, 'providers.json'), JSON.stringify([{ name: 'A', slug: 'a', privacy_policy_url: null, headquarter: 'US' }]))
    expect((await check('--data-dir', dir)).stderr)
      .toBe('invalid: providers.json: [0].headquarter: is not a known field; did you mean "headquarters"?\n')
    await cp('fixtures/providers.json', join(dir, 'providers.json'))
    await writeFile(join(dir, 'organizations.json'), JSON.stringify([{ id: 'o', name: 'O', members: [{ id: 'u', email: 'u@o.example', first_name: 'Ada', last_name: null, role: 'org:admin', roles: ['billing'] }] }]))
    expect((await check('--data-dir', dir)).stderr)
      .toBe('invalid: organizations.json: [0].members[0].roles: is not a known field; did you mean "role"?\n')
  })

  it('suggests nothing for an unknown field unlike any known one', async () => {
    await writeFile(join(dir, 'providers.json'), JSON.stringify([{ name: 'A', slug: 'a', privacy_policy_url: null, website: 'https://a.example' }]))
    expect((await check('--data-dir', dir)).stderr).toBe('invalid: providers.json: [0].website: is not a known field\n')
  })

  it('refuses a file of 150 MB that is not valid JSON in one line naming its size and the limit, instead of running out of memory', async () => {
    const size = await writeManyKeys(join(dir, 'keys.json'), 1_050_000, { end: ',{"name":}]' })
    expect(await check('--data-dir', dir)).toEqual({
      code: 1,
      stdout: '',
      stderr: `invalid: keys.json: ${size} bytes, over the limit of 8388608 (8 MiB) for a data file: larger data belongs in PostgreSQL\n`
    })
  })
})
