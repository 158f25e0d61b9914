import { execFile } from 'node:child_process'
import { once } from 'node:events'
import { cp, mkdtemp, readFile, rename, rm, unlink, writeFile } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import pg from 'pg'
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest'
import { BUNDLED_FIXTURES_DIR } from '../src/config.js'
import { countRecords, describeCounts } from '../src/repositories/records.js'
import { loadDataFolder } from '../src/repositories/sources/files.js'
import { SCHEMA_VERSION } from '../src/repositories/sources/postgres-schema.js'
import { DROP_KEY_CHECKS, sharedPostgres } from './postgres.js'
import { BUNDLED_MANAGEMENT_KEY, failToStart, freePort, startServer, type RunningServer } from './process.js'
import { PATIENCE_MS } from './patience.js'

/** What npm run check says of the bundled data, as the docs quote it. */
const BUNDLED_COUNTS = describeCounts(countRecords(await loadDataFolder(BUNDLED_FIXTURES_DIR)))

// The messages and log lines the documentation quotes, produced by the code and compared with the
// quotes: a test fails when either changes without the other.

const run = promisify(execFile)
const collapse = (text: string) => text.replace(/\s+/g, ' ')

/** Expects `file` to quote `quote` (line breaks of the prose aside). */
async function expectQuoted (file: string, quote: string) {
  expect(collapse(await readFile(file, 'utf8')).includes(collapse(quote)), `${file} should quote: ${quote}`).toBe(true)
}

/** A log line as the docs quote it: without the time, process id and host name pino adds. */
function asQuoted (line: string) {
  const { time: _time, pid: _pid, hostname: _hostname, ...rest } = JSON.parse(line) as Record<string, unknown>
  return JSON.stringify(rest)
}

/** The first line of a server's output whose message starts with `message`. */
async function logLine (server: RunningServer, message: string, after = 0) {
  return await vi.waitFor(() => {
    const line = server.output().slice(after).split('\n').find((text) => text.includes(`"msg":"${message}`))
    if (line === undefined) throw new Error(`no log line says ${message}`)
    return line
  }, { timeout: PATIENCE_MS, interval: 20 })
}

const folders: string[] = []
const servers: RunningServer[] = []
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.process.kill('SIGKILL')
    await server.exited
  }
})
afterAll(async () => {
  await Promise.all(folders.map((folder) => rm(folder, { recursive: true, force: true })))
})

/** A copy of the bundled fixtures, spoiled by `spoil` (given the folder). */
async function spoiled (spoil: (folder: string) => Promise<void> = async () => {}) {
  const folder = await mkdtemp(join(tmpdir(), 'docs-quotes-'))
  folders.push(folder)
  await cp(BUNDLED_FIXTURES_DIR, folder, { recursive: true })
  await spoil(folder)
  return folder
}

/** Changes one bundled file's records, written whole by rename as the docs advise. */
async function editRecords (folder: string, file: string, edit: (records: Array<Record<string, unknown>>) => void) {
  const records = JSON.parse(await readFile(join(folder, file), 'utf8')) as Array<Record<string, unknown>>
  edit(records)
  await writeFile(join(folder, `${file}.tmp`), JSON.stringify(records, null, 2))
  await rename(join(folder, `${file}.tmp`), join(folder, file))
}

/** What `npm run check -- --data-dir <folder>` prints (its one line), the folder written as the docs write it. */
async function check (folder: string) {
  const result = await run(process.execPath, ['dist/cli/check.js', '--data-dir', folder]).catch((error: { stdout: string, stderr: string }) => error)
  return `${result.stdout}${result.stderr}`.trim().replaceAll(folder, '/path/to/my-data')
}

