import { fileURLToPath } from 'node:url'
import { Type, type Static } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import { describeErrors, nearest } from './schemas/describe-error.js'

/** The data set shipped with the service (its fixtures), used when DATA_DIR is not set. */
export const BUNDLED_FIXTURES_DIR = fileURLToPath(new URL('../fixtures', import.meta.url))

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const

const ConfigSchema = Type.Object({
  // A host name or an IPv4/IPv6 address: whatever else is a typo.
  HOST: Type.String({ default: '127.0.0.1', pattern: '^[A-Za-z0-9.:-]+$', expected: 'a host name or an IP address, such as 0.0.0.0 or ::' }),
  PORT: Type.Integer({ default: 3000, minimum: 0, maximum: 65535 }),
  LOG_LEVEL: Type.Union(LOG_LEVELS.map((level) => Type.Literal(level)), { default: 'info' }),
  DATA_DIR: Type.String({ default: BUNDLED_FIXTURES_DIR, minLength: 1 }),
  // When set, the data is in PostgreSQL, and DATA_DIR is not read.
  DATABASE_URL: Type.Optional(Type.String({ pattern: '^postgres(ql)?://', description: 'postgresql://user:password@host:port/database', expected: 'a PostgreSQL URL, such as postgresql://user:password@db.example:5432/directory' })),
  DATABASE_CONNECT_TIMEOUT_MS: Type.Integer({ default: 30000, minimum: 0, description: 'How long an unreachable database is retried at start' }),
  // Where notifications cannot arrive (a hot standby, a transaction pooler): a read of the change
  // log this often, one small query when nothing changed.
  POLL_INTERVAL_MS: Type.Integer({ default: 1000, minimum: 10, description: 'How often the change log is read where notifications cannot arrive' }),
  // A read is watched for progress, not given a deadline: a replica short of CPU reads a whole table
  // for as long as it needs, while a network that froze its connection sends nothing at all.
  DATABASE_READ_STALL_MS: Type.Integer({ default: 30000, minimum: 1000, description: 'How long a read may go without a byte from PostgreSQL before its connection is dropped and the read tried again' }),
  // Unset, a replica that cannot reach its source serves its last data however old (availability);
  // set, it refuses keyed requests (503) once its data has gone unconfirmed this long (a revocation
  // it cannot see stops mattering after this bound).
  MAX_STALENESS_MS: Type.Optional(Type.Integer({ minimum: 1000, description: 'How long the data may go unconfirmed before keyed requests are refused (503)' })),
  METRICS: Type.Boolean({ default: true, description: 'Serve GET /metrics and measure every request' }),
  // Per key and per client address; 0 turns that limit off. High enough that a test suite never
  // meets them, low enough to stop a runaway loop from starving the other clients.
  RATE_LIMIT_PER_MINUTE: Type.Integer({ default: 6000, minimum: 0, description: 'Requests a minute per key' }),
  RATE_LIMIT_ANONYMOUS_PER_MINUTE: Type.Integer({ default: 600, minimum: 0, description: 'Requests without a valid key a minute per client address' }),
  REDIS_URL: Type.Optional(Type.String({ pattern: '^rediss?://', description: 'Shares the rate-limit counters between replicas', expected: 'a Redis URL, such as redis://:password@cache.example:6379' })),
  // Whom to believe about the client's address (X-Forwarded-For): a number of proxy hops, or their
  // addresses and CIDR ranges; unset, the address of the connection.
  TRUST_PROXY: Type.Optional(Type.String({ pattern: '^([0-9]+|[0-9A-Fa-f.:/]+(,\\s*[0-9A-Fa-f.:/]+)*)$', expected: 'a number of proxy hops (1), or addresses and CIDR ranges, comma-separated (10.0.0.0/8, 127.0.0.1)' })),
  // Browser origins allowed to call the API, or * for any.
  CORS_ORIGINS: Type.String({ default: '', pattern: '^(\\*|(https?://[A-Za-z0-9.-]+(:[0-9]+)?(,\\s*https?://[A-Za-z0-9.-]+(:[0-9]+)?)*)?)$', expected: 'origins with their scheme, comma-separated (https://dash.example.com, http://localhost:5173), or *' }),
  // Read by npm run key (a folder's history) and npm run db -- trim (table key_history), not by the server.
  KEY_HISTORY_RETENTION_DAYS: Type.Integer({ default: 90, minimum: 1, description: 'How many days the history of the keys keeps an entry' }),
  SHUTDOWN_GRACE_MS: Type.Integer({ default: 10000, minimum: 0, description: 'How long in-flight requests may run after SIGTERM' }),
  // Above the idle timeout of the load balancers usually in front (60 s for AWS ALB and nginx), so
  // that the balancer, not us, closes an idle pooled connection: closing it ourselves races a
  // request the balancer may be sending on it. Fastify's default.
  KEEP_ALIVE_TIMEOUT_MS: Type.Integer({ default: 72000, minimum: 1, description: 'How long a connection may stay idle' }),
  HEADERS_TIMEOUT_MS: Type.Integer({ default: 10000, minimum: 1, description: 'How long a client may take to send a request\'s headers' }),
  REQUEST_TIMEOUT_MS: Type.Integer({ default: 30000, minimum: 1, description: 'How long a client may take to send a whole request' }),
  MAX_CONNECTIONS: Type.Integer({ default: 8000, minimum: 1, description: 'Connections open at once; more are closed on arrival' }),
  // Off, a misspelt setting is a warning, which a deployment that never reads its logs misses.
  STRICT_SETTINGS: Type.Boolean({ default: false, description: 'Refuse to start on a variable that looks like a misspelt setting' })
})

