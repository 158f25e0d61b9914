import { execFileSync, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { once } from 'node:events'
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { createServer, type AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest'
import { BUNDLED_FIXTURES_DIR } from '../src/config.js'
import { BUNDLED_MANAGEMENT_KEY, failToStart, startServer } from './process.js'
import { PATIENCE_MS } from './patience.js'
import { startRedis, type RedisServer } from './redis.js'


describe('the server process on the bundled fixtures', () => {
  it('serves the three operations over a real socket and exits 0 on SIGTERM', async () => {
    const server = await startServer()
    const get = (path: string) => fetch(`${server.url}${path}`, { headers: { authorization: `Bearer ${BUNDLED_MANAGEMENT_KEY}` } })

    const providers = await get('/v1/providers')
    expect(providers.status).toBe(200)
    expect(providers.headers.get('content-type')).toBe('application/json; charset=utf-8')
    expect((await providers.json()).data.length).toBeGreaterThan(20)
    expect((await (await get('/v1/endpoints/zdr')).json()).data.length).toBeGreaterThan(20)
    const members = await (await get('/v1/organization/members?offset=100&limit=100')).json()
    expect(members.total_count).toBe(130)
    expect(members.data).toHaveLength(30)
    expect((await fetch(`${server.url}/v1/providers`)).status).toBe(401)

    server.process.kill('SIGTERM')
    expect(await server.exited).toBe(0)
    // One JSON line per event, and no key in any of them.
    const lines = server.output().trim().split('\n')
    expect(lines.every((line) => JSON.parse(line))).toBeTruthy()
    expect(server.output()).not.toContain(BUNDLED_MANAGEMENT_KEY)
  })

  it('exits 0 on SIGINT too', async () => {
    const server = await startServer()
    server.process.kill('SIGINT')
    expect(await server.exited).toBe(0)
  })
})

describe('the start lines', () => {
  /** The lines of a server started with `env` and stopped at once. */
  async function startLines (env: Record<string, string> = {}) {
    const server = await startServer(env)
    server.process.kill('SIGTERM')
    expect(await server.exited).toBe(0)
    return { output: server.output(), lines: server.output().trim().split('\n').map((line) => JSON.parse(line) as Record<string, unknown>) }
  }

  it('say where the data is read, that rate limits count in memory, and that no origin and no proxy is trusted, by default', async () => {
    const { lines } = await startLines()
    expect(lines.filter((line) => String(line.msg).startsWith('using '))).toEqual([expect.objectContaining({
      level: 30,
      msg: `using files in ${BUNDLED_FIXTURES_DIR}; rate limits in memory (6000 a minute a key, 600 a minute an address); CORS origins: none; trusted proxies: none; staleness unbounded (the last data serves however old); log level info`,
      data: `files in ${BUNDLED_FIXTURES_DIR}`,
      rate_limits: 'in memory (6000 a minute a key, 600 a minute an address)',
      log_level: 'info',
      cors_origins: [],
      trusted_proxies: 'none',
      max_staleness_ms: null
    })])
  })

  it('name the bound on stale data when MAX_STALENESS_MS is set', async () => {
    const { lines } = await startLines({ MAX_STALENESS_MS: '30000' })
    expect(lines.find((line) => String(line.msg).startsWith('using '))).toMatchObject({
      msg: expect.stringMatching(/; staleness 30000 ms, then keyed requests answer 503; log level info$/),
      max_staleness_ms: 30000
    })
  })

  describe('with Redis, CORS origins and proxies set', () => {
    let redis: RedisServer
    beforeAll(async () => { redis = await startRedis({ password: 's3cret-pw' }) })
    afterAll(() => redis?.close())

    it.each([
      ['in the URL\'s user information', (url: string) => url.replace('redis://', 'redis://:s3cret-pw@')],
      ['in its query, where ioredis takes options', (url: string) => `${url}?password=s3cret-pw`]
    ])('name Redis without its password (%s), the origins and the proxies', async (_where, withPassword) => {
      const { lines, output } = await startLines({
        REDIS_URL: withPassword(redis.url),
        CORS_ORIGINS: 'https://dash.example, https://admin.example:8443',
        TRUST_PROXY: '10.0.0.0/8, 127.0.0.1'
      })
      expect(lines.find((line) => String(line.msg).startsWith('using '))).toMatchObject({
        msg: `using files in ${BUNDLED_FIXTURES_DIR}; rate limits in Redis at ${redis.url} (6000 a minute a key, 600 a minute an address); ` +
          'CORS origins: https://dash.example, https://admin.example:8443; trusted proxies: 10.0.0.0/8, 127.0.0.1; staleness unbounded (the last data serves however old); log level info',
        rate_limits: `in Redis at ${redis.url} (6000 a minute a key, 600 a minute an address)`,
        cors_origins: ['https://dash.example', 'https://admin.example:8443'],
        trusted_proxies: '10.0.0.0/8, 127.0.0.1'
      })
      // The password was right: Redis never refused it (a command timed out on a busy machine is no refusal).
      expect(output).not.toMatch(/NOAUTH|WRONGPASS|invalid password/i)
      expect(output).not.toContain('s3cret-pw')
    })

    it('say rate limits are off when both limits are 0, whatever REDIS_URL says', async () => {
      const { lines } = await startLines({ REDIS_URL: redis.url, RATE_LIMIT_PER_MINUTE: '0', RATE_LIMIT_ANONYMOUS_PER_MINUTE: '0', TRUST_PROXY: '2' })
      expect(lines.find((line) => String(line.msg).startsWith('using '))?.msg)
        .toBe(`using files in ${BUNDLED_FIXTURES_DIR}; rate limits off; CORS origins: none; trusted proxies: 2 hops; staleness unbounded (the last data serves however old); log level info`)
    })
  })
})

describe('refusing to start', () => {
  let dir: string
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'bad-fixtures-'))
    await cp('fixtures', dir, { recursive: true })
    const providers = JSON.parse(await readFile(join(dir, 'providers.json'), 'utf8'))
    providers[3].headquarters = 'ZZ'
    await writeFile(join(dir, 'providers.json'), JSON.stringify(providers))
  })
  afterAll(() => rm(dir, { recursive: true, force: true }))

  it('stops before listening when a fixture is invalid, naming file, record and field', async () => {
    const { code, output } = await failToStart({ DATA_DIR: dir })
    expect(code).toBe(1)
    expect(output).toContain('providers.json: [3].headquarters: "ZZ" is not an ISO 3166-1 alpha-2 code')
    expect(output).not.toContain('listening')
  })

  it('reads the data folder by its former name, FIXTURES_DIR, and refuses it beside a DATA_DIR naming another folder', async () => {
    const { code, output } = await failToStart({ FIXTURES_DIR: dir })
    expect(code).toBe(1)
    expect(output).toContain('providers.json: [3].headquarters: "ZZ" is not an ISO 3166-1 alpha-2 code')
    expect(await failToStart({ FIXTURES_DIR: dir, DATA_DIR: 'fixtures' })).toEqual({
      code: 1,
      output: 'cannot start: invalid setting FIXTURES_DIR: the former name of DATA_DIR, which is set to another value; set DATA_DIR alone\n'
    })
  })

  it('stops with one line when the port is in use, without a stack trace', async () => {
    const holder = createServer().listen(0, '127.0.0.1')
    await once(holder, 'listening')
    const { port } = holder.address() as AddressInfo
    try {
      const { code, output } = await failToStart({ PORT: String(port) })
      expect(code).toBe(1)
      expect(output).toBe(`cannot start: listen EADDRINUSE: address already in use 127.0.0.1:${port}\n`)
    } finally {
      holder.close()
    }
  })

  it('stops at once, naming the file, when a named pipe stands in place of a data file', async () => {
    const piped = await mkdtemp(join(tmpdir(), 'piped-fixtures-'))
    try {
      await cp('fixtures', piped, { recursive: true })
      await rm(join(piped, 'providers.json'))
      execFileSync('mkfifo', [join(piped, 'providers.json')])
      const { code, output } = await failToStart({ DATA_DIR: piped })
      expect(code).toBe(1)
      expect(output).toBe(`cannot start: providers.json: ${join(piped, 'providers.json')} is not a regular file (a named pipe)\n`)
    } finally {
      await rm(piped, { recursive: true, force: true })
    }
  })

  it('stops when the fixtures folder does not exist', async () => {
    const { code, output } = await failToStart({ DATA_DIR: join(dir, 'nope') })
    expect(code).toBe(1)
    expect(output).toMatch(/cannot read .*nope/)
  })

  it.each([
    [{ PORT: 'abc' }, 'PORT'],
    [{ PORT: '70000' }, 'PORT'],
    [{ PORT: '3.5' }, 'PORT'],
    [{ HOST: 'local host' }, 'HOST'],
    [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL'],
    [{ SHUTDOWN_GRACE_MS: '-5' }, 'SHUTDOWN_GRACE_MS'],
    [{ METRICS: 'no' }, 'METRICS'],
    [{ RATE_LIMIT_PER_MINUTE: '-1' }, 'RATE_LIMIT_PER_MINUTE'],
    [{ RATE_LIMIT_ANONYMOUS_PER_MINUTE: 'lots' }, 'RATE_LIMIT_ANONYMOUS_PER_MINUTE'],
    [{ REDIS_URL: 'localhost:6379' }, 'REDIS_URL'],
    [{ TRUST_PROXY: 'yes' }, 'TRUST_PROXY'],
    [{ CORS_ORIGINS: 'dash.example' }, 'CORS_ORIGINS'],
    [{ KEEP_ALIVE_TIMEOUT_MS: '0' }, 'KEEP_ALIVE_TIMEOUT_MS'],
    [{ MAX_CONNECTIONS: 'many' }, 'MAX_CONNECTIONS'],
    [{ HEADERS_TIMEOUT_MS: '60000', REQUEST_TIMEOUT_MS: '30000' }, 'HEADERS_TIMEOUT_MS']
  ])('stops on a bad setting %o, naming it', async (env, name) => {
    const { code, output } = await failToStart(env)
    expect(code).toBe(1)
    expect(output).toContain(name)
    expect(output).toMatch(/^cannot start: [^\n]+\n$/)
  })

  it.each([
    [{ CORS_ORIGINS: 'dash.example.com' }, 'cannot start: invalid setting CORS_ORIGINS: "dash.example.com" is not origins with their scheme, comma-separated (https://dash.example.com, http://localhost:5173), or *\n'],
    [{ TRUST_PROXY: 'yes' }, 'cannot start: invalid setting TRUST_PROXY: "yes" is not a number of proxy hops (1), or addresses and CIDR ranges, comma-separated (10.0.0.0/8, 127.0.0.1)\n'],
    [{ REDIS_URL: 'localhost:6379' }, 'cannot start: invalid setting REDIS_URL: "localhost:6379" is not a Redis URL, such as redis://:password@cache.example:6379\n']
  ])('says what %o should be, with an example, not a regular expression', async (env, line) => {
    expect(await failToStart(env)).toEqual({ code: 1, output: line })
  })
})

