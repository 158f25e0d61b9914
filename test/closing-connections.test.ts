import { spawn, type ChildProcess } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { availableParallelism, setPriority } from 'node:os'
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest'
import { BUNDLED_MANAGEMENT_KEY, startServer } from './process.js'
import { exchange, openConnection, parseAnswer } from './raw-http.js'

// What a client sees when the server process closes its connection: at the end of a drain, on a
// machine whose CPU other processes keep busy, and after an answer given before the request's body
// had all arrived. Resets are what a load balancer in front turns into 502s.

const REQUESTS = ['/v1/providers', '/v1/endpoints/zdr', '/v1/organization/members?offset=0&limit=100']
  .map((path) => `GET ${path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer ${BUNDLED_MANAGEMENT_KEY}\r\n\r\n`)

/**
 * The server with rate limits off (the clients here send more than a key's minute allows), and a grace
 * period no drain here comes near, however slow the machine: what is tested is what clients see. A
 * test that fails before its server has exited does not leave it running.
 */
async function startUnlimited () {
  const server = await startServer({ RATE_LIMIT_PER_MINUTE: '0', RATE_LIMIT_ANONYMOUS_PER_MINUTE: '0', SHUTDOWN_GRACE_MS: '60000' })
  onTestFinished(() => { server.process.kill('SIGKILL') })
  return server
}

/** The state letter of a process (R running, S sleeping, T stopped...), from /proc. */
const processState = (pid: number) => readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '')[0]

const portOfUrl = (url: string) => Number(new URL(url).port)

/** How one connection's requests fared, counted from the client's side. */
interface ClientTally {
  /** Statuses of the answers, with `close` when the answer said `Connection: close`. */
  answers: string[]
  /** The request outstanding when the connection closed or was reset: what it was, and when it was written. */
  lost?: { beforeSigterm: boolean, description: string }
  ended: Promise<void>
}

/** When SIGTERM was sent, by performance.now(). */
interface Clock { signalledAt?: number }

/**
 * A keep-alive client on a raw socket: it writes its next request as soon as the previous answer has
 * arrived (the two lists and a member page, in turn), until an answer says `Connection: close`.
 */
function keepAliveClient (port: number, first: number, clock: Clock, onAnswer: (closing: boolean) => void): ClientTally {
  const socket = connect(port, '127.0.0.1')
  let text = ''
  let outstanding: { request: string, writtenAt: number } | undefined
  let ending = 'closed'
  let next = first
  const send = () => {
    const request = REQUESTS[next++ % REQUESTS.length]!
    outstanding = { request, writtenAt: performance.now() }
    socket.write(request)
  }
  const tally: ClientTally = {
    answers: [],
    ended: new Promise((resolve) => socket.on('close', () => {
      if (outstanding) {
        const { request, writtenAt } = outstanding
        const beforeSigterm = clock.signalledAt === undefined || writtenAt < clock.signalledAt
        const when = clock.signalledAt === undefined ? 'before SIGTERM was sent' : `${Math.abs(clock.signalledAt - writtenAt).toFixed(1)} ms ${beforeSigterm ? 'before' : 'after'} SIGTERM`
        tally.lost = { beforeSigterm, description: `connection ${first}, request ${tally.answers.length + 1} (${request.slice(0, request.indexOf(' HTTP/'))}), written ${when}: no answer, the connection ${ending}` }
      }
      resolve()
    }))
  }
  socket.on('connect', send)
  socket.on('error', (error: NodeJS.ErrnoException) => { ending = `ended by ${error.code ?? error.message}` })
  socket.on('data', (chunk: Buffer) => {
    text += chunk.toString('latin1')
    for (let answer = parseAnswer(text); answer !== undefined; answer = parseAnswer(text)) {
      text = text.slice(text.indexOf('\r\n\r\n') + 4 + answer.body.length)
      outstanding = undefined
      const closing = answer.headers.connection === 'close'
      tally.answers.push(`${answer.status}${closing ? ' close' : ''}`)
      onAnswer(closing)
      if (closing) return
      send()
    }
  })
  return tally
}