export type Config = Static<typeof ConfigSchema>

/**
 * Former names of settings, still read: FIXTURES_DIR named the data folder when the folder held only
 * the bundled sample data (the fixtures); it names the production data too.
 */
export const FORMER_NAMES = { FIXTURES_DIR: 'DATA_DIR' } as const satisfies Record<string, keyof Config>

/** Whether `name` is set in the environment, by its name or a former one. */
export function isGiven (name: keyof Config): boolean {
  return Boolean(process.env[name]) || Object.entries(FORMER_NAMES).some(([former, current]) => current === name && Boolean(process.env[former]))
}

/** `env` with each former name read as its setting; both given with different values is refused. */
function withFormerNames (env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const renamed = { ...env }
  for (const [former, name] of Object.entries(FORMER_NAMES)) {
    if (!env[former]) continue
    if (env[name] && env[name] !== env[former]) {
      throw new Error(`invalid setting ${former}: the former name of ${name}, which is set to another value; set ${name} alone`)
    }
    renamed[name] = env[former]
  }
  return renamed
}

function parse (type: unknown, text: string): unknown {
  // Only whole decimal numbers become integers ("3.5" must not quietly become 3).
  if (type === 'integer' && /^-?[0-9]+$/.test(text)) return Number(text)
  if (type === 'boolean' && (text === 'true' || text === 'false')) return text === 'true'
  return text
}

/** `CORS_ORIGINS` as a list; empty when no origin may call. */
export function corsOrigins ({ CORS_ORIGINS }: Pick<Config, 'CORS_ORIGINS'>): string[] {
  return CORS_ORIGINS.split(',').map((origin) => origin.trim()).filter(Boolean)
}

/**
 * Reads the settings from the environment (an empty variable counts as unset); throws with a
 * message naming the variable when a value is wrong. TypeBox, which checks everything else,
 * checks these too: no second validator to load at start.
 */
