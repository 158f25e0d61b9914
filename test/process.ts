import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { PATIENCE_MS } from './patience.js'

export interface RunningServer {
  /** The server's process, or its wrapper's, whose kill() then signals the server under it. */
  process: ChildProcess
  url: string
  output: () => string
  /** Resolves with the exit code (or signal) once the process has ended. */
  exited: Promise<number | string>
}

/**
 * Starts the built server (dist/server.js) as `npm start` does, on a free port, through `wrapper` when given.
 * A server the test leaves running is killed once its file is done, and fails it (test/setup.ts).
 */
export function startServer (env: Record<string, string> = {}, { wrapper = [], onSpawn }: { wrapper?: string[], onSpawn?: (child: ChildProcess) => void } = {}): Promise<RunningServer> {
  // A wrapper runs it (faketime, for a replica whose clock is off).
  const [command, ...args] = [...wrapper, process.execPath, 'dist/server.js']
  const child = spawnMarked(command!, args, { PATH: process.env.PATH ?? '', PORT: '0', ...env }, { stdio: ['ignore', 'pipe', 'pipe'] })
  if (wrapper.length > 0) signalUnder(child)
  let output = ''
  child.stdout!.on('data', (chunk) => { output += chunk })
  child.stderr!.on('data', (chunk) => { output += chunk })
  const exited = once(child, 'exit').then(([code, signal]) => (code ?? signal) as number | string)
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      // A server that never said it listens must not outlive the test run.
      child.kill('SIGKILL')
      reject(new Error(`server did not start:\n${output}`))
    }, PATIENCE_MS)
    const onData = () => {
      const match = /Server listening at (http:\/\/[^"\s]+)/.exec(output)
      if (match) {
        clearTimeout(timer)
        child.stdout!.off('data', onData)
        resolve({ process: child, url: match[1]!, output: () => output, exited })
      }
    }
    child.stdout!.on('data', onData)
    exited.then(() => { clearTimeout(timer); reject(new Error(`server exited before listening:\n${output}`)) })
    child.once('error', (error) => { clearTimeout(timer); reject(new Error(`cannot run ${command}: ${error.message}`)) })
    try {
      onSpawn?.(child)
    } catch (error) {
      clearTimeout(timer)
      child.kill('SIGKILL')
      throw error
    }
  })
}

/**
 * Runs the server expecting it to refuse to start; answers its exit code and output. One that starts
 * after all is killed after PATIENCE_MS (code SIGKILL), not left serving past the test.
 */
export async function failToStart (env: Record<string, string>) {
  const child = spawnMarked(process.execPath, ['dist/server.js'], { PATH: process.env.PATH ?? '', PORT: '0', ...env })
  let output = ''
  child.stdout!.on('data', (chunk) => { output += chunk })
  child.stderr!.on('data', (chunk) => { output += chunk })
  const timer = setTimeout(() => child.kill('SIGKILL'), PATIENCE_MS)
  const [code, signal] = await once(child, 'exit')
  clearTimeout(timer)
  return { code: (code ?? signal) as number | string, output }
}

// Each process started here has STARTED_BY in its environment, with a value of this test file's own,
// and so has what it starts in turn (the server under a wrapper). Once the file's tests and hooks are
// done, what still has it is killed, wherever it stands in the process tree: a server whose test
// failed or ran out of time before its stop, whose start was still under way as the test ended, or
// whose stop signalled a wrapper and not the server under it; otherwise it would run on, orphaned,
// once vitest ends the worker. (Files run at once: the command line cannot tell one file's from another's.)
const STARTED_BY = 'VITEST_STARTED_BY'
const mark = `${process.pid}-${randomUUID()}`
const started = new Set<ChildProcess>()
let spawnedHere = false
const PROC = existsSync('/proc/self/environ')

function spawnMarked (command: string, args: string[], env: Record<string, string>, options: SpawnOptions = {}) {
  const child = spawn(command, args, { ...options, env: { ...env, [STARTED_BY]: mark } })
  started.add(child)
  child.once('exit', () => started.delete(child))
  child.once('error', () => started.delete(child))
  if (!spawnedHere) atWorkerEnd(killLeftovers)
  spawnedHere = true
  return child
}

/** The processes on this machine (Linux), with their parent's pid. */
function processes () {
  const found: Array<{ pid: number, ppid: number }> = []
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    try {
      // pid (comm) state ppid ...: comm may hold spaces and parentheses.
      const stat = readFileSync(`/proc/${name}/stat`, 'latin1')
      found.push({ pid: Number(name), ppid: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) })
    } catch {}
  }
  return found
}