describe('the messages about bad data, as the docs quote them', () => {
  it.each([
    ['a byte of providers.json that is not UTF-8', ['docs/data.md', 'docs/troubleshooting.md'], 'invalid: providers.json: not valid UTF-8 at byte 300', async (folder: string) => {
      const bytes = await readFile(join(folder, 'providers.json'))
      bytes[bytes.indexOf('Anthropic')] = 0xff
      await writeFile(join(folder, 'providers.json'), bytes)
    }],
    ['a comma left out after the second provider\'s slug', ['docs/data.md', 'docs/troubleshooting.md'], 'invalid: providers.json: not valid JSON at line 16, column 5 ([1].slug): expected \',\' or \'}\'', async (folder: string) => {
      const text = await readFile(join(folder, 'providers.json'), 'utf8')
      await writeFile(join(folder, 'providers.json'), text.replace('"slug": "anthropic",', '"slug": "anthropic"'))
    }],
    ['a keys.json of 9 MiB', ['docs/data.md'], 'invalid: keys.json: 9437184 bytes, over the limit of 8388608 (8 MiB) for a data file: larger data belongs in PostgreSQL', async (folder: string) => {
      await writeFile(join(folder, 'keys.json'), Buffer.alloc(9 * 1024 * 1024, 0x20))
    }],
    ['a key named with 300 letters', ['docs/data.md'], `invalid: keys.json: [3].name: "${'k'.repeat(79)}…: expected string length less or equal to 256`, async (folder: string) => {
      await editRecords(folder, 'keys.json', (keys) => { keys[3]!.name = 'k'.repeat(300) })
    }],
    ['a misspelt optional field', ['docs/troubleshooting.md'], 'invalid: providers.json: [0].headquarter: is not a known field; did you mean "headquarters"?', async (folder: string) => {
      await editRecords(folder, 'providers.json', (providers) => {
        providers[0]!.headquarter = providers[0]!.headquarters
        delete providers[0]!.headquarters
      })
    }],
    ['a misspelt required field', ['docs/troubleshooting.md'], 'invalid: keys.json: [0].organization_id: is required; the record has "organisation_id", did you mean "organization_id"?', async (folder: string) => {
      await editRecords(folder, 'keys.json', (keys) => {
        keys[0]!.organisation_id = keys[0]!.organization_id
        delete keys[0]!.organization_id
      })
    }],
    ['a misspelt price of OpenRouter\'s', ['docs/data.md'], 'invalid: zdr-endpoints.json: [0].pricing.input_cache_reed: is not a known field; did you mean "input_cache_read"?', async (folder: string) => {
      await editRecords(folder, 'zdr-endpoints.json', (endpoints) => { (endpoints[0]!.pricing as Record<string, unknown>).input_cache_reed = '0.000000125' })
    }],
    ['a missing file', ['docs/troubleshooting.md'], 'invalid: keys.json: cannot read /path/to/my-data/keys.json (ENOENT)', async (folder: string) => {
      await unlink(join(folder, 'keys.json'))
    }],
    // The bundled data keeps a key of a deleted organization on purpose: valid, with a warning.
    ['nothing wrong', ['docs/data.md'], `/path/to/my-data: valid: ${BUNDLED_COUNTS}\nwarning: keys.json: key "deleted-org-management" is of organization "org_2vQmDeleted03", which organizations.json does not have; its member listing answers 404`, async () => {}]
  ])('npm run check, on the bundled data with %s', async (_case, pages, quote, spoil) => {
    expect(await check(await spoiled(spoil))).toBe(quote)
    for (const page of pages) await expectQuoted(page, quote)
  })

  it('the data.md example of a misspelt field is the message check gives', async () => {
    await expectQuoted('docs/data.md', '[0].headquarter: is not a known field; did you mean "headquarters"?')
  })
})

