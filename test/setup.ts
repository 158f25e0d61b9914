import { afterAll, afterEach } from 'vitest'
import { takeConformanceFailures } from './conformance.js'
import { closeFileApps } from './helper.js'

// A response that strays from the served OpenAPI document fails the test that provoked it.
afterEach(() => {
  const failures = takeConformanceFailures()
  if (failures.length > 0) throw new Error(`responses that do not match the OpenAPI document:\n${failures.join('\n')}`)
})

afterAll(closeFileApps)
