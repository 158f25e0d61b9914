import { fileURLToPath } from 'node:url'
import { Type, type Static } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import { describeValueError } from './schemas/describe-error.js'

/** The data set shipped with the service, used when FIXTURES_DIR is not set. */
export const BUNDLED_FIXTURES_DIR = fileURLToPath(new URL('../fixtures', import.meta.url))

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const

const ConfigSchema = Type.Object({
  // A host name or an IPv4/IPv6 address: whatever else is a typo.
  HOST: Type.String({ default: '127.0.0.1', pattern: '^[A-Za-z0-9.:-]+$' }),
  PORT: Type.Integer({ default: 3000, minimum: 0, maximum: 65535 }),
  LOG_LEVEL: Type.Union(LOG_LEVELS.map((level) => Type.Literal(level)), { default: 'info' }),
  FIXTURES_DIR: Type.String({ default: BUNDLED_FIXTURES_DIR, minLength: 1 }),
  SHUTDOWN_GRACE_MS: Type.Integer({ default: 10000, minimum: 0, description: 'How long in-flight requests may run after SIGTERM' }),
  // Above the idle timeout of the load balancers usually in front (60 s for AWS ALB and nginx), so
  // that the balancer, not us, closes an idle pooled connection: closing it ourselves races a
  // request the balancer may be sending on it. Fastify's default.
  KEEP_ALIVE_TIMEOUT_MS: Type.Integer({ default: 72000, minimum: 1, description: 'How long a connection may stay idle' }),
  HEADERS_TIMEOUT_MS: Type.Integer({ default: 10000, minimum: 1, description: 'How long a client may take to send a request\'s headers' }),
  REQUEST_TIMEOUT_MS: Type.Integer({ default: 30000, minimum: 1, description: 'How long a client may take to send a whole request' }),
  MAX_CONNECTIONS: Type.Integer({ default: 8000, minimum: 1, description: 'Connections open at once; more are closed on arrival' })
})

type Config = Static<typeof ConfigSchema>

/**
 * Reads the settings from the environment (an empty variable counts as unset); throws with a
 * message naming the variable when a value is wrong. TypeBox, which checks everything else,
 * checks these too: no second validator to load at start.
 */
export function loadConfig (env: NodeJS.ProcessEnv = process.env): Config {
  const given = Object.fromEntries(
    Object.entries(ConfigSchema.properties).flatMap(([name, schema]) => {
      const text = env[name]
      if (!text) return []
      // Only whole decimal numbers become integers ("3.5" must not quietly become 3).
      return [[name, schema.type === 'integer' && /^-?[0-9]+$/.test(text) ? Number(text) : text]]
    })
  )
  const config = Value.Default(ConfigSchema, given)
  const error = Value.Errors(ConfigSchema, config).First()
  if (error) throw new Error(`invalid setting ${describeValueError(error)}`)
  const valid = config as Config
  // Node.js checks this pair only when both are given to createServer; a request cannot take less
  // time than its own headers.
  if (valid.HEADERS_TIMEOUT_MS > valid.REQUEST_TIMEOUT_MS) {
    throw new Error(`invalid setting HEADERS_TIMEOUT_MS: ${valid.HEADERS_TIMEOUT_MS} is above REQUEST_TIMEOUT_MS (${valid.REQUEST_TIMEOUT_MS})`)
  }
  return valid
}

export type ConnectionLimits = Pick<Config, 'KEEP_ALIVE_TIMEOUT_MS' | 'HEADERS_TIMEOUT_MS' | 'REQUEST_TIMEOUT_MS' | 'MAX_CONNECTIONS'>
