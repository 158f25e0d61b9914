import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Tests that run the real process need dist/ built from the current sources.
    globalSetup: ['test/global-setup.ts'],
    // Checks every response a test provoked against the served OpenAPI document.
    setupFiles: ['test/setup.ts'],
    // The JSON report lets .ci/run print how many tests ran.
    reporters: ['default', 'json'],
    outputFile: { json: 'reports/vitest.json' },
    // Bounds for a test or a hook that is stuck, not for one that is slow: each waits on the events
    // it expects (test/patience.ts), and a busy machine takes many times its usual time.
    testTimeout: 180_000,
    hookTimeout: 180_000
  }
})
