import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { createLogStream } from '../src/log-stream.js'

describe('the log stream', () => {
  let dir: string
  let file: string
  let fd: number
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'log-stream-'))
    file = join(dir, 'out.log')
    fd = openSync(file, 'a')
  })
  afterEach(() => {
    closeSync(fd)
    rmSync(dir, { recursive: true, force: true })
  })

  it('holds lines until a batch is full, then writes them all, in order', () => {
    const stream = createLogStream(fd, 100)
    stream.write('{"n":1}\n')
    stream.write('{"n":2}\n')
    expect(readFileSync(file, 'utf8')).toBe('')
    const long = `{"pad":"${'x'.repeat(100)}"}\n`
    stream.write(long)
    expect(readFileSync(file, 'utf8')).toBe(`{"n":1}\n{"n":2}\n${long}`)
  })

  it('writes characters of several bytes as UTF-8, across batches', () => {
    const stream = createLogStream(fd, 64)
    const lines = ['{"name":"Zoë"}\n', '{"city":"東京"}\n', '{"emoji":"🦊"}\n', `{"long":"${'é'.repeat(40)}"}\n`]
    for (const line of lines) stream.write(line)
    stream.flush()
    expect(readFileSync(file, 'utf8')).toBe(lines.join(''))
  })

  it('writes what it holds when flushed', () => {
    const stream = createLogStream(fd, 16384)
    stream.write('{"n":1}\n')
    stream.flush()
    stream.flush()
    expect(readFileSync(file, 'utf8')).toBe('{"n":1}\n')
  })
})
