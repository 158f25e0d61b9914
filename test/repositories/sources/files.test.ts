import { mkdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { mkdir, mkdtemp, rename, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { setTimeout as sleep } from 'node:timers/promises'
import { join } from 'node:path'
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { BUNDLED_FIXTURES_DIR } from '../../../src/config.js'
import { DATA_FILES, createFileSource, loadDataFolder } from '../../../src/repositories/sources/files.js'
import { type DirectoryData } from '../../../src/repositories/records.js'
import { RECORD_KINDS } from '../../../src/registry.js'
import { createLifecycle, type Lifecycle } from '../../../src/repositories/lifecycle.js'
import { makeData, makeEndpoint, makeMembers, makeProvider, recordsOf, sha256, watchLifecycle, writeManyKeys } from '../../helper.js'
import { PATIENCE_MS } from '../../patience.js'

let dir: string
beforeEach(async () => { dir = await mkdtemp(join(tmpdir(), 'fixtures-')) })
afterEach(() => rm(dir, { recursive: true, force: true }))

async function writeData (data: DirectoryData) {
  await Promise.all((Object.keys(DATA_FILES) as Array<keyof DirectoryData>).map((name) =>
    writeFile(join(dir, DATA_FILES[name]), JSON.stringify(data[name]))))
}

async function loadError (data: Record<string, unknown>) {
  await writeData({ ...makeData(), ...data } as DirectoryData)
  return loadDataFolder(dir).then(() => 'loaded', (error: Error) => error.message)
}

describe('the bundled fixtures', () => {
  it('are valid and realistic in size', async () => {
    const data = await loadDataFolder(BUNDLED_FIXTURES_DIR)
    expect(data.providers.length).toBeGreaterThanOrEqual(24)
    expect(data.endpoints.length).toBeGreaterThanOrEqual(24)
    expect(data.organizations).toHaveLength(2)
    expect(new Set(data.keys.map((key) => key.kind))).toEqual(new Set(['standard', 'management']))
  })
})

describe('loading fixtures', () => {
  it('returns the records exactly as written, in order', async () => {
    const data = makeData()
    await writeData(data)
    expect(await loadDataFolder(dir)).toStrictEqual(data)
  })

  const providers = [makeProvider(0), makeProvider(1), makeProvider(2), makeProvider(3)]
  const cases: Array<[string, Record<string, unknown>, string]> = [
    ['an unknown country code', { providers: providers.map((p, i) => i === 3 ? { ...p, headquarters: 'ZZ' } : p) },
      'providers.json: [3].headquarters: "ZZ" is not an ISO 3166-1 alpha-2 code'],
    ['a lowercase country code', { providers: [makeProvider(0, { headquarters: 'us' })] },
      'providers.json: [0].headquarters: "us" is not an ISO 3166-1 alpha-2 code'],
    ['a bad datacenter', { providers: [makeProvider(0, { datacenters: ['US', 'UK'] })] },
      'providers.json: [0].datacenters[1]: "UK" is not an ISO 3166-1 alpha-2 code'],
    ['a URL that is not http(s)', { providers: [makeProvider(0, { privacy_policy_url: 'ftp://x.example/p' })] },
      'providers.json: [0].privacy_policy_url: "ftp://x.example/p" is not an http(s) URL'],
    ['a missing privacy_policy_url', { providers: [{ name: 'A', slug: 'a' }] },
      'providers.json: [0].privacy_policy_url: is required'],
    ['an unknown field', { providers: [{ ...makeProvider(0), headquarter: 'US' }] },
      'providers.json: [0].headquarter: is not a known field; did you mean "headquarters"?'],
    ['a duplicate slug', { providers: [makeProvider(0), makeProvider(0)] },
      'providers.json: [1].slug: "provider-0" duplicates [0].slug'],
    ['a fractional context length', { endpoints: [makeEndpoint(0), makeEndpoint(1, { context_length: 1.5 })] },
      'zdr-endpoints.json: [1].context_length: 1.5: expected integer'],
    ['a price that is a number', { endpoints: [makeEndpoint(0, { pricing: { prompt: 0.1, completion: '0', image: '0', request: '0' } as never })] },
      'zdr-endpoints.json: [0].pricing.prompt: 0.1: expected string'],
    ['a missing uptime key', { endpoints: [(({ uptime_last_1d: _, ...rest }) => rest)(makeEndpoint(0))] },
      'zdr-endpoints.json: [0].uptime_last_1d: is required'],
    ['an unknown role', { organizations: [{ id: 'o', name: 'O', members: [{ id: 'u', email: 'u@o.example', first_name: null, last_name: null, role: 'admin' }] }] },
      'organizations.json: [0].members[0].role: "admin" is not one of "org:admin", "org:member"'],
    ['a bad e-mail', { organizations: [{ id: 'o', name: 'O', members: [{ id: 'u', email: 'nobody', first_name: null, last_name: null, role: 'org:admin' }] }] },
      'organizations.json: [0].members[0].email: "nobody" is not an e-mail address'],
    ['a duplicate member id', { organizations: [{ id: 'o', name: 'O', members: [{ id: 'u', email: 'u@o.example', first_name: null, last_name: null, role: 'org:admin' }, { id: 'u', email: 'v@o.example', first_name: null, last_name: null, role: 'org:member' }] }] },
      'organizations.json: [0].members[1].id: "u" duplicates [0].members[0].id'],
    ['a key stored in clear', { keys: [{ name: 'k', sha256: 'sk-or-v1-plaintext', kind: 'standard', organization_id: 'o' }] },
      'keys.json: [0].sha256: the value: expected string to match'],
    ['a duplicate key name', { keys: [{ name: 'ci', sha256: 'a'.repeat(64), kind: 'standard', organization_id: 'o' }, { name: 'ci', sha256: 'b'.repeat(64), kind: 'standard', organization_id: 'o' }] },
      'keys.json: [1].name: "ci" duplicates [0].name'],
    ['an unknown key kind', { keys: [{ name: 'k', sha256: 'a'.repeat(64), kind: 'admin', organization_id: 'o' }] },
      'keys.json: [0].kind: "admin" is not one of "standard", "management"'],
    ['a file that is not an array', { keys: {} },
      'keys.json: (top level): an object: expected array'],
    ['a duplicate key hash', { keys: [{ name: 'a', sha256: 'a'.repeat(64), kind: 'standard', organization_id: 'o' }, { name: 'b', sha256: 'a'.repeat(64), kind: 'standard', organization_id: 'o' }] },
      'keys.json: [1].sha256: the value duplicates [0].sha256'],
    ['a long value', { providers: [makeProvider(0, { headquarters: 'X'.repeat(5000) })] },
      `providers.json: [0].headquarters: "${'X'.repeat(79)}…`],
    ['a key name of more than 256 characters', { keys: [{ name: 'k'.repeat(1_000_000), sha256: 'a'.repeat(64), kind: 'standard', organization_id: 'o' }] },
      `keys.json: [0].name: "${'k'.repeat(79)}…: expected string length less or equal to 256`],
    ['an organization id of more than 256 characters', { keys: [{ name: 'k', sha256: 'a'.repeat(64), kind: 'standard', organization_id: 'o'.repeat(257) }] },
      `keys.json: [0].organization_id: "${'o'.repeat(79)}…: expected string length less or equal to 256`],
    ['an organization name of more than 1024 characters', { organizations: [{ id: 'o', name: 'O'.repeat(1025), members: [] }] },
      `organizations.json: [0].name: "${'O'.repeat(79)}…: expected string length less or equal to 1024`],
    ['a member id of more than 256 characters', { organizations: [{ id: 'o', name: 'O', members: [{ id: 'u'.repeat(257), email: 'u@o.example', first_name: null, last_name: null, role: 'org:admin' }] }] },
      `organizations.json: [0].members[0].id: "${'u'.repeat(79)}…: expected string length less or equal to 256`],
    ['a first name of more than 1024 characters', { organizations: [{ id: 'o', name: 'O', members: [{ id: 'u', email: 'u@o.example', first_name: 'N'.repeat(1025), last_name: null, role: 'org:admin' }] }] },
      `organizations.json: [0].members[0].first_name: "${'N'.repeat(79)}…: expected string length less or equal to 1024`],
    ['a provider URL of more than 2048 characters', { providers: [makeProvider(0, { privacy_policy_url: `https://p.example/${'p'.repeat(2048)}` })] },
      'providers.json: [0].privacy_policy_url: "https://p.example/ppp'],
    ['an endpoint tag of more than 256 characters', { endpoints: [makeEndpoint(0, { tag: 't'.repeat(257) })] },
      `zdr-endpoints.json: [0].tag: "${'t'.repeat(79)}…: expected string length less or equal to 256`]
  ]
  it.each(cases)('names the file, record and field for %s', async (_case, data, message) => {
    expect(await loadError(data)).toContain(message)
  })

  // The whole file used to be quoted: every hash of keys.json in one message.
  it('never quotes a key hash nor a whole file, and keeps each message to one short line', async () => {
    const hashes = makeData().keys.map((key) => key.sha256)
    for (const keys of [{ keys: makeData().keys }, [...makeData().keys, makeData().keys[0]], makeData().keys.map((key) => ({ ...key, sha256: key.sha256.toUpperCase() }))]) {
      const message = await loadError({ keys })
      expect(message).toMatch(/^keys\.json: /)
      expect(message).not.toMatch(/\n/)
      expect(message.length).toBeLessThan(200)
      for (const hash of hashes) expect(message.toLowerCase()).not.toContain(hash)
    }
  })

  const hash = sha256('a key')
  const key = `sk-or-v1-${'0f1e'.repeat(16)}`
  const validKey = { name: 'k', sha256: 'a'.repeat(64), kind: 'standard', organization_id: 'o' }
  it.each([
    ['a hash as a key\'s kind', { keys: [{ ...validKey, kind: hash }] },
      'keys.json: [0].kind: the value is not one of "standard", "management"'],
    ['a hash cut short as a key\'s kind', { keys: [{ ...validKey, kind: hash.slice(0, 60) }] },
      'keys.json: [0].kind: the value is not one of "standard", "management"'],
    ['a hash in capitals as a key\'s kind', { keys: [{ ...validKey, kind: hash.toUpperCase() }] },
      'keys.json: [0].kind: the value is not one of "standard", "management"'],
    ['a key as a provider\'s headquarters', { providers: [makeProvider(0, { headquarters: key })] },
      'providers.json: [0].headquarters: the value is not an ISO 3166-1 alpha-2 code'],
    ['a key inside a member\'s e-mail', { organizations: [{ id: 'o', name: 'O', members: [{ id: 'u', email: `${key} <u@o.example>`, first_name: null, last_name: null, role: 'org:admin' }] }] },
      'organizations.json: [0].members[0].email: the value is not an e-mail address'],
    ['a hash as a field\'s name', { keys: [{ ...validKey, [hash]: 1 }] },
      'keys.json: [0].(redacted): is not a known field'],
    ['a hash as two keys\' name', { keys: [{ ...validKey, name: hash }, { ...validKey, name: hash, sha256: 'b'.repeat(64) }] },
      'keys.json: [1].name: the value duplicates [0].name']
  ])('never quotes a hash or a key that lands in another field: %s', async (_case, data, message) => {
    const refusal = await loadError(data)
    expect(refusal).toContain(message)
    expect(refusal.toLowerCase()).not.toContain(hash.slice(0, 48))
    expect(refusal).not.toContain('sk-or-v1-')
  })

  // The field's name used to be written whole into the message, and compared letter by letter with every known field's.
  it('names an unknown field of a million characters in one short line', async () => {
    const message = await loadError({ providers: [{ ...makeProvider(0), ['x'.repeat(1_000_000)]: 1 }] })
    expect(message).toBe(`providers.json: [0].${'x'.repeat(80)}…: is not a known field`)
  })

  it('names the file when it is not JSON', async () => {
    await writeData(makeData())
    await writeFile(join(dir, 'zdr-endpoints.json'), '[{"model_id": ')
    await expect(loadDataFolder(dir)).rejects.toThrow(/^zdr-endpoints\.json: not valid JSON/)
  })

  it('names the file when it is missing', async () => {
    await writeData(makeData())
    await rm(join(dir, 'keys.json'))
    await expect(loadDataFolder(dir)).rejects.toThrow(/^keys\.json: cannot read .*keys\.json \(ENOENT\)/)
  })
})

describe('following changes to the folder', () => {
  let lifecycle: Lifecycle
  let watched: ReturnType<typeof watchLifecycle>
  afterEach(() => lifecycle?.close())

  /** Writes a data set into a folder of its own, as the kubelet does before it swaps `..data` to it. */
  async function writeVersion (name: string, data: DirectoryData) {
    await mkdir(join(dir, name))
    await Promise.all(RECORD_KINDS.map((kind) => writeFile(join(dir, name, DATA_FILES[kind]), JSON.stringify(data[kind]))))
  }

  async function follow (folder = dir) {
    lifecycle = createLifecycle(createFileSource(folder))
    const initial = recordsOf(await lifecycle.load())
    watched = watchLifecycle(lifecycle)
    return initial
  }

  it('installs a file written in place, keeping the unchanged parts as they were', async () => {
    await writeData(makeData())
    await follow()
    const before = lifecycle.current()
    await writeFile(join(dir, 'providers.json'), JSON.stringify([makeProvider(7)]))
    const next = await watched.until((data) => data.providers[0]?.slug === 'provider-7')
    expect(next.providers).toEqual([makeProvider(7)])
    // Not read again, so not derived again: the same parts.
    expect(lifecycle.current().indexes.organizations).toBe(before.indexes.organizations)
    expect(lifecycle.current().indexes.keys).toBe(before.indexes.keys)
  })

  it('installs a file replaced by rename, as editors and mv do', async () => {
    await writeData(makeData())
    await follow()
    const keys = makeData().keys.slice(1)
    await writeFile(join(dir, 'keys.json.tmp'), JSON.stringify(keys))
    await rename(join(dir, 'keys.json.tmp'), join(dir, 'keys.json'))
    const next = await watched.until((data) => data.keys.length === keys.length)
    expect(next.keys).toEqual(keys)
  })

  it('installs all four files when a Kubernetes volume swaps its ..data symlink', async () => {
    // The layout the kubelet makes: files are symlinks through ..data to a timestamped folder.
    await writeVersion('..2026_11_23_01', makeData())
    await symlink('..2026_11_23_01', join(dir, '..data'))
    await Promise.all(RECORD_KINDS.map((kind) => symlink(join('..data', DATA_FILES[kind]), join(dir, DATA_FILES[kind]))))
    await follow()

    const next = makeData({ providers: [makeProvider(9)], keys: makeData().keys.slice(2) })
    await writeVersion('..2026_11_23_02', next)
    await symlink('..2026_11_23_02', join(dir, '..data_tmp'))
    await rename(join(dir, '..data_tmp'), join(dir, '..data'))
    await rm(join(dir, '..2026_11_23_01'), { recursive: true })
    const data = await watched.until((data) => data.keys.length === next.keys.length && data.providers.length === 1)
    expect(data.providers).toEqual(next.providers)
    expect(data.keys).toEqual(next.keys)
  })

  it('serves a regular file put over a link into ..data from itself, the linked files from their generation, and follows a change to either', async () => {
    await writeVersion('..2026_11_28_01', makeData())
    await symlink('..2026_11_28_01', join(dir, '..data'))
    await Promise.all(RECORD_KINDS.map((kind) => symlink(join('..data', DATA_FILES[kind]), join(dir, DATA_FILES[kind]))))
    // keys.json renamed over its link, as an editor or kubectl cp leaves it: the path holds it now.
    const own = makeData().keys.slice(0, 2)
    await writeFile(join(dir, 'keys.json.tmp'), JSON.stringify(own))
    await rename(join(dir, 'keys.json.tmp'), join(dir, 'keys.json'))
    const initial = await follow()
    expect(initial.keys).toEqual(own)
    expect(initial.providers).toEqual(makeData().providers)
    // A change to the file at the path is followed...
    await writeFile(join(dir, 'keys.json'), JSON.stringify(own.slice(1)))
    await watched.until((data) => data.keys.length === 1)
    // ... and so is a new generation of the linked files, the file at the path still served from itself.
    await writeVersion('..2026_11_28_02', makeData({ providers: [makeProvider(8)] }))
    await symlink('..2026_11_28_02', join(dir, '..data_tmp'))
    await rename(join(dir, '..data_tmp'), join(dir, '..data'))
    const next = await watched.until((data) => data.providers[0]?.slug === 'provider-8')
    expect(next.keys).toEqual(own.slice(1))
  })

  it('installs files swapped together in one snapshot, however long the slowest takes to read', async () => {
    await writeVersion('..v1', makeData())
    await symlink('..v1', join(dir, '..data'))
    await Promise.all(RECORD_KINDS.map((kind) => symlink(join('..data', DATA_FILES[kind]), join(dir, DATA_FILES[kind]))))
    lifecycle = createLifecycle(createFileSource(dir))
    await lifecycle.load()
    // Every snapshot installed is checked: a key whose organization it lacks is a key answered 404.
    const orphans: string[] = []
    lifecycle.follow({
      info (_object, message) {
        if (message !== 'change installed') return
        const { organizations, keys } = recordsOf(lifecycle.current())
        const ids = new Set(organizations.map((organization) => organization.id))
        for (const key of keys) if (!ids.has(key.organization_id)) orphans.push(`${key.name} -> ${key.organization_id}`)
      },
      error () {},
      warn () {}
    })
    // Every key moves to a new organization; organizations.json grows enough to take far longer
    // to read than keys.json (tens of thousands of organizations against a few keys).
    const base = makeData()
    const filler = Array.from({ length: 30_000 }, (_, i) => ({ id: `org_filler_${i}`, name: `Filler ${i}`, members: makeMembers(`filler${i}`, 1) }))
    const next = makeData({
      organizations: [...base.organizations, { id: 'org_moved', name: 'Moved', members: makeMembers('moved', 3) }, ...filler],
      keys: base.keys.map((key) => ({ ...key, organization_id: 'org_moved' }))
    })
    await writeVersion('..v2', next)
    await symlink('..v2', join(dir, '..data_tmp'))
    await rename(join(dir, '..data_tmp'), join(dir, '..data'))
    const moved = () => recordsOf(lifecycle.current()).keys.every((key) => key.organization_id === 'org_moved')
    await expect.poll(moved, { timeout: PATIENCE_MS, interval: 10 }).toBe(true)
    expect(orphans).toEqual([])
  })

  it('installs a generation while ..data is swapped again and again during its read', async () => {
    // Enough keys that keys.json takes several swaps to read; every generation has one key of its own.
    const keys = Buffer.from(JSON.stringify(Array.from({ length: 40_000 }, (_, i) => ({ name: `key-${i}`, sha256: sha256(`key-${i}`), kind: 'standard', organization_id: 'org_alpha' }))).slice(0, -1))
    // Written at once, as by the kubelet, another process: not a chunk a turn of this one's event loop, which the read holds.
    const publish = (n: number) => {
      const data = makeData({ providers: [makeProvider(n)] })
      mkdirSync(join(dir, `..gen_${n}`))
      for (const kind of RECORD_KINDS) {
        writeFileSync(join(dir, `..gen_${n}`, DATA_FILES[kind]),
          kind === 'keys' ? Buffer.concat([keys, Buffer.from(`,${JSON.stringify({ ...makeData().keys[0], name: `generation-${n}` })}]`)]) : JSON.stringify(data[kind]))
      }
      symlinkSync(`..gen_${n}`, join(dir, '..data_tmp'))
      renameSync(join(dir, '..data_tmp'), join(dir, '..data'))
      // The generation swapped out is removed at once, as the kubelet does.
      if (n > 0) rmSync(join(dir, `..gen_${n - 1}`), { recursive: true })
    }
    publish(0)
    await Promise.all(RECORD_KINDS.map((kind) => symlink(join('..data', DATA_FILES[kind]), join(dir, DATA_FILES[kind]))))
    await follow()

    // A swap every 100 ms or so, until the test has what it waits for.
    let swapping = true
    const swaps = (async () => {
      for (let n = 1; swapping; n++) {
        publish(n)
        await sleep(100)
      }
    })()
    const served = () => lifecycle.current().indexes.providers.records[0]!.slug
    try {
      await expect.poll(served, { timeout: PATIENCE_MS, interval: 20 }).not.toBe('provider-0')
    } finally {
      swapping = false
      await swaps
    }
    // One generation, whole: its providers with its keys, installed as read from it.
    const n = Number(served().slice('provider-'.length))
    expect(lifecycle.current().indexes.keys.byKey.get(`generation-${n}`)).toBeDefined()
    expect(lifecycle.current().indexes.keys.byKey.size).toBe(40_001)
    await expect.poll(() => watched.sourcePositions.includes(`..gen_${n}`)).toBe(true)
  })

  it('refuses a bad file alone, naming file, record and field, installs the other files changed, and installs the fix', async () => {
    await writeData(makeData())
    await follow()
    await writeFile(join(dir, 'providers.json'), JSON.stringify([makeProvider(1, { headquarters: 'ZZ' })]))
    await writeFile(join(dir, 'keys.json'), JSON.stringify(makeData().keys.slice(1)))
    expect(await watched.refusal()).toMatchObject({ kind: 'providers', problem: 'providers.json: [0].headquarters: "ZZ" is not an ISO 3166-1 alpha-2 code' })
    const after = await watched.until((data) => data.keys.length === 3)
    expect(after.providers).toEqual(makeData().providers)
    await writeFile(join(dir, 'providers.json'), JSON.stringify([makeProvider(2)]))
    expect((await watched.until((data) => data.providers.length === 1)).providers).toEqual([makeProvider(2)])
  })

  // Names had no bound: a name of 120 MB was installed, the process peaking some 500 MB higher.
  it('refuses a key whose name is 100 MB in one line naming the size and the limit, without holding it', async () => {
    await writeData(makeData())
    await follow()
    const name = Buffer.alloc(100_000_000, 'k')
    await writeFile(join(dir, 'keys.json.tmp'), Buffer.concat([Buffer.from('[{"name":"'), name, Buffer.from(`","sha256":"${'a'.repeat(64)}","kind":"standard","organization_id":"org_alpha"}]`)]))
    const rssBefore = process.memoryUsage.rss()
    let rss = rssBefore
    const timer = setInterval(() => { rss = Math.max(rss, process.memoryUsage.rss()) }, 2)
    await rename(join(dir, 'keys.json.tmp'), join(dir, 'keys.json'))
    const refusal = await watched.refusal()
    clearInterval(timer)
    expect(refusal).toEqual({ kind: 'keys', problem: `keys.json: ${name.length + 137} bytes, over the limit of 8388608 (8 MiB) for a data file: larger data belongs in PostgreSQL` })
    expect(rss - rssBefore).toBeLessThan(64 * 1024 * 1024)
  })

  it('refuses a file caught half-written, and installs it once the write completes', async () => {
    await writeData(makeData())
    await follow()
    const text = JSON.stringify([makeEndpoint(5)])
    await writeFile(join(dir, 'zdr-endpoints.json'), text.slice(0, text.length / 2))
    expect((await watched.refusal()).problem).toMatch(/^zdr-endpoints\.json: not valid JSON/)
    await writeFile(join(dir, 'zdr-endpoints.json'), text)
    expect((await watched.until((data) => data.endpoints.length === 1)).endpoints).toEqual([makeEndpoint(5)])
  })

  it('applies a steady stream of changes as they come, not once it stops', async () => {
    await writeData(makeData())
    await follow()
    const writes = 20
    let versionDuringStream = 0
    for (let i = 1; i <= writes; i++) {
      await writeFile(join(dir, 'providers.json'), JSON.stringify([makeProvider(i)]))
      await new Promise((resolve) => setTimeout(resolve, 50))
      versionDuringStream = lifecycle.current().version
    }
    expect(versionDuringStream).toBeGreaterThan(2)
    // And the last write is what ends up installed.
    await watched.until((data) => data.providers[0]?.slug === `provider-${writes}`)
  })

  it('reads everything again on reload(), even with nothing changed', async () => {
    await writeData(makeData())
    const initial = await follow()
    lifecycle.reload()
    await watched.installs(RECORD_KINDS.length)
    expect(recordsOf(lifecycle.current())).toEqual(initial)
  })

  it('keeps serving while the folder is deleted, says so, and follows the folder created again', async () => {
    await writeData(makeData())
    await follow()
    await rm(dir, { recursive: true })
    expect(await watched.following(false)).toMatch(/the data folder .* is missing/)
    expect(recordsOf(lifecycle.current()).keys).toHaveLength(4)
    await mkdir(dir)
    await writeData(makeData({ keys: makeData().keys.slice(3) }))
    await watched.following(true)
    expect((await watched.until((data) => data.keys.length === 1)).keys).toEqual(makeData().keys.slice(3))
    // And later changes are seen as before.
    await writeFile(join(dir, 'providers.json'), JSON.stringify([makeProvider(8)]))
    await watched.until((data) => data.providers[0]?.slug === 'provider-8')
  })

  // Deleted and created again between two looks at the folder, it often gets the inode it had: the
  // watch set on the one deleted must not pass for a watch of the new one (seen: a later change missed).
  it('follows a folder deleted and created again at once, every time, and the changes made in it after', async () => {
    const keys = makeData().keys
    const replaceKeys = async (kept: typeof keys) => {
      await writeFile(join(dir, 'keys.json.tmp'), JSON.stringify(kept))
      await rename(join(dir, 'keys.json.tmp'), join(dir, 'keys.json'))
    }
    for (let round = 1; round <= 12; round++) {
      await writeData(makeData())
      await follow()
      await rm(dir, { recursive: true })
      await mkdir(dir)
      await writeData(makeData())
      await replaceKeys(keys.slice(1))
      await watched.until((data) => data.keys.length === keys.length - 1)
      await replaceKeys(keys.slice(2))
      expect((await watched.until((data) => data.keys.length === keys.length - 2)).keys, `round ${round}`).toEqual(keys.slice(2))
      await lifecycle.close()
    }
  })

  it('follows a folder moved away and another moved into its place', async () => {
    await writeData(makeData())
    await follow()
    await rename(dir, `${dir}-old`)
    const replacement = `${dir}-new`
    await mkdir(replacement)
    await Promise.all(RECORD_KINDS.map((kind) => writeFile(join(replacement, DATA_FILES[kind]), JSON.stringify(makeData({ providers: [makeProvider(5)] })[kind]))))
    await rename(replacement, dir)
    await watched.until((data) => data.providers[0]?.slug === 'provider-5')
    await rm(`${dir}-old`, { recursive: true })
  })
})

describe('a large file that is not valid, renamed into the folder of a server', () => {
  // 1,050,000 keys on one line make 150 MB: the process aborted on such files once. Files are for
  // what a ConfigMap holds, and one past the limit is refused before it is read.
  const MANY = 1_050_000
  let folder: string
  let lifecycle: Lifecycle
  let watched: ReturnType<typeof watchLifecycle>
  beforeAll(async () => {
    folder = await mkdtemp(join(tmpdir(), 'large-file-'))
    const data = makeData()
    await Promise.all(RECORD_KINDS.map((kind) => writeFile(join(folder, DATA_FILES[kind]), JSON.stringify(data[kind]))))
    lifecycle = createLifecycle(createFileSource(folder))
    await lifecycle.load()
    watched = watchLifecycle(lifecycle, 50_000)
  })
  afterAll(async () => {
    await lifecycle?.close()
    await rm(folder, { recursive: true, force: true })
  })

  it.each([
    ['a record cut short at its end', { end: ',{"name":}]' }],
    ['a write caught half-way', { end: ',{"name":"key-x","sha256":"0123' }],
    ['its array inside an object', { start: '{"keys":[', end: ']}' }]
  ])('refuses one with %s in one line naming its size and the limit, its memory bounded', async (_case, shape) => {
    const size = await writeManyKeys(join(folder, 'keys.json.tmp'), MANY, shape)
    const rssBefore = process.memoryUsage.rss()
    await rename(join(folder, 'keys.json.tmp'), join(folder, 'keys.json'))
    const refusal = await watched.refusal()
    expect(refusal).toEqual({ kind: 'keys', problem: `keys.json: ${size} bytes, over the limit of 8388608 (8 MiB) for a data file: larger data belongs in PostgreSQL` })
    expect(lifecycle.current().counts().keys).toBe(makeData().keys.length)
    expect(process.memoryUsage.rss() - rssBefore).toBeLessThan(64 * 1024 * 1024)
  })
})