export function loadConfig (environment: NodeJS.ProcessEnv = process.env): Config {
  const env = withFormerNames(environment)
  const given = Object.fromEntries(
    Object.entries(ConfigSchema.properties).flatMap(([name, schema]) => {
      const text = env[name]
      if (!text) return []
      return [[name, parse(schema.type, text)]]
    })
  )
  const config = Value.Default(ConfigSchema, given)
  const problem = describeErrors(Value.Errors(ConfigSchema, config))
  if (problem !== undefined) throw new Error(`invalid setting ${problem}`)
  const valid = config as Config
  // Node.js checks this pair only when both are given to createServer; a request cannot take less
  // time than its own headers.
  if (valid.HEADERS_TIMEOUT_MS > valid.REQUEST_TIMEOUT_MS) {
    throw new Error(`invalid setting HEADERS_TIMEOUT_MS: ${valid.HEADERS_TIMEOUT_MS} is above REQUEST_TIMEOUT_MS (${valid.REQUEST_TIMEOUT_MS})`)
  }
  return valid
}

/** The settings, one a line with its default (`unset` where there is none), as --help lists them. */
export function describeSettings (): string {
  const width = Math.max(...Object.keys(ConfigSchema.properties).map((name) => name.length)) + 2
  return Object.entries(ConfigSchema.properties).map(([name, schema]) => {
    const fallback: unknown = 'default' in schema ? schema.default : undefined
    return `  ${name.padEnd(width)}${fallback === undefined || fallback === '' ? 'unset' : String(fallback)}\n`
  }).join('')
}

export type ConnectionLimits = Pick<Config, 'KEEP_ALIVE_TIMEOUT_MS' | 'HEADERS_TIMEOUT_MS' | 'REQUEST_TIMEOUT_MS' | 'MAX_CONNECTIONS'>

/**
 * The setting `variable` is a slip of, if any. Underscores do not count (`DATADIR`, `LOGLEVEL`), nor
 * does case; then at most one edit (two neighbours swapped count as one: `PROT`) for a setting of up to
 * 7 letters, two for a longer one. One edit, not two, for the short names: `HOME` is two from `HOST`.
 */
function settingNear (variable: string, names: string[]): string | undefined {
  const bare = (name: string) => name.replaceAll('_', '').toUpperCase()
  return nearest(variable, names, bare, (name) => Math.min(2, Math.floor(bare(name).length / 4)))
}

/**
 * What Kubernetes (and Docker's links) give a container for each service beside it: `REDIS_PORT`
 * (tcp://10.0.0.11:6379), `REDIS_PORT_6379_TCP_ADDR`, `REDIS_SERVICE_HOST`. Nobody chose them, so they
 * are no slip, though a service named redis or data gives them a prefix of ours.
 */
function isServiceLink (variable: string, value: string | undefined): boolean {
  return /_SERVICE_(HOST|PORT)(_[A-Z0-9_]+)?$/.test(variable) ||
    /_PORT_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?$/.test(variable) ||
    (variable.endsWith('_PORT') && /^(tcp|udp|sctp):\/\//.test(value ?? ''))
}

/**
 * The variables of `env` that look like settings of this server but are none (a slip: `LOG_LEVL`,
 * `DATADIR`, `PROT`), each with the setting it is a slip of, if one is near: a setting spelt wrong
 * would otherwise leave its default in force without a word. A variable looks like one of ours when it
 * is a slip of a setting's name, or shares the first word of a setting of several words (`RATE_`,
 * `DATABASE_`). The usual environment of a process (`HOME`, `HOSTNAME`, `PATH`, `PWD`, `NODE_OPTIONS`,
 * `npm_config_*`) is neither, and Kubernetes' service variables are left out.
 */
export function unknownSettings (env: NodeJS.ProcessEnv = process.env): Array<{ variable: string, closest: string | undefined }> {
  const names = Object.keys(ConfigSchema.properties)
  const prefixes = new Set(names.filter((name) => name.includes('_')).map((name) => `${name.split('_')[0]}_`))
  return Object.keys(env).filter((variable) => !names.includes(variable) && !(variable in FORMER_NAMES) && !isServiceLink(variable, env[variable])).flatMap((variable) => {
    const near = settingNear(variable, names)
    const ours = near !== undefined || [...prefixes].some((prefix) => variable.startsWith(prefix))
    return ours ? [{ variable, closest: near }] : []
  })
}
