// A process manager, or `kill` in another terminal, signals the process it started: npm, not the
// program of the script. These run the scripts as a user does and signal npm alone.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { connect } from 'node:net'
import { describe, expect, it, onTestFinished } from 'vitest'
import { PATIENCE_MS } from './patience.js'

/**
 * Runs `npm <args>` in a process group of its own, which a script's programs join (and stay in when npm
 * is gone): the group is killed after the test, whatever it left running.
 */
function runNpm (args: string[], env: Record<string, string>) {
  const npm = spawn('npm', args, { detached: true, env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  onTestFinished(() => { try { process.kill(-npm.pid!, 'SIGKILL') } catch {} })
  let output = ''
  npm.stdout.on('data', (chunk) => { output += chunk })
  npm.stderr.on('data', (chunk) => { output += chunk })
  const exited = once(npm, 'exit').then(([code, signal]) => (code ?? signal) as number | string)
  /** Resolves with what `pattern` matched once npm's output has it. */
  const says = (pattern: RegExp) => new Promise<RegExpExecArray>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`npm ${args.join(' ')} never said ${pattern}:\n${output}`)), PATIENCE_MS)
    const onData = () => {
      const match = pattern.exec(output)
      if (match) { clearTimeout(timer); resolve(match) }
    }
    npm.stdout.on('data', onData)
    npm.stderr.on('data', onData)
  })
  return { npm, exited, says, output: () => output }
}

/** Whether any process of the group `pgid` is still there. */
function groupAlive (pgid: number) {
  try {
    process.kill(-pgid, 0)
    return true
  } catch {
    return false
  }
}

/** Resolves once the group `pgid` has no process left, or says which were left after PATIENCE_MS. */
async function groupGone (pgid: number) {
  const deadline = Date.now() + PATIENCE_MS
  while (groupAlive(pgid)) {
    if (Date.now() > deadline) throw new Error(`processes of npm's group ${pgid} still running ${PATIENCE_MS} ms after npm was signalled`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

/** Whether something accepts connections on `port` of 127.0.0.1. */
function listening (port: number) {
  return new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1')
    socket.once('connect', () => { socket.destroy(); resolve(true) })
    socket.once('error', () => resolve(false))
  })
}

describe('npm start, signalled as a process manager does', () => {
  it.each(['SIGTERM', 'SIGINT'] as const)('%s to npm drains the server, which exits, and npm with it', async (signal) => {
    const run = runNpm(['start'], { PORT: '0' })
    const [, port] = await run.says(/Server listening at http:\/\/127\.0\.0\.1:([0-9]+)/)
    run.npm.kill(signal)
    await groupGone(run.npm.pid!)
    expect(await run.exited).toBe(0)
    expect(run.output()).toContain(`"signal":"${signal}","msg":"shutting down"`)
    expect(await listening(Number(port))).toBe(false)
  })
})

describe('npm run db, signalled as a process manager does', () => {
  it('SIGTERM to npm ends the command, which leaves nothing running', async () => {
    // A database that never answers: the command retries until DATABASE_CONNECT_TIMEOUT_MS, long past the test.
    const run = runNpm(['run', 'db', '--', 'migrate'], { DATABASE_URL: 'postgresql://directory@127.0.0.1:1/directory', DATABASE_CONNECT_TIMEOUT_MS: String(10 * PATIENCE_MS) })
    await run.says(/127\.0\.0\.1:1/)
    run.npm.kill('SIGTERM')
    await groupGone(run.npm.pid!)
    expect(await run.exited).not.toBe(0)
  })
})
