import { availableParallelism } from 'node:os'
import { defineConfig } from 'vitest/config'

/**
 * The files that run a program other than Node.js (PostgreSQL, Redis, PgBouncer, Chromium, Prometheus,
 * faketime, npm) or keep every core busy on purpose. The others are the quick tier, `npm run test:quick`.
 */
const PROGRAMS = [
  'test/repositories/sources/postgres*.test.ts',
  'test/repositories/sources/copy-rows.test.ts',
  'test/repositories/{key-expiry,member-list,vendor-fields}.test.ts',
  'test/cli/{db,key-lifetimes,key-commands}.test.ts',
  'test/server-postgres.test.ts',
  'test/postgres-shapes.test.ts',
  'test/extra-kind.test.ts',
  'test/docs-quotes.test.ts',
  'test/docs-page.test.ts',
  'test/deploy/{compose,monitoring}.test.ts',
  'test/server.test.ts',
  'test/plugins/{cors-browser,rate-limit}.test.ts',
  'test/sdk.test.ts',
  'test/container.test.ts',
  'test/build.test.ts',
  'test/ci-run.test.ts',
  'test/closing-connections.test.ts',
  'test/live-data.test.ts',
  'test/npm-scripts.test.ts'
]

export default defineConfig({
  test: {
    // Tests that run the real process need dist/ built from the current sources.
    globalSetup: ['test/global-setup.ts'],
    // Checks every response a test provoked against the served OpenAPI document.
    setupFiles: ['test/setup.ts'],
    // The JSON report lets .ci/run print how many tests ran.
    reporters: ['default', 'json'],
    outputFile: { json: 'reports/vitest.json' },
    // Most files spend their time waiting on a server, a database or a timer rather than on a core:
    // two more files than cores run at once (vitest's default is one fewer). Figures: CONTRIBUTING.md.
    maxWorkers: availableParallelism() + 2,
    // Bounds for a test or a hook that is stuck, not for one that is slow: each waits on the events
    // it expects (test/patience.ts), and a busy machine takes many times its usual time.
    testTimeout: 180_000,
    hookTimeout: 180_000,
    projects: [
      // vitest queues the projects' files in the order of their names, and each project's longest first
      // (the largest, on a first run): the long files of 'programs' start first, the quick fill in.
      // One PostgreSQL server for the run (test/shared-postgres.ts), started only when a file here runs.
      { extends: true, test: { name: 'programs', include: PROGRAMS, globalSetup: ['test/shared-postgres.ts'] } },
      { extends: true, test: { name: 'quick', include: ['test/**/*.test.ts'], exclude: PROGRAMS } }
    ]
  }
})