describe('the lines a server that cannot start writes, as the docs quote them', () => {
  it('bad data', async () => {
    const folder = await spoiled((folder) => editRecords(folder, 'providers.json', (providers) => { providers[3]!.headquarters = 'ZZ' }))
    const { code, output } = await failToStart({ DATA_DIR: folder })
    const quote = 'cannot start: providers.json: [3].headquarters: "ZZ" is not an ISO 3166-1 alpha-2 code'
    expect({ code, output: output.trim() }).toEqual({ code: 1, output: quote })
    for (const page of ['README.md', 'docs/data.md', 'docs/troubleshooting.md']) await expectQuoted(page, quote)
  })

  it('a bad setting', async () => {
    const { code, output } = await failToStart({ PORT: '99999' })
    const quote = 'cannot start: invalid setting PORT: 99999: expected integer to be less or equal to 65535'
    expect({ code, output: output.trim() }).toEqual({ code: 1, output: quote })
    for (const page of ['docs/configuration.md', 'docs/troubleshooting.md']) await expectQuoted(page, quote)
  })

  it('a misspelt setting, with STRICT_SETTINGS=true; without it, the warning', async () => {
    const quote = 'cannot start: PROT is not a setting of this server: did you mean PORT? (STRICT_SETTINGS is true)'
    const { code, output } = await failToStart({ STRICT_SETTINGS: 'true', PROT: '8080' })
    expect({ code, output: output.trim() }).toEqual({ code: 1, output: quote })
    await expectQuoted('docs/configuration.md', quote)
    const server = await startServer({ PROT: '8080' })
    servers.push(server)
    const { msg } = JSON.parse(await logLine(server, 'PROT ')) as { msg: string }
    expect(msg).toBe('PROT is not a setting of this server, and is ignored: did you mean PORT?')
    await expectQuoted('docs/configuration.md', msg)
  })

  it('a port in use', async () => {
    const port = await freePort()
    const holder = createServer().listen(port, '127.0.0.1')
    await once(holder, 'listening')
    try {
      const { code, output } = await failToStart({ PORT: String(port) })
      expect(code).toBe(1)
      const quote = output.trim().replace(`:${port}`, ':3000')
      expect(quote).toBe('cannot start: listen EADDRINUSE: address already in use 127.0.0.1:3000')
      await expectQuoted('docs/troubleshooting.md', quote)
    } finally {
      holder.close()
    }
  })

  it('a database that does not answer, try by try', async () => {
    const port = await freePort()
    const { code, output } = await failToStart({ DATABASE_URL: `postgresql://directory:secret@127.0.0.1:${port}/directory`, DATABASE_CONNECT_TIMEOUT_MS: '1500' })
    expect(code).toBe(1)
    const lines = output.trim().split('\n')
    // The waits are drawn at random, and the docs wait the default 30 s.
    const as = (docPort: number) => (line: string) => line.replaceAll(`:${port}`, `:${docPort}`).replace(/trying again in \d+ ms, for \d+ ms more/, 'trying again in 97 ms, for 29903 ms more').replace('within 1500 ms', 'within 30000 ms')
    for (const [page, docPort] of [['docs/postgresql.md', 5499], ['docs/troubleshooting.md', 5433]] as const) {
      await expectQuoted(page, as(docPort)(lines[0]!))
      await expectQuoted(page, as(docPort)(lines.at(-1)!))
    }
    expect(lines.at(-1)).toMatch(/^cannot start: cannot connect to PostgreSQL at postgresql:\/\/directory@127\.0\.0\.1:\d+\/directory within 1500 ms/)
  })
})

