import { describe, expect, it } from 'vitest'
import { bearer, build, captureLogs, KEYS } from './helper.js'

const TIME = /,"time":[0-9]+,/

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
})
