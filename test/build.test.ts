import { execFile } from 'node:child_process'
import { cp, mkdir, mkdtemp, readFile, rm, stat, symlink, unlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { promisify } from 'node:util'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { PATIENCE_MS } from './patience.js'

const run = promisify(execFile)

describe('node scripts/build.mjs --if-stale (what npm start, npm run key, check, db and docs run first)', () => {
  // A copy of what the build reads, built apart: the repository's own dist/ serves the other tests.
  let dir: string
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'build-'))
    for (const path of ['src', 'scripts/build.mjs', 'scripts/bundle.mjs', 'tsconfig.json', 'tsconfig.build.json', 'package.json', 'package-lock.json']) {
      await cp(path, join(dir, path), { recursive: true })
    }
    await symlink(resolve('node_modules'), join(dir, 'node_modules'))
  })
  afterEach(() => rm(dir, { recursive: true, force: true }))

  const build = () => run(process.execPath, [join(dir, 'scripts/build.mjs'), '--if-stale']).then(
    ({ stdout, stderr }) => ({ code: 0, output: stdout + stderr }),
    (error: { code: number, stdout: string, stderr: string }) => ({ code: error.code, output: error.stdout + error.stderr }))
  const check = async () => (await run(process.execPath, [join(dir, 'dist/cli/check.js'), '--data-dir', 'fixtures'])).stdout
  const builtAt = async () => (await stat(join(dir, 'dist/main.js'))).mtimeMs

  it('builds when there is no build, then not again until a source changes, then runs the changed source', async () => {
    expect(await build()).toEqual({ code: 0, output: '' })
    expect(await check()).toMatch(/: valid: /)
    const first = await builtAt()

    expect(await build()).toEqual({ code: 0, output: '' })
    expect(await builtAt()).toBe(first)

    const file = join(dir, 'src/cli/check.ts')
    await writeFile(file, (await readFile(file, 'utf8')).replace(': valid: ', ': valid (edited): '))
    expect(await build()).toEqual({ code: 0, output: '' })
    expect(await check()).toMatch(/: valid \(edited\): /)
  }, 120_000)

  it('answers --help with what it does, and builds nothing', async () => {
    const { stdout } = await run(process.execPath, [join(dir, 'scripts/build.mjs'), '--help'])
    expect(stdout).toContain('usage: npm run build\n')
    await expect(stat(join(dir, 'dist'))).rejects.toThrow('ENOENT')
  })

  it('says in one line to run npm ci, when the dependencies are not installed', async () => {
    await unlink(join(dir, 'node_modules'))
    const expected = { code: 1, output: 'cannot build: the dependencies are not installed (node_modules/.package-lock.json is missing): run npm ci\n' }
    expect(await build()).toEqual(expected)
    expect(await readFile('docs/troubleshooting.md', 'utf8'), 'docs/troubleshooting.md quotes it').toContain(`\n${expected.output}`)
    // A failed npm ci leaves a node_modules without what it writes last.
    await mkdir(join(dir, 'node_modules/typescript'), { recursive: true })
    expect(await build()).toEqual(expected)
    // npm ci --omit=dev, as the image's runtime stage runs it: complete, without the compiler.
    await writeFile(join(dir, 'node_modules/.package-lock.json'), '{}')
    expect(await build()).toEqual({ code: 1, output: 'cannot build: TypeScript is not installed (npm ci --omit=dev leaves it out): run npm ci\n' })
  })

  it('says so too before a command runs on a build left from before the dependencies went, not a stack trace', async () => {
    expect((await build()).code).toBe(0)
    await unlink(join(dir, 'node_modules'))
    // What npm run check runs: the build when stale, then the command.
    const result = await run('sh', ['-c', `"${process.execPath}" scripts/build.mjs --if-stale && "${process.execPath}" dist/cli/check.js`], { cwd: dir }).then(
      ({ stdout, stderr }) => ({ code: 0, output: stdout + stderr }),
      (error: { code: number, stdout: string, stderr: string }) => ({ code: error.code, output: error.stdout + error.stderr }))
    expect(result).toEqual({ code: 1, output: 'cannot build: the dependencies are not installed (node_modules/.package-lock.json is missing): run npm ci\n' })
  })

  it('runs a build that failed again, and says why again, rather than running what it left', async () => {
    const file = join(dir, 'src/truncate.ts')
    await writeFile(file, `${await readFile(file, 'utf8')}\nexport const broken: number = 'text'\n`)
    for (let tries = 0; tries < 2; tries++) {
      const { code, output } = await build()
      expect(code).not.toBe(0)
      expect(output).toContain("error TS2322: Type 'string' is not assignable to type 'number'.")
    }
  }, 120_000)
})

describe('scripts/bench.mjs (npm run bench)', () => {
  it('answers --help with what it measures and its settings, and measures nothing', async () => {
    const { stdout, stderr } = await run(process.execPath, ['scripts/bench.mjs', '--help'], { timeout: PATIENCE_MS })
    expect(stderr).toBe('')
    expect(stdout).toContain('usage: npm run bench\n')
    expect(stdout).toContain('BENCH_OUTPUT')
  })

  it('refuses an option it does not take, in one line that points to --help, exit 2', async () => {
    const error = await run(process.execPath, ['scripts/bench.mjs', '--quick'], { timeout: PATIENCE_MS }).catch((e: { code: number, stdout: string, stderr: string }) => e)
    expect(error).toMatchObject({ code: 2, stdout: '', stderr: "unknown option '--quick'; see npm run bench -- --help\n" })
  })

  // Its sections run for most of an hour; this one, a round of each command, in seconds. It broke
  // unseen once: the unbundled copy of the commands found no migrations/ above it.
  it('times each command of its Commands section, one round, every command exiting 0', async () => {
    const { stdout } = await run(process.execPath, ['scripts/bench-commands.mjs'], { env: { ...process.env, BENCH_COMMAND_ROUNDS: '1' }, timeout: 120_000 })
    expect(stdout).toMatch(/^## Commands\n/)
    expect(stdout).toContain('| `node dist/cli/mint-key.js list`, unbundled (one file per module) |')
  }, 150_000)
})
