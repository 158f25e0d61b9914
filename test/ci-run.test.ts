import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { cp, mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, beforeEach, describe, expect, it, onTestFinished } from 'vitest'
import { PATIENCE_MS } from './patience.js'

// .ci/run from a folder of its own, holding nothing else: were it to run CI instead of answering, it
// would run npm ci there, never in this checkout (whose node_modules the other tests use).
let dir: string
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'ci-run-'))
  await cp('.ci/run', join(dir, '.ci/run'))
})
afterEach(() => rm(dir, { recursive: true, force: true }))

async function ciRun (...args: string[]) {
  const child = spawn('bash', [join(dir, '.ci/run'), ...args], { detached: true, env: { PATH: process.env.PATH ?? '' }, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk) => { stdout += chunk })
  child.stderr.on('data', (chunk) => { stderr += chunk })
  const exit = once(child, 'exit') as Promise<[number | null]>
  let running = true
  void exit.then(() => { running = false })
  const stop = () => { if (running) process.kill(-child.pid!, 'SIGKILL') }
  onTestFinished(stop)
  const timer = setTimeout(stop, PATIENCE_MS)
  const [code] = await exit
  clearTimeout(timer)
  return { code, stdout, stderr }
}

describe('.ci/run', () => {
  it.each(['--help', '-h'])('%s prints what it does and exits 0, installing and running nothing', async (flag) => {
    const { code, stdout, stderr } = await ciRun(flag)
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' })
    expect(stdout).toContain('usage: .ci/run [--help]\n')
    expect(stdout).toContain('npm ci && npm test')
    expect(await readdir(dir)).toEqual(['.ci'])
  })

  it('refuses an argument it does not take, in one line that points to --help, exit 2', async () => {
    const { code, stdout, stderr } = await ciRun('--fast')
    expect({ code, stdout, stderr }).toEqual({ code: 2, stdout: '', stderr: "unknown option '--fast'; see .ci/run --help\n" })
    expect(await readdir(dir)).toEqual(['.ci'])
  })
})
