import { afterAll, afterEach } from 'vitest'
import { takeConformanceFailures } from './conformance.js'
import { closeFileApps } from './helper.js'
import { stopLeftovers } from './process.js'

// A response that strays from the served OpenAPI document fails the test that provoked it.
afterEach(() => {
  const failures = takeConformanceFailures()
  if (failures.length > 0) throw new Error(`responses that do not match the OpenAPI document:\n${failures.join('\n')}`)
})

afterAll(closeFileApps)

// No process a test file started (test/process.ts) outlives the file: one still running once the file's
// tests and hooks are done is killed here, after them (vitest runs afterAll hooks last registered
// first), and fails the file, which would otherwise leave it running, orphaned, after the worker ends.
afterAll(async () => {
  const left = await stopLeftovers()
  if (left.length > 0) throw new Error(`still running after the file's tests and hooks, killed now:\n${left.join('\n')}`)
})