describe('settings spelt wrong', () => {
  it('warns of a variable that looks like a setting and is none, with the setting it is a slip of, never its value', async () => {
    const server = await startServer({ LOG_LEVL: 'debug', RATE_LIMIT_PER_MINUTES: '10', DATABASE_PASSWORD: 's3cret', HOME: '/root', HOSTNAME: 'pod-1' })
    server.process.kill('SIGTERM')
    await server.exited
    const warnings = server.output().trim().split('\n').map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.level === 40)
    expect(warnings.map(({ msg, variable, did_you_mean: near }) => ({ msg, variable, near }))).toEqual([
      { msg: 'LOG_LEVL is not a setting of this server, and is ignored: did you mean LOG_LEVEL?', variable: 'LOG_LEVL', near: 'LOG_LEVEL' },
      { msg: 'RATE_LIMIT_PER_MINUTES is not a setting of this server, and is ignored: did you mean RATE_LIMIT_PER_MINUTE?', variable: 'RATE_LIMIT_PER_MINUTES', near: 'RATE_LIMIT_PER_MINUTE' },
      { msg: 'DATABASE_PASSWORD is not a setting of this server, and is ignored', variable: 'DATABASE_PASSWORD', near: null }
    ])
    expect(server.output()).not.toContain('s3cret')
  })

  it('warns of a slip without an underscore too: a letter dropped or swapped, an underscore left out', async () => {
    const server = await startServer({ DATADIR: '/my/data', PROT: '8080', LOGLEVEL: 'debug', DATABSE_URL: 'postgresql://directory:s3cret@db.example/directory' })
    server.process.kill('SIGTERM')
    await server.exited
    const warnings = server.output().trim().split('\n').map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.level === 40)
    expect(warnings.map(({ msg }) => msg)).toEqual([
      'DATADIR is not a setting of this server, and is ignored: did you mean DATA_DIR?',
      'PROT is not a setting of this server, and is ignored: did you mean PORT?',
      'LOGLEVEL is not a setting of this server, and is ignored: did you mean LOG_LEVEL?',
      'DATABSE_URL is not a setting of this server, and is ignored: did you mean DATABASE_URL?'
    ])
    expect(server.output()).not.toContain('s3cret')
  })

  it('warns of nothing in the usual environment of a process, a container\'s, npm\'s or a Kubernetes pod\'s', async () => {
    const server = await startServer({
      HOME: '/home/node', HOSTNAME: 'directory-7d4b9c-x2x9q', PWD: '/app', OLDPWD: '/', SHELL: '/bin/sh', USER: 'node', LOGNAME: 'node', LANG: 'C.UTF-8', TERM: 'xterm', TZ: 'UTC', TMPDIR: '/tmp',
      NODE_ENV: 'production', NODE_VERSION: '24.22.3', YARN_VERSION: '1.22.22', npm_config_loglevel: 'warn', npm_lifecycle_event: 'start', INIT_CWD: '/app', COLOR: '0', EDITOR: 'vi', CI: 'true',
      HTTP_PROXY: 'http://proxy.example:3128', NO_PROXY: 'localhost',
      KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443', KUBERNETES_PORT: 'tcp://10.96.0.1:443',
      // A service named redis beside the server, as Kubernetes names its variables.
      REDIS_SERVICE_HOST: '10.96.0.11', REDIS_SERVICE_PORT: '6379', REDIS_PORT: 'tcp://10.96.0.11:6379', REDIS_PORT_6379_TCP: 'tcp://10.96.0.11:6379', REDIS_PORT_6379_TCP_ADDR: '10.96.0.11', REDIS_PORT_6379_TCP_PORT: '6379', REDIS_PORT_6379_TCP_PROTO: 'tcp'
    })
    server.process.kill('SIGTERM')
    await server.exited
    const warnings = server.output().trim().split('\n').map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.level === 40)
    expect(warnings).toEqual([])
  })

  it('warns before the line that says it listens, where an operator reading the start looks', async () => {
    const server = await startServer({ PROT: '8080', FIXTURES_DIR: 'fixtures' })
    server.process.kill('SIGTERM')
    await server.exited
    const lines = server.output().trim().split('\n').map((line) => JSON.parse(line) as { level: number, msg: string })
    const listening = lines.findIndex(({ msg }) => msg.startsWith('Server listening at '))
    expect(lines.slice(0, listening).filter(({ level }) => level === 40).map(({ msg }) => msg)).toEqual([
      'FIXTURES_DIR is the former name of DATA_DIR: it is read as DATA_DIR; rename it',
      'PROT is not a setting of this server, and is ignored: did you mean PORT?'
    ])
  })

  it('refuses to start on a slip with STRICT_SETTINGS=true, naming the variable and the setting, exit 1', async () => {
    expect(await failToStart({ STRICT_SETTINGS: 'true', PROT: '8080' }))
      .toEqual({ code: 1, output: 'cannot start: PROT is not a setting of this server: did you mean PORT? (STRICT_SETTINGS is true)\n' })
  })

  it('starts with STRICT_SETTINGS=true beside the usual environment and a variable only named like ours, which it warns of', async () => {
    const server = await startServer({ STRICT_SETTINGS: 'true', HOME: '/home/node', HOSTNAME: 'directory-7d4b9c-x2x9q', NODE_ENV: 'production', DATABASE_PASSWORD: 's3cret' })
    server.process.kill('SIGTERM')
    expect(await server.exited).toBe(0)
    const warnings = server.output().trim().split('\n').map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.level === 40)
    expect(warnings.map(({ msg }) => msg)).toEqual(['DATABASE_PASSWORD is not a setting of this server, and is ignored'])
  })

  it('warns of a setting given by its former name, and reads it', async () => {
    const server = await startServer({ FIXTURES_DIR: 'fixtures' })
    server.process.kill('SIGTERM')
    await server.exited
    const warnings = server.output().trim().split('\n').map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.level === 40)
    expect(warnings.map(({ msg }) => msg)).toEqual(['FIXTURES_DIR is the former name of DATA_DIR: it is read as DATA_DIR; rename it'])
  })
})