/**
 * Makes `wrapper`'s kill() signal what runs under it: faketime forks the server and waits for it,
 * and passes no signal on; killed itself, it would leave the server running, and its files in /dev/shm.
 */
function signalUnder (wrapper: ChildProcess) {
  const signalWrapper = wrapper.kill.bind(wrapper)
  wrapper.kill = (signal) => {
    const all = PROC ? processes() : []
    const under: number[] = []
    for (let parents = wrapper.pid === undefined ? [] : [wrapper.pid]; parents.length > 0;) {
      parents = all.filter(({ ppid }) => parents.includes(ppid)).map(({ pid }) => pid)
      under.push(...parents)
    }
    if (under.length === 0) return signalWrapper(signal)
    for (const pid of under) {
      try { process.kill(pid, signal) } catch {}
    }
    return true
  }
}

/** This file's processes still running (their pid and command line); a zombie's environment reads empty. */
function leftovers () {
  if (!PROC) return [...started].filter((child) => child.exitCode === null && child.signalCode === null).map((child) => ({ pid: child.pid!, command: child.spawnargs.join(' ') }))
  const found: Array<{ pid: number, command: string }> = []
  for (const { pid } of processes()) {
    try {
      if (!readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0').includes(`${STARTED_BY}=${mark}`)) continue
      found.push({ pid, command: readFileSync(`/proc/${pid}/cmdline`, 'latin1').split('\0').join(' ').trim() })
    } catch {}
  }
  return found
}

function killLeftovers () {
  for (const { pid } of leftovers()) {
    try { process.kill(pid, 'SIGKILL') } catch {}
  }
}

/**
 * Kills this file's processes still running once its tests and hooks are done (test/setup.ts), and
 * answers what they were. One that a test is stopping gets a few seconds to end by itself first.
 */
export async function stopLeftovers (): Promise<string[]> {
  if (!spawnedHere) return []
  let left = leftovers()
  for (const end = Date.now() + 5000; left.length > 0 && Date.now() < end; left = leftovers()) await sleep(100)
  if (left.length === 0) return []
  killLeftovers()
  for (const end = Date.now() + PATIENCE_MS; leftovers().length > 0 && Date.now() < end;) await sleep(50)
  return left.map(({ pid, command }) => `${pid} ${command}`)
}

// And at the worker's end, for a server started after that: by a test that ran out of time, whose code
// goes on. Vitest ends a worker with SIGTERM, which runs no 'exit' listener: the listener below kills,
// then lets SIGTERM end the worker. Once a worker, whatever the files (the copies of this module) it runs.
const AT_WORKER_END = Symbol.for('model-gateway-directory: test/process.ts at the worker\'s end')
function atWorkerEnd (kill: () => void) {
  const global = globalThis as typeof globalThis & { [AT_WORKER_END]?: Set<() => void> }
  if (global[AT_WORKER_END] === undefined) {
    const kills = global[AT_WORKER_END] = new Set()
    const killAll = () => { for (const each of kills) each() }
    process.once('exit', killAll)
    const onTerm = () => {
      killAll()
      process.off('SIGTERM', onTerm)
      process.kill(process.pid, 'SIGTERM')
    }
    process.on('SIGTERM', onTerm)
  }
  global[AT_WORKER_END].add(kill)
}

// Ports for servers that must be told their port before they start (a HEALTHCHECK reads PORT; Redis
// and PostgreSQL restart on theirs). Taken below the kernel's range for listen(0) (32768 and up on
// Linux), where no other test's server can be given the same port between our check and our
// server's bind, and split between vitest's workers, which run test files at the same time.
const PORTS_PER_WORKER = 200
const FIRST_PORT = 20000 + (Number(process.env.VITEST_POOL_ID ?? 0) % 60) * PORTS_PER_WORKER
let nextPort = 0

/** A port of this worker's share that nobody listens on right now. */
export async function freePort () {
  for (let tries = 0; tries < PORTS_PER_WORKER; tries++) {
    const port = FIRST_PORT + (nextPort++ % PORTS_PER_WORKER)
    const server = createServer()
    const free = await new Promise<boolean>((resolve) => {
      server.once('error', () => resolve(false))
      server.listen(port, '127.0.0.1', () => resolve(true))
    })
    if (free) {
      server.close()
      await once(server, 'close')
      return port
    }
  }
  throw new Error(`no free port from ${FIRST_PORT} to ${FIRST_PORT + PORTS_PER_WORKER - 1}`)
}

/** The management key of Acme AI in the bundled fixtures (README, "Development keys"). */
export const BUNDLED_MANAGEMENT_KEY = 'sk-or-v1-dev-acme-mgmt-6f1d0c7a9b2e4f8c8d3a1b5e7c9f0a2d'
