import { describe, expect, it } from 'vitest'
import { bearer, build, captureLogs, failingSnapshots, KEYS, makeData, sha256 } from './helper.js'

const TIME = /,"time":[0-9]+,/

/** `text` with each hex letter written as its percent escape (`%66` for `f`), as a client may send a key. */
function encodeHexLetters (text: string, escapePrefix = '%6') {
  return text.replace(/[a-f]/g, (letter) => `${escapePrefix}${letter.charCodeAt(0) - 0x60}`)
}

describe('access line', () => {
  it('is the very line pino writes for the same fields, escapes included', async () => {
    const logs = captureLogs()
    const app = build({ log: logs.log })
    // A URL that JSON must escape (a backslash), and characters the client percent-encodes.
    const url = '/v1/providers?q=a\\b%22é'
    const res = await app.inject({ url, headers: bearer(KEYS.alphaStandard) })
    expect(res.statusCode).toBe(200)
    expect(logs.raw).toHaveLength(1)
    const line = logs.lines[0]!
    expect(line).toMatchObject({ level: 30, reqId: res.headers['x-request-id'], method: 'GET', url: '/v1/providers?q=a\\b%22%C3%A9', statusCode: 200, msg: 'request completed' })

    // pino's own line for the same fields, in the same order.
    app.log.info({ reqId: line.reqId, method: line.method, url: line.url, statusCode: line.statusCode, responseTime: line.responseTime }, 'request completed')
    expect(logs.raw).toHaveLength(2)
    expect(logs.raw[0]!.replace(TIME, ',"time":0,')).toBe(logs.raw[1]!.replace(TIME, ',"time":0,'))
  })

  it('follows the level: none below info', async () => {
    const logs = captureLogs('warn')
    const app = build({ log: logs.log })
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(200)
    app.log.level = 'info'
    expect((await app.inject({ url: '/v1/providers', headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(200)
    expect(logs.lines.map((line) => [line.msg, line.statusCode])).toEqual([['request completed', 200]])
  })

  // Keys are sent in a URL by mistake (or by a client that puts them in the query); the access line
  // goes to a log collector that more people read than hold keys.
  const key = `sk-or-v1-${'0f1e'.repeat(16)}`
  const hash = sha256(key)
  const secrets = [key.slice('sk-or-v1-'.length), hash]

  it.each([
    ['in the path', `/${key}`, {}, 404, '/[redacted]'],
    ['in the query', `/v1/providers?key=${key}`, bearer(KEYS.alphaStandard), 200, '/v1/providers?key=[redacted]'],
    ['as a hash in a query parameter that refuses it', `/v1/organization/members?offset=${hash}`, bearer(KEYS.alphaManagement), 400, '/v1/organization/members?offset=[redacted]'],
    ['in a URL that cannot be decoded', `/%E0%A4%A/${key}`, {}, 400, '/%E0%A4%A/[redacted]'],
    ['with its first letter percent-encoded', `/v1/providers?key=%73${key.slice(1)}`, bearer(KEYS.alphaStandard), 200, '/v1/providers?key=[redacted]'],
    ['with its hex letters percent-encoded', `/v1/providers?key=${encodeHexLetters(key)}`, bearer(KEYS.alphaStandard), 200, '/v1/providers?key=[redacted]'],
    ['split across encodings', `/v1/providers?a=1&key=s%6b%2Dor-v1-${key.slice(9, 40)}${encodeHexLetters(key.slice(40), '%4')}&b=%7e`, bearer(KEYS.alphaStandard), 200, '/v1/providers?a=1&key=[redacted]&b=~'],
    ['encoded beside malformed percent sequences', `/v1/providers?x=%zz%7&key=%%73${encodeHexLetters(key.slice(1))}%E0%A4%A`, bearer(KEYS.alphaStandard), 200, '/v1/providers?x=%zz%7&key=%[redacted]%E0%A4%A'],
    ['encoded, in a URL that cannot be decoded', `/%E0%A4%A/%73${key.slice(1)}`, {}, 400, '/%E0%A4%A/[redacted]'],
    ['encoded, in the path', `/${encodeHexLetters(key)}`, {}, 404, '/[redacted]'],
    ['past the part of a long URL the line keeps', `/v1/providers?q=${'x'.repeat(1000)}&key=${key}`, bearer(KEYS.alphaStandard), 200, `/v1/providers?q=${'x'.repeat(1000)}&key=[redacted]…`]
  ])('keeps a key sent %s out of the line, and out of the answer', async (_case, url, headers, status, logged) => {
    const logs = captureLogs()
    const app = build({ log: logs.log })
    const res = await app.inject({ url, headers })
    expect(res.statusCode).toBe(status)
    expect(logs.lines).toEqual([expect.objectContaining({ url: logged, statusCode: status, msg: 'request completed' })])
    for (const secret of secrets) {
      expect(logs.raw.join('\n').toLowerCase()).not.toContain(secret.slice(0, 32))
      expect(res.body.toLowerCase()).not.toContain(secret.slice(0, 32))
    }
    // A key as the client encoded it is no less a key (the hash case sends none).
    const sentKey = /(s|%73)(k|%6b)(-|%2d)or.*?(?=&|$|%e0)/i.exec(url)?.[0]
    if (sentKey) {
      expect(logs.raw.join('\n')).not.toContain(sentKey.slice(-24))
      expect(res.body).not.toContain(sentKey.slice(-24))
    }
  })

  it('keeps a percent-encoded key out of the error logged for a 5xx', async () => {
    const logs = captureLogs()
    const url = `/v1/providers?key=%73${encodeHexLetters(key.slice(1))}`
    const app = build({ log: logs.log, snapshots: failingSnapshots(makeData(), new Error(`cannot serve ${url}`)) })
    expect((await app.inject({ url, headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(500)
    expect(logs.lines.find((line) => line.msg === 'request failed')).toMatchObject({ err: { message: 'cannot serve /v1/providers?key=[redacted]' } })
    expect(logs.raw.join('\n')).not.toContain(url.slice(-24))
  })

  it('keeps a key out of the error logged for a 5xx, whatever the error quotes', async () => {
    const logs = captureLogs()
    const url = `/v1/providers?key=${key}`
    const app = build({ log: logs.log, snapshots: failingSnapshots(makeData(), new Error(`cannot serve ${url}`)) })
    expect((await app.inject({ url, headers: bearer(KEYS.alphaStandard) })).statusCode).toBe(500)
    expect(logs.lines.find((line) => line.msg === 'request failed')).toMatchObject({ err: { message: 'cannot serve /v1/providers?key=[redacted]' } })
    expect(logs.raw.join('\n')).not.toContain(secrets[0])
  })

  it('keeps a key out of any line that logs a request, as Fastify\'s own lines do', async () => {
    const logs = captureLogs()
    const app = build({ log: logs.log })
    await app.ready()
    app.log.info({ req: { method: 'GET', url: `/${key}` } }, 'a request')
    expect(logs.lines.at(-1)).toMatchObject({ req: { method: 'GET', url: '/[redacted]' } })
    expect(logs.raw.join('\n')).not.toContain(secrets[0])
  })
})