describe('a server on the bundled fixtures, as the docs show it', () => {
  let server: RunningServer
  beforeAll(async () => { server = await startServer() })
  afterAll(async () => {
    server.process.kill('SIGKILL')
    await server.exited
  })

  /** The curl commands of a page that are followed by their output (`# ...`), with that output. */
  async function curls (page: string) {
    const found: Array<{ command: string, url: string, key?: string, expected: string }> = []
    // $KEY is the last key a block of the page set.
    let key: string | undefined
    for (const [, block] of (await readFile(page, 'utf8')).matchAll(/```sh\n([\s\S]*?)```/g)) {
      const lines = block!.split('\n')
      key = /^KEY=(\S+)/m.exec(block!)?.[1] ?? key
      lines.forEach((line, index) => {
        const command = /^curl -s (?:'([^']+)'|(\S+))(?: -H "Authorization: Bearer ([^"]+)")?$/.exec(line)
        const output = lines[index + 1]
        if (!command || !output?.startsWith('# ')) return
        const bearer = command[3] === '$KEY' ? key : command[3]
        found.push({ command: line, url: (command[1] ?? command[2])!, key: bearer, expected: output.slice(2) })
      })
    }
    return found
  }

  it.each(['README.md', 'docs/api.md'])('%s: every curl shown with its output gives that output', async (page) => {
    const shown = await curls(page)
    expect(shown.length).toBeGreaterThan(0)
    for (const { command, url, key, expected } of shown) {
      const answer = await fetch(url.replace('http://127.0.0.1:3000', server.url), { headers: key ? { authorization: `Bearer ${key}` } : {} })
      const body = await answer.text()
      // An output cut short ends with "...": the answer starts with what it shows.
      if (expected.endsWith('...')) expect(body.startsWith(expected.slice(0, -3)), `${command}\n${body.slice(0, 300)}`).toBe(true)
      else expect(body, command).toBe(expected)
    }
  })

  it('README: the SDK example prints what the README shows', async () => {
    const { stdout } = await run(process.execPath, ['examples/list-with-sdk.mjs'], {
      env: { PATH: process.env.PATH ?? '', OPENROUTER_BASE_URL: `${server.url}/v1`, OPENROUTER_API_KEY: BUNDLED_MANAGEMENT_KEY }
    })
    const readme = await readFile('README.md', 'utf8')
    const shown = /node examples\/list-with-sdk\.mjs\n((?:# .*\n)+)/.exec(readme)![1]!.split('\n').filter(Boolean).map((line) => line.slice(2))
    // The example prints the first provider over several lines; the README shows it on one.
    const printed = collapse(stdout).split(/ (?=\d+ endpoints|members page)/)
    expect(printed).toHaveLength(shown.length)
    shown.forEach((line, index) => {
      if (line.endsWith('...')) expect(printed[index]!.startsWith(line.slice(0, -3)), printed[index]).toBe(true)
      else expect(printed[index]!.trim()).toBe(line)
    })
  })
})

describe('the lines a server on files writes, as the docs quote them', () => {
  it('the start line', async () => {
    const folder = await spoiled()
    const server = await startServer({ DATA_DIR: folder })
    servers.push(server)
    const { msg } = JSON.parse(await logLine(server, 'using ')) as { msg: string }
    const quote = msg.replace(folder, '/app/fixtures')
    expect(quote).toBe('using files in /app/fixtures; rate limits in memory (6000 a minute a key, 600 a minute an address); CORS origins: none; trusted proxies: none; staleness unbounded (the last data serves however old); log level info')
    await expectQuoted('docs/configuration.md', quote)
  })

  it('a refused change, which holds back no other file: a key minted meanwhile is accepted', async () => {
    const folder = await spoiled()
    const server = await startServer({ DATA_DIR: folder })
    servers.push(server)
    await editRecords(folder, 'providers.json', (providers) => { providers[0]!.headquarters = 'ZZ' })
    const line = asQuoted(await logLine(server, 'change refused'))
    await expectQuoted('docs/data.md', line)
    // The troubleshooting page leaves the level's neighbours out.
    await expectQuoted('docs/troubleshooting.md', line.slice('{"level":50,'.length))
    const { msg } = JSON.parse(line) as { msg: string }
    await expectQuoted('docs/runbook.md', msg.replace('providers', '<kind>'))

    const { stdout: key } = await run(process.execPath, ['dist/cli/mint-key.js', '--kind', 'standard', '--org', 'org_2vQmAcme0001', '--name', 'minted', '--data-dir', folder])
    const status = async () => (await fetch(`${server.url}/v1/providers`, { headers: { authorization: `Bearer ${key.trim()}` } })).status
    await expect.poll(status, { timeout: PATIENCE_MS, interval: 20 }).toBe(200)
    await expectQuoted('docs/decisions.md', 'a key minted while `providers.json` is bad is accepted')
  })

  it('npm run key without a place to write', async () => {
    const failure = await run(process.execPath, ['dist/cli/mint-key.js', '--kind', 'standard', '--org', 'org_2vQmAcme0001', '--name', 'x'], { env: { PATH: process.env.PATH ?? '' } })
      .then(() => ({ stderr: 'exited 0' }), (error: { stderr: string }) => error)
    const quote = failure.stderr.trim()
    expect(quote).toBe('no data to write into: pass --data-dir <dir>, or set DATA_DIR or DATABASE_URL (the bundled fixtures/ folder is left alone)')
    await expectQuoted('docs/troubleshooting.md', quote)
  })
})

describe('the messages of the tests\' own helpers, as the troubleshooting page quotes them', () => {
  it.each([
    ['test/chromium.ts', 'no Chromium at ${CHROMIUM}: install it with \\`apt-get update && apt-get install -y chromium\\`', 'no Chromium at /usr/bin/chromium: install it with `apt-get update && apt-get install -y chromium`'],
    ['test/redis.ts', 'cannot run redis-server (apt-get install redis-server): ${error.message}', 'cannot run redis-server (apt-get install redis-server): spawn redis-server ENOENT'],
    ['test/postgres.ts', 'no PostgreSQL server binaries (initdb): install them, e.g. apt-get install -y postgresql', 'no PostgreSQL server binaries (initdb): install them, e.g. apt-get install -y postgresql']
  ])('%s', async (file, source, quote) => {
    expect(await readFile(file, 'utf8')).toContain(source)
    await expectQuoted('docs/troubleshooting.md', quote)
  })
})

describe('the lines a server on PostgreSQL writes, as the docs quote them', () => {
  const postgres = sharedPostgres()
  let url: string
  beforeAll(async () => { url = await postgres.createDatabase() })
  afterAll(() => postgres.close())

  const DOC_URL = 'postgresql://directory@127.0.0.1:5433/directory'

  it('on a database without the schema, then on the bundled data: the start line and the refused changes', async () => {
    const { code, output } = await failToStart({ DATABASE_URL: url })
    const schema = `cannot start: the database schema is at version none, this build needs ${SCHEMA_VERSION}: run npm run db -- migrate`
    expect({ code, output: output.trim() }).toEqual({ code: 1, output: schema })
    for (const page of ['docs/postgresql.md', 'docs/troubleshooting.md']) await expectQuoted(page, schema)

    for (const command of [['migrate'], ['import', '--data-dir', BUNDLED_FIXTURES_DIR]]) {
      await run(process.execPath, ['dist/cli/db.js', ...command], { env: { PATH: process.env.PATH ?? '', DATABASE_URL: url } })
    }
    // Redis need not answer for the server to start and say where it counts.
    const server = await startServer({ DATABASE_URL: url, REDIS_URL: 'redis://127.0.0.1:6380' })
    servers.push(server)
    const { msg } = JSON.parse(await logLine(server, 'using ')) as { msg: string }
    const start = msg.replace(url, DOC_URL)
    expect(start).toBe(`using PostgreSQL at ${DOC_URL}; rate limits in Redis at redis://127.0.0.1:6380 (6000 a minute a key, 600 a minute an address); CORS origins: none; trusted proxies: none; staleness unbounded (the last data serves however old); log level info`)
    await expectQuoted('README.md', `${start.slice(0, start.indexOf('CORS'))}...`)

    const client = new pg.Client({ connectionString: url })
    await client.connect()
    try {
      await client.query(`UPDATE providers SET document = (document::jsonb || '{"headquarters": "ZZ"}')::json WHERE slug = 'openai'`)
      await expectQuoted('docs/postgresql.md', asQuoted(await logLine(server, 'change refused')))

      const after = server.output().length
      await client.query("INSERT INTO keys (name, sha256, kind, organization_id) VALUES (repeat('k', 300), repeat('0', 64), 'standard', 'org_2vQmAcme0001')")
      const { kind, problem, msg: refused } = JSON.parse(await logLine(server, 'change refused', after)) as Record<string, string>
      // The page shows the names cut short (three runs of 79 letters), and the rest as it is.
      const cut = `"${'k'.repeat(79)}…`
      expect(problem).toBe(`table keys, row name ${cut}: name: ${cut}: expected string length less or equal to 256`)
      await expectQuoted('docs/postgresql.md', problem!.replaceAll(cut, '"kkk…'))
      await expectQuoted('docs/postgresql.md', `"kind":"${kind}"`)
      await expectQuoted('docs/postgresql.md', refused!)
      await expectQuoted('docs/runbook.md', refused!.replace('keys', '<kind>'))

      // The README's one statement that changes a provider, as psql would send it: every replica serves it.
      const readme = await readFile('README.md', 'utf8')
      const statement = /psql "\$DATABASE_URL" -c "(UPDATE providers .*)"$/m.exec(readme)![1]!.replaceAll('\\"', '"')
      await client.query(statement)
      const openai = async () => ((await (await fetch(`${server.url}/v1/providers`, { headers: { authorization: `Bearer ${BUNDLED_MANAGEMENT_KEY}` } })).json()) as { data: Array<Record<string, unknown>> }).data[0]
      await expect.poll(openai, { timeout: PATIENCE_MS }).toStrictEqual(JSON.parse(/document = '(.*)' WHERE/.exec(statement)![1]!))
    } finally {
      await client.end()
    }
  })

  it('npm run db -- export beside rows a replica refuses: a line for each, the summary, exit 3', async () => {
    const database = await postgres.createDatabase()
    for (const command of [['migrate'], ['import', '--data-dir', BUNDLED_FIXTURES_DIR]]) {
      await run(process.execPath, ['dist/cli/db.js', ...command], { env: { PATH: process.env.PATH ?? '', DATABASE_URL: database } })
    }
    const client = new pg.Client({ connectionString: database })
    await client.connect()
    try {
      // The statements the page gives, the keys' checks dropped first.
      await client.query(DROP_KEY_CHECKS)
      await client.query("UPDATE members SET role = 'org:owner' WHERE id = 'user_globex0001'")
      await client.query("UPDATE keys SET kind = 'revoked' WHERE name = 'acme-standard'")
    } finally {
      await client.end()
    }
    const folder = await mkdtemp(join(tmpdir(), 'docs-quotes-'))
    folders.push(folder)
    const result = await run(process.execPath, [join(process.cwd(), 'dist/cli/db.js'), 'export', '--data-dir', './backup'], { cwd: folder, env: { PATH: process.env.PATH ?? '', DATABASE_URL: database } })
      .catch((error: { code: number, stderr: string }) => error)
    expect(result).toMatchObject({ code: 3 })
    const lines = result.stderr.replaceAll(database, DOC_URL).trimEnd().split('\n')
    expect(lines).toHaveLength(3)
    for (const line of lines) await expectQuoted('docs/postgresql.md', line)
  })
})
