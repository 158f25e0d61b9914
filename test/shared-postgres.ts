import type { TestProject } from 'vitest/node'
import { startPostgres } from './postgres.js'

/**
 * The globalSetup of the vitest project whose files share one PostgreSQL server (vitest.config.ts):
 * started once for the run, rather than a server per file, with the template of migrated databases
 * made before any file runs (files running side by side would race to make it). sharedPostgres()
 * hands a file databases on it.
 */
export default async function setup (project: TestProject) {
  const server = await startPostgres()
  try {
    await server.prepareTemplate()
  } catch (error) {
    await server.close()
    throw error
  }
  project.provide('sharedPostgresPort', server.port)
  return () => server.close()
}
