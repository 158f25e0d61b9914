import { fileURLToPath } from 'node:url'
import envSchema from 'env-schema'
import { Type, type Static } from '@sinclair/typebox'

/** The data set shipped with the service, used when FIXTURES_DIR is not set. */
export const BUNDLED_FIXTURES_DIR = fileURLToPath(new URL('../fixtures', import.meta.url))

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const
type LogLevel = (typeof LOG_LEVELS)[number]

const ConfigSchema = Type.Object({
  HOST: Type.String({ default: '127.0.0.1', minLength: 1 }),
  PORT: Type.Integer({ default: 3000, minimum: 0, maximum: 65535 }),
  // A plain enum, so that a wrong value gets one error line instead of one per allowed value.
  LOG_LEVEL: Type.Unsafe<LogLevel>({ type: 'string', enum: LOG_LEVELS, default: 'info' }),
  FIXTURES_DIR: Type.String({ default: BUNDLED_FIXTURES_DIR, minLength: 1 }),
  SHUTDOWN_GRACE_MS: Type.Integer({ default: 10000, minimum: 0, description: 'How long in-flight requests may run after SIGTERM' })
})

export type Config = Static<typeof ConfigSchema>

/** Reads the environment; throws with a message naming the variable when a value is out of bounds. */
export function loadConfig (env: NodeJS.ProcessEnv = process.env): Config {
  return envSchema<Config>({ schema: ConfigSchema, data: env, dotenv: false })
}
