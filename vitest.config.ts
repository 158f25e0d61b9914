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
    testTimeout: 20000
  }
})
