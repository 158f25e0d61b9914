import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { DATA_FILES, loadDataFolder } from '../../../src/repositories/sources/files.js'
import { readRecordBatches } from '../../../src/repositories/sources/file-stream.js'
import { compactMembers, type DirectoryData } from '../../../src/repositories/records.js'
import { RECORD_KINDS } from '../../../src/registry.js'
import type { Member } from '../../../src/schemas/member.js'
import { MAX_MEMBERS } from '../../../src/repositories/member-list.js'
import { makeData, makeEndpoint, makeMembers, makeProvider } from '../../helper.js'

let dir: string
beforeEach(async () => { dir = await mkdtemp(join(tmpdir(), 'file-stream-')) })
afterEach(() => rm(dir, { recursive: true, force: true }))

async function writeData (data: Record<string, unknown>, indent?: number) {
  for (const kind of RECORD_KINDS) await writeFile(join(dir, DATA_FILES[kind]), JSON.stringify(data[kind], null, indent))
}

/** What npm run db -- import reads of the folder, kind after kind: every record, or the first refusal. */
async function streamed () {
  const data: Record<string, unknown[]> = {}
  try {
    for (const kind of RECORD_KINDS) {
      data[kind] = []
      for await (const records of readRecordBatches(dir, kind)) data[kind].push(...records)
    }
    return { data: JSON.parse(JSON.stringify(data)) as unknown }
  } catch (error) {
    return { message: (error as Error).message }
  }
}

/** What the server reads of the same folder. */
async function served () {
  return await loadDataFolder(dir).then((data) => ({ data: JSON.parse(JSON.stringify(data)) as unknown }), (error: Error) => ({ message: error.message }))
}

const key = (name: string, sha: string, extra: Record<string, unknown> = {}) => ({ name, sha256: sha.repeat(64), kind: 'standard', organization_id: 'o', ...extra })
const member = (id: string, extra: Record<string, unknown> = {}) => ({ id, email: `${id}@o.example`, first_name: null, last_name: null, role: 'org:member', ...extra })

describe('the files as npm run db -- import reads them, against the server', () => {
  it('hands over every record the server reads, in order', async () => {
    await writeData(makeData(), 2)
    const result = await streamed()
    expect(result).toStrictEqual(await served())
    expect(result).toHaveProperty('data.organizations.0.members.249.id', 'user_alpha_249')
  })

  // A value repeated between records is left to the database, and told by import: test/cli/db.test.ts.
  it.each<[string, Record<string, unknown>]>([
    ['a bad record', { providers: [makeProvider(0), makeProvider(1, { headquarters: 'ZZ' })] }],
    ['an unknown field, with a did-you-mean', { endpoints: [{ ...makeEndpoint(0), contextlength: 1 }] }],
    ['a hash in capitals', { keys: [key('a', 'A')] }],
    ['an expiry that is no time', { keys: [key('a', 'a', { expires_at: '2030-02-30T00:00:00Z' })] }],
    ['a repeated member id', { organizations: [{ id: 'o', name: 'O', members: [member('u'), member('v'), member('u')] }] }],
    ['a bad member', { organizations: [{ id: 'o', name: 'O', members: makeMembers('o', 3).slice() }, { id: 'p', name: 'P', members: [member('u', { role: 'admin' })] }] }],
    ['an object in place of the array', { keys: { keys: [] } }],
    ['a string in place of the array', { keys: 'keys' }],
    ['two bad files: the first in the registry\'s order is told', { keys: [key('a', 'A')], providers: [{ name: 'x' }] }]
  ])('refuses %s with the server\'s message', async (_case, spoilt) => {
    await writeData({ ...makeData(), ...spoilt })
    const result = await streamed()
    expect(result).toHaveProperty('message')
    expect(result).toStrictEqual(await served())
  })

  it.each<[string, (text: string) => string | Buffer]>([
    ['a syntax error after a bad record: the syntax error is told', (text) => text.replace('"standard"', '"revoked"').slice(0, -2)],
    ['a file cut short', (text) => text.slice(0, text.length / 2)],
    ['a byte that is not UTF-8', (text) => { const bytes = Buffer.from(text); bytes[bytes.length - 10] = 0xff; return bytes }],
    ['a byte order mark', (text) => Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(text)])],
    ['an empty file', () => ''],
    ['an empty array', () => '[]'],
    ['text after the array', (text) => `${text} []`]
  ])('reads keys.json with %s as the server does', async (_case, spoil) => {
    await writeData(makeData(), 2)
    await writeFile(join(dir, 'keys.json'), spoil(await readFile(join(dir, 'keys.json'), 'utf8')))
    expect(await streamed()).toStrictEqual(await served())
  })

  it('refuses an organization of more members than one may have as the server refuses one, past the size of its files', async () => {
    const members = Array.from({ length: MAX_MEMBERS + 1 }, (_, i) => member(`u${i}`)) as Member[]
    await writeData({ ...makeData(), organizations: [{ id: 'o', name: 'O', members }] })
    const refusal = (() => {
      try {
        compactMembers(members, 'organizations.json', '[0].members')
      } catch (error) {
        return (error as Error).message
      }
    })()
    expect(refusal).toBe(`organizations.json: [0].members: more than ${MAX_MEMBERS} members, the most an organization may have`)
    expect(await streamed()).toStrictEqual({ message: refusal })
  })

  it('names a missing file and a folder in place of one as the server does', async () => {
    await writeData(makeData())
    await rm(join(dir, 'organizations.json'))
    expect(await streamed()).toStrictEqual(await served())
    await mkdir(join(dir, 'organizations.json'))
    expect(await streamed()).toStrictEqual(await served())
  })

  it('hands over nothing after the first problem', async () => {
    const keys = Array.from({ length: 3000 }, (_, i) => ({ ...key(`k${i}`, '0'), sha256: i.toString(16).padStart(64, '0') }))
    keys[2500] = { ...keys[2500]!, kind: 'revoked' }
    await writeData(makeData({ keys } as Partial<DirectoryData>))
    const handed: string[] = []
    const read = async () => { for await (const records of readRecordBatches(dir, 'keys')) handed.push(...records.map(({ name }) => name)) }
    await expect(read()).rejects.toThrow('keys.json: [2500].kind: "revoked" is not one of "standard", "management"')
    expect(handed.length).toBeLessThan(2500)
    expect(handed).toEqual(keys.slice(0, handed.length).map(({ name }) => name))
  })
})
