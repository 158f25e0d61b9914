import { execFile, spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync } from 'node:fs'
import { chmod, copyFile, mkdir, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { validate } from 'dockerfile-utils'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildImage, hostPath, type Stage } from './image.js'
import { sharedPostgres } from './postgres.js'
import { BUNDLED_MANAGEMENT_KEY, freePort } from './process.js'

// A management key from the README; the bundled keys.json holds its hash.

const packageJson = JSON.parse(await readFile('package.json', 'utf8')) as { dependencies: Record<string, string>, devDependencies: Record<string, string> }

describe('the Dockerfile', () => {
  it('has no finding from the linter (dockerfile-utils)', async () => {
    const findings = validate(await readFile('Dockerfile', 'utf8'))
    expect(findings.map((finding) => `line ${finding.range.start.line + 1}: ${finding.message}`)).toEqual([])
  })
})

const seconds = (duration: string | undefined) => Number(/^(\d+)s$/.exec(duration ?? '')?.[1] ?? Number.NaN)

/** The image's ENV, its one path (the compile cache) where the rebuild put it. */
const imageEnv = (stage: Stage) => ({ ...stage.env, NODE_COMPILE_CACHE: hostPath(stage, stage.env.NODE_COMPILE_CACHE ?? '') })

describe('the container image, rebuilt without Docker (test/image.ts)', () => {
  const postgres = sharedPostgres()
  afterAll(() => postgres.close())
  let workspace: string
  let built: Promise<Stage[]>
  const runtimeStage = async () => (await built).at(-1)!

  beforeAll(async () => {
    workspace = await mkdtemp(join(tmpdir(), 'image-'))
    // The node user must reach the runtime stage's files, as in the image.
    await chmod(workspace, 0o755)
    built = buildImage(process.cwd(), workspace)
    // Handled by the tests that await it; this only keeps a failure from being reported twice.
    built.catch(() => {})
  })
  afterAll(() => rm(workspace, { recursive: true, force: true }))

  // The build is a test of its own, so that a Dockerfile that does not build counts as a failure.
  it('builds from the Dockerfile and what .dockerignore lets into the context', async () => {
    expect((await built).length).toBeGreaterThanOrEqual(2)
  }, 300_000)

  it('builds every stage on the official Node.js slim image, pinned by major version', async () => {
    for (const stage of await built) expect(stage.image).toMatch(/^node:\d+-slim$/)
  })

  it('holds the production dependencies, the compiled code, the migrations, the bundled fixtures and the runbook, nothing else', async () => {
    const runtime = await runtimeStage()
    const app = hostPath(runtime, '.')
    expect((await readdir(app)).sort()).toEqual(['dist', 'docs', 'fixtures', 'migrations', 'node_modules', 'package-lock.json', 'package.json'])
    expect(await readdir(join(app, 'docs'))).toEqual(['runbook.md'])
    expect((await readdir(join(app, 'migrations'))).sort()).toEqual((await readdir('migrations')).sort())
    expect(runtime.runs).toEqual([expect.stringMatching(/^npm ci --omit=dev( |$)/), expect.stringMatching(/^node dist\/cli\/compile-cache\.js /)])
    for (const name of Object.keys(packageJson.dependencies)) expect(existsSync(join(app, 'node_modules', name)), name).toBe(true)
    // A dev dependency that production code also needs (ajv, through fastify) is rightly there.
    const lock = JSON.parse(await readFile('package-lock.json', 'utf8')) as { packages: Record<string, { dev?: boolean }> }
    const devOnly = Object.keys(packageJson.devDependencies).filter((name) => lock.packages[`node_modules/${name}`]?.dev === true)
    expect(devOnly.length).toBeGreaterThan(5)
    for (const name of devOnly) expect(existsSync(join(app, 'node_modules', name)), name).toBe(false)
    expect((await readdir(join(app, 'fixtures'))).sort()).toEqual((await readdir('fixtures')).sort())
    const compiled = await readdir(join(app, 'dist'), { recursive: true })
    expect(compiled).toContain('server.js')
    expect(compiled.filter((file) => file.endsWith('.ts'))).toEqual([])
  })

  it('migrates a database with the migrations it holds, as the Kubernetes Job runs it', async () => {
    const runtime = await runtimeStage()
    const url = await postgres.createDatabase()
    const { stderr } = await promisify(execFile)(process.execPath, ['dist/cli/db.js', 'migrate'], { cwd: hostPath(runtime, '.'), env: { PATH: process.env.PATH ?? '', DATABASE_URL: url } })
    expect(stderr).toBe(`migrated ${url}: applied version ${(await readdir('migrations')).map((_, i) => i + 1).join(', ')}\n`)
  })

  it('runs as the node user, on all interfaces, on the port it exposes', async () => {
    const runtime = await runtimeStage()
    expect(runtime.user).toBe('node')
    expect(runtime.env.HOST).toBe('0.0.0.0')
    expect(runtime.expose).toEqual([runtime.env.PORT])
    // The very command of `npm start` (where the shell npm starts makes way for it), which the benchmark measures.
    expect(['exec', ...runtime.cmd!]).toEqual((packageJson as unknown as { scripts: { start: string } }).scripts.start.split(' '))
    expect(runtime.cmd?.at(-1)).toBe('dist/server.js')
    expect(runtime.healthcheck?.cmd[0]).toBe('node')
  })

  it('starts on the compile cache made at build, for the user it runs as, which it only reads', async () => {
    const runtime = await runtimeStage()
    const cache = imageEnv(runtime).NODE_COMPILE_CACHE
    const files = async () => Object.fromEntries(await Promise.all((await readdir(cache, { recursive: true })).map(async (file) => {
      const { uid, mode, mtimeMs, size } = await stat(join(cache, file))
      return [file, { uid, mode: (mode & 0o777).toString(8), mtimeMs, size }] as const
    })))
    const before = await files()
    // One folder, named after the Node.js version and the user the cache is for.
    const user = process.getuid?.() === 0 ? { uid: 1000, gid: 1000 } : {}
    const folders = await readdir(cache)
    expect(folders).toEqual([expect.stringMatching(new RegExp(`^v${process.versions.node}-.+-${user.uid ?? process.getuid!()}$`))])
    // Root's, and readable by the user who runs the server (where the tests run as root, as in the image).
    if (user.uid !== undefined) {
      for (const [file, { uid, mode }] of Object.entries(before)) expect([file, uid, mode]).toEqual([file, 0, file.includes('/') ? '644' : '755'])
    }
    const bin = join(workspace, 'node-bin-cache')
    await mkdir(bin, { mode: 0o755 })
    await copyFile(process.execPath, join(bin, 'node'))
    await chmod(join(bin, 'node'), 0o755)
    const { stderr } = await new Promise<{ stderr: string }>((resolve, reject) => {
      execFile(join(bin, 'node'), ['dist/server.js', '--help'], { cwd: hostPath(runtime, '.'), env: { ...imageEnv(runtime), NODE_DEBUG_NATIVE: 'COMPILE_CACHE' }, ...user },
        (error, _stdout, stderr) => error ? reject(error) : resolve({ stderr }))
    })
    // Every module a start loads was found in the cache: the bundle, its chunks, the packages left out of it.
    expect(stderr).toMatch(/V8 code cache for ESM file:\/\/\S*\/dist\/main\.js was accepted/)
    expect(stderr).toMatch(/V8 code cache for CommonJS \S*\/node_modules\/pino\/pino\.js was accepted/)
    expect(stderr).not.toMatch(/was not initialized|permission denied|rejected/)
    expect(await files()).toEqual(before)
  })

  it('starts as its CMD does, passes its HEALTHCHECK, serves the probes and the operations, and exits 0 on SIGTERM', async () => {
    const runtime = await runtimeStage()
    const { cmd, healthcheck } = runtime
    if (cmd === null || healthcheck === null) throw new Error('the runtime stage needs a CMD and a HEALTHCHECK')
    // The image's ENV, but a free port instead of 3000 so that the test never meets another
    // server on this machine; the HEALTHCHECK reads PORT and follows.
    const port = await freePort()
    // The image's Node.js is this one (the Dockerfile's FROM follows .nvmrc): a copy the node user
    // can run, first on PATH, since the tests' Node.js may live where uid 1000 cannot reach (root's
    // home) and the machine's own may be older (Debian 12's 20, which the server warns of).
    const bin = join(workspace, 'node-bin')
    await mkdir(bin, { mode: 0o755 })
    await copyFile(process.execPath, join(bin, 'node'))
    await chmod(join(bin, 'node'), 0o755)
    const env = { PATH: `${bin}:${process.env.PATH ?? ''}`, ...imageEnv(runtime), PORT: String(port) }
    // The image runs as node (uid 1000) over files that root owns. Where the tests run as root, do
    // the same, so that a server writing into its own folder fails here as it would in the image.
    const user = process.getuid?.() === 0 ? { uid: 1000, gid: 1000 } : {}
    const options = { cwd: hostPath(runtime, '.'), env, ...user }

    const check = () => new Promise<number>((resolve) => {
      execFile(healthcheck.cmd[0]!, healthcheck.cmd.slice(1), { ...options, timeout: seconds(healthcheck.options.timeout) * 1000 },
        (error) => resolve(error ? Number(error.code ?? 1) : 0))
    })
    expect(await check()).toBe(1)

    const server = spawn(cmd[0]!, cmd.slice(1), { ...options, stdio: ['ignore', 'pipe', 'pipe'] })
    let output = ''
    server.stdout.on('data', (chunk) => { output += chunk })
    server.stderr.on('data', (chunk) => { output += chunk })
    const exited = once(server, 'exit').then(([code, signal]) => code ?? signal)
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`the server did not start:\n${output}`)), 15000)
        server.stdout.on('data', () => { if (output.includes('Server listening at')) { clearTimeout(timer); resolve() } })
        exited.then(() => { clearTimeout(timer); reject(new Error(`the server exited:\n${output}`)) })
      })
      expect(await check()).toBe(0)

      const base = `http://127.0.0.1:${port}`
      const get = (path: string) => fetch(`${base}${path}`, { headers: { authorization: `Bearer ${BUNDLED_MANAGEMENT_KEY}` } })
      expect(await (await fetch(`${base}/health`)).json()).toEqual({ status: 'ok' })
      expect(await (await fetch(`${base}/ready`)).json()).toEqual({ status: 'ready' })
      expect((await (await get('/v1/providers')).json()).data.length).toBeGreaterThan(20)
      expect((await (await get('/v1/endpoints/zdr')).json()).data.length).toBeGreaterThan(20)
      expect((await (await get('/v1/organization/members?limit=100')).json()).total_count).toBe(130)
      // The runbook the alerts link to, from the image's own copy.
      expect(await (await fetch(`${base}/runbook`)).text()).toContain('<h2 id="directorychangerefused">')
    } finally {
      server.kill('SIGTERM')
    }
    expect(await exited).toBe(0)
    expect(output).not.toContain(BUNDLED_MANAGEMENT_KEY)
    expect(output.trim().split('\n').every((line) => JSON.parse(line))).toBe(true)
  })
})
