import { readFile } from 'node:fs/promises'
import { describe, expect, it } from 'vitest'
import { oldNodeWarning } from '../src/node-version.js'

describe('the warning of a Node.js too old', () => {
  it('starts below the oldest major of package.json\'s engines, and names where Node.js 24 comes from', async () => {
    const { engines } = JSON.parse(await readFile('package.json', 'utf8')) as { engines: { node: string } }
    const oldest = Number(/^>=(\d+)$/.exec(engines.node)?.[1])
    expect(oldNodeWarning(`${oldest}.0.0`)).toBeUndefined()
    expect(oldNodeWarning(`${oldest + 2}.1.0`)).toBeUndefined()
    expect(oldNodeWarning(`${oldest - 1}.7.3`)).toBe(`warning: Node.js ${oldest - 1}.7.3 is older than this service supports (${oldest} or later) and past its end of life; ` +
      'Node.js 24 comes from nvm use (.nvmrc), or from the npm registry without one (README.md, "Node.js 24 from the npm registry")')
  })
})