/**
 * Runs `command` with `args` in its own process group, and kills the whole group (npm and what it
 * started) if it has not exited within `ms`: a server started by mistake never outlives the test.
 */
async function runBounded (command: string, args: string[], ms = PATIENCE_MS) {
  const child = spawn(command, args, { detached: true, env: { PATH: process.env.PATH ?? '', PORT: '0' }, stdio: ['ignore', 'pipe', 'pipe'] })
  const exit = once(child, 'exit') as Promise<[number | null, string | null]>
  let running = true
  const stop = () => { if (running) process.kill(-child.pid!, 'SIGKILL') }
  void exit.then(() => { running = false })
  onTestFinished(stop)
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk) => { stdout += chunk })
  child.stderr.on('data', (chunk) => { stderr += chunk })
  const timer = setTimeout(stop, ms)
  const [code, signal] = await exit
  clearTimeout(timer)
  return { code: code ?? signal, stdout, stderr }
}

describe('the command line of the server', () => {
  it('npm start -- --help prints what the server is and every setting with its default, exits 0, and starts no server', async () => {
    const { code, stdout, stderr } = await runBounded('npm', ['start', '--silent', '--', '--help'])
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' })
    expect(stdout).toContain('usage: npm start [-- --help]\n')
    expect(stdout).not.toContain('Server listening')
    // The variables docs/configuration.md lists, each on a line of its own with its default.
    const variables = [...(await readFile('docs/configuration.md', 'utf8')).matchAll(/^\| `([A-Z_]+)` \| /gm)].map((match) => match[1]!)
    expect(variables.length).toBeGreaterThan(15)
    for (const variable of variables) expect(stdout, variable).toMatch(new RegExp(`^  ${variable} +\\S`, 'm'))
    expect(stdout).toMatch(/^ {2}PORT +3000$/m)
    expect(stdout).toMatch(/^ {2}REDIS_URL +unset$/m)
  })

  it('refuses an argument it does not take, in one line that points to --help, exit 2', async () => {
    const { code, stdout, stderr } = await runBounded(process.execPath, ['dist/server.js', '--port', '8080'])
    expect({ code, stdout, stderr }).toEqual({ code: 2, stdout: '', stderr: "unknown option '--port'; see npm start -- --help\n" })
  })
})

// Debian 12's own Node.js is 20: where the machine has it, the server is run on it.
const OLD_NODE = '/usr/bin/node'
const oldNodeMajor = existsSync(OLD_NODE) ? Number(execFileSync(OLD_NODE, ['-p', 'process.versions.node.split(".")[0]']).toString()) : undefined

describe.skipIf(oldNodeMajor === undefined || oldNodeMajor >= 22)(`the server on Node.js ${oldNodeMajor} (${OLD_NODE})`, () => {
  it('says first, in one line, that it is too old and where Node.js 24 comes from', async () => {
    const { code, stderr } = await runBounded(OLD_NODE, ['dist/server.js', '--help'])
    expect(code).toBe(0)
    expect(stderr).toMatch(new RegExp(`^warning: Node.js ${oldNodeMajor}\\.\\d+\\.\\d+ is older than this service supports \\(22 or later\\)[^\\n]*npm registry[^\\n]*\\n$`))
    // As docs/troubleshooting.md quotes it, from Debian 12's Node.js.
    const version = execFileSync(OLD_NODE, ['-p', 'process.versions.node']).toString().trim()
    expect(await readFile('docs/troubleshooting.md', 'utf8')).toContain(`\n${stderr.replace(version, '20.20.2')}`)
  })
})