describe('a drain on a busy machine', () => {
  // Processes that keep every core busy for as long as these tests run, and the server below them.
  let loops: ChildProcess[] = []
  beforeAll(() => {
    loops = Array.from({ length: availableParallelism() }, () => spawn(process.execPath, ['-e', 'for (;;);'], { stdio: 'ignore' }))
  })
  afterAll(() => { for (const loop of loops) loop.kill('SIGKILL') })

  /**
   * One drain: 50 keep-alive clients, SIGTERM a second after the first answer (some connections may
   * still wait for the server to take them: it takes one a turn of its event loop), and a request
   * half-written on a new connection just before the signal, completed once the drain has visibly
   * begun (an answer said `Connection: close`).
   */
  async function drain () {
    const server = await startUnlimited()
    // Below the busy processes: the server's event loop is late, as on a node whose CPU is taken.
    setPriority(server.process.pid!, 10)
    const port = portOfUrl(server.url)
    const clock: Clock = {}
    let served!: () => void
    const serving = new Promise<void>((resolve) => { served = resolve })
    let closing!: () => void
    const closingSeen = new Promise<void>((resolve) => { closing = resolve })
    const clients = Array.from({ length: 50 }, (_, i) => keepAliveClient(port, i, clock, (close) => {
      served()
      if (close) closing()
    }))
    // The setting: a second of this load, then the signal.
    await serving
    await new Promise((resolve) => setTimeout(resolve, 1000))

    const half = await openConnection(port)
    half.on('error', () => {})
    const request = REQUESTS[0]!
    half.write(request.slice(0, 30))
    clock.signalledAt = performance.now()
    server.process.kill('SIGTERM')

    const allEnded = Promise.all(clients.map((client) => client.ended))
    await Promise.race([closingSeen, allEnded])
    // Reset already (the server closed it), or answered now.
    const halfAnswer = half.destroyed ? undefined : await exchange(half, request.slice(30))
    half.destroy()
    await allEnded
    const exit = await server.exited
    const answers = clients.flatMap((client) => client.answers)
    return {
      exit,
      lostWrittenBeforeSigterm: clients.flatMap((client) => client.lost?.beforeSigterm === true ? [client.lost.description] : []),
      statusesOtherThan200: answers.filter((answer) => !answer.startsWith('200')),
      lastAnswerWithoutClose: clients.flatMap((client, i) => client.lost === undefined && !client.answers.at(-1)?.endsWith('close') ? [`connection ${i}: its last answer, ${client.answers.at(-1) ?? 'none'}, did not say Connection: close`] : []),
      halfWrittenRequest: halfAnswer ? `${halfAnswer.status}${halfAnswer.headers.connection === 'close' ? ' close' : ''}` : 'no answer'
    }
  }

  it('loses no request written before SIGTERM, and answers one completed after it, over 8 drains', async () => {
    const drains = []
    for (let i = 0; i < 8; i++) drains.push(await drain())
    expect(drains).toEqual(Array(8).fill({ exit: 0, lostWrittenBeforeSigterm: [], statusesOtherThan200: [], lastAnswerWithoutClose: [], halfWrittenRequest: '200 close' }))
  })
})

describe('a drain that starts while the server cannot run', () => {
  // The kernel completes a connection without the server: a client whose connection the server has
  // not taken yet (it is stopped here; under load, it takes one a turn of its event loop) has already
  // written its request. Closing the listening socket then would reset every such connection.
  it('answers every request on a connection made before SIGTERM, though the server had not taken it yet', async () => {
    const server = await startUnlimited()
    const port = portOfUrl(server.url)
    server.process.kill('SIGSTOP')
    // kill() returns before the process has stopped: on a busy machine it may still take and answer a
    // first connection (once in CI, answered without `Connection: close`). Stopped is state T.
    await expect.poll(() => processState(server.process.pid!), { interval: 1 }).toBe('T')
    let answers: Array<ReturnType<typeof exchange>> = []
    try {
      const sockets: Socket[] = await Promise.all(Array.from({ length: 20 }, () => openConnection(port)))
      answers = sockets.map((socket, i) => exchange(socket, REQUESTS[i % REQUESTS.length]!))
      server.process.kill('SIGTERM')
    } finally {
      server.process.kill('SIGCONT')
    }
    const seen = (await Promise.all(answers)).map((answer) => answer ? `${answer.status}${answer.headers.connection === 'close' ? ' close' : ''}` : 'reset')
    expect(seen).toEqual(Array(20).fill('200 close'))
    expect(await server.exited).toBe(0)
  })
})

describe('an answer given before the body has arrived', () => {
  // No operation takes a body: a large one is answered 413 at its headers, while the client is still
  // sending it. Closing the connection at once, the rest unread, resets it, and a client still writing
  // then sees EPIPE instead of the answer. 8 MiB is more than a loopback connection's buffers hold.
  it('answers 413 to every fetch that POSTs 2 or 8 MiB of JSON, not a reset', async () => {
    const server = await startUnlimited()
    const outcomes: Record<string, number> = {}
    for (const mebibytes of [2, 8]) {
      const body = JSON.stringify({ data: 'x'.repeat(mebibytes * 1024 * 1024) })
      for (let i = 0; i < 10; i++) {
        const outcome = await fetch(`${server.url}/v1/providers`, { method: 'POST', headers: { authorization: `Bearer ${BUNDLED_MANAGEMENT_KEY}`, 'content-type': 'application/json' }, body })
          .then(async (res) => `${res.status} ${JSON.stringify(await res.json())}`, (error: Error & { cause?: { code?: string } }) => error.cause?.code ?? error.message)
        const key = `${mebibytes} MiB: ${outcome}`
        outcomes[key] = (outcomes[key] ?? 0) + 1
      }
    }
    expect(outcomes).toEqual({
      '2 MiB: 413 {"error":{"code":413,"message":"Request body is too large"}}': 10,
      '8 MiB: 413 {"error":{"code":413,"message":"Request body is too large"}}': 10
    })
    server.process.kill('SIGTERM')
    expect(await server.exited).toBe(0)
  })
})
