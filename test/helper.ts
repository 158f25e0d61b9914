import { createHash } from 'node:crypto'
import { cp, mkdir, open, readdir, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { TestRunner, onTestFinished, vi } from 'vitest'
import type { FastifyInstance } from 'fastify'
import { buildApp, type LogOptions } from '../src/app.js'
import type { Lifecycle, Snapshots, SnapshotInfo } from '../src/repositories/lifecycle.js'
import { type DirectoryData, type Loaded } from '../src/repositories/records.js'
import { RECORD_KINDS } from '../src/registry.js'
import { createSnapshot, type Snapshot } from '../src/repositories/snapshot.js'
import { KINDS, LIST_KINDS, type ListKind } from '../src/registry.js'
import type { Provider } from '../src/schemas/provider.js'
import type { Endpoint } from '../src/schemas/endpoint.js'
import { MemberList } from '../src/repositories/member-list.js'
import type { ApiKey } from '../src/schemas/keys-and-organizations.js'
import { checkResponsesAgainstDocument } from './conformance.js'
import { PATIENCE_MS } from './patience.js'

export const sha256 = (text: string) => createHash('sha256').update(text).digest('hex')

export function makeProvider (i: number, overrides: Partial<Provider> = {}): Provider {
  return {
    name: `Provider ${i}`,
    slug: `provider-${i}`,
    privacy_policy_url: `https://provider-${i}.example/privacy`,
    terms_of_service_url: `https://provider-${i}.example/terms`,
    headquarters: 'US',
    datacenters: ['US', 'DE'],
    ...overrides
  }
}

export function makeEndpoint (i: number, overrides: Partial<Endpoint> = {}): Endpoint {
  return {
    model_id: `vendor/model-${i}`,
    model_name: `Vendor: Model ${i}`,
    name: `Provider ${i} | vendor/model-${i}`,
    provider_name: `Provider ${i}`,
    tag: `provider-${i}/fp8`,
    context_length: 131072,
    max_prompt_tokens: null,
    max_completion_tokens: 16384,
    pricing: { prompt: '0.0000003', completion: '0.0000025', image: '0', request: '0' },
    quantization: 'fp8',
    status: 0,
    supported_parameters: ['max_tokens', 'temperature', 'tools'],
    supports_implicit_caching: i % 2 === 0,
    supports_tool_choice: { auto: true, function: true, none: true, required: false },
    latency_last_30m: { p50: 410, p75: 520, p90: 800, p99: 1500.5 },
    throughput_last_30m: { p50: 88.2, p75: 70, p90: 51.5, p99: 20 },
    uptime_last_5m: 100,
    uptime_last_30m: 99.5,
    uptime_last_1d: 99.91,
    ...overrides
  }
}

/**
 * An endpoint with the fields OpenRouter's newer clients describe beyond the spec's copy (native_tools,
 * the optional prices, a quantization of the enumeration, perf_last_30m_by_workload,
 * supports_voice_cloning), each key where the vendor's answers put it.
 */
export function makeVendorEndpoint (i: number, overrides: Partial<Endpoint> = {}): Endpoint {
  const { pricing, ...rest } = makeEndpoint(i)
  return {
    ...rest,
    pricing: {
      ...pricing,
      audio: '0.00004',
      input_cache_read: '0.00000003',
      input_cache_write: '0.000000375',
      input_cache_write_1h: '0.0000006',
      internal_reasoning: '0.0000025',
      web_search: '0.01',
      discount: 0.25,
      overrides: [{ min_prompt_tokens: 200000, prompt: '0.0000006', completion: '0.000005' }, { utc_days: ['saturday', 'sunday'], utc_start: 100, utc_end: 400, prompt: '0.00000015' }]
    },
    quantization: 'mxfp4',
    supports_voice_cloning: false,
    perf_last_30m_by_workload: {
      text_generation: { latency: { p50: 410, p75: 520, p90: 800, p99: 1500.5 }, request_count: 1834, throughput: { p50: 88.2, p75: 70, p90: 51.5, p99: 20 } },
      image_generation: { latency: null, request_count: null, throughput: null }
    },
    native_tools: { 'openrouter:web_search': { type: 'web_search_20260209' }, 'openrouter:web_fetch': { type: 'web_fetch_20250910' } },
    ...overrides
  }
}

/**
 * An endpoint as the vendor's own export may hold it: without pricing.image, pricing.request and status,
 * which its schema makes optional.
 */
export function makeSparseVendorEndpoint (i: number): Endpoint {
  const endpoint = makeEndpoint(i)
  delete endpoint.pricing.image
  delete endpoint.pricing.request
  delete endpoint.status
  return endpoint
}

export function makeMembers (prefix: string, count: number): MemberList {
  return MemberList.of(Array.from({ length: count }, (_, i) => ({
    id: `user_${prefix}_${i}`,
    email: `person${i}@${prefix}.example`,
    first_name: i % 5 === 0 ? null : `First${i}`,
    last_name: i % 7 === 0 ? null : `Last${i}`,
    role: i === 0 ? 'org:admin' : 'org:member'
  })))
}

/**
 * Writes a keys.json of `count` keys on one line, as a minifier does, between `start` and `end` (a valid
 * file: `[` and `]`), a chunk at a time so that the test never holds it whole. Answers its size in bytes.
 */
export async function writeManyKeys (path: string, count: number, { start = '[', end = ']' } = {}) {
  const handle = await open(path, 'w')
  try {
    let chunk = start
    for (let i = 0; i < count; i++) {
      // Unique, and scattered in their first word as a real SHA-256 is: the key table's index slots by it.
      const sha256 = `${(Math.imul(i, 0x9e3779b1) >>> 0).toString(16).padStart(8, '0')}${i.toString(16).padStart(56, '0')}`
      chunk += `${i === 0 ? '' : ','}{"name":"key-${i}","sha256":"${sha256}","kind":"standard","organization_id":"org_alpha"}`
      if (chunk.length > 1 << 20) {
        await handle.write(chunk)
        chunk = ''
      }
    }
    await handle.write(chunk + end)
  } finally {
    await handle.close()
  }
  return (await stat(path)).size
}

/** Plaintext keys of the test data set; the data holds only their hashes. */
export const KEYS = {
  alphaManagement: 'test-alpha-management-key',
  alphaStandard: 'test-alpha-standard-key',
  betaManagement: 'test-beta-management-key',
  orphanManagement: 'test-orphan-management-key'
}

const keyRecords: ApiKey[] = [
  { name: 'alpha-management', sha256: sha256(KEYS.alphaManagement), kind: 'management', organization_id: 'org_alpha' },
  { name: 'alpha-standard', sha256: sha256(KEYS.alphaStandard), kind: 'standard', organization_id: 'org_alpha' },
  { name: 'beta-management', sha256: sha256(KEYS.betaManagement), kind: 'management', organization_id: 'org_beta' },
  { name: 'orphan-management', sha256: sha256(KEYS.orphanManagement), kind: 'management', organization_id: 'org_gone' }
]

export function makeData (overrides: Partial<DirectoryData> = {}): DirectoryData {
  return {
    // A list kind whose data is not made here serves its schema's examples.
    ...Object.fromEntries(LIST_KINDS.map((kind) => [kind, KINDS[kind].schema.examples ?? []])) as unknown as DirectoryData,
    providers: [makeProvider(1), makeProvider(2, { headquarters: null, datacenters: null }), makeProvider(3)],
    endpoints: [makeEndpoint(1), makeEndpoint(2)],
    organizations: [
      { id: 'org_alpha', name: 'Alpha', members: makeMembers('alpha', 250) },
      { id: 'org_beta', name: 'Beta', members: makeMembers('beta', 3) }
    ],
    keys: keyRecords,
    ...overrides
  }
}

export const bearer = (key: string) => ({ authorization: `Bearer ${key}` })

/** Collects what the app logs at `level` (the default level of the server unless told), one parsed JSON object per line. */
export function captureLogs (level = 'info') {
  const lines: Array<Record<string, unknown>> = []
  const raw: string[] = []
  const stream = new Writable({
    write (chunk, _encoding, callback) {
      for (const line of String(chunk).split('\n').filter(Boolean)) {
        raw.push(line)
        lines.push(JSON.parse(line))
      }
      callback()
    }
  })
  return { lines, raw, log: { level, stream } }
}

/**
 * Snapshots over records given, changed by hand: `install(data)` makes the next snapshot, `refused()`
 * counts a refusal, `follows(...)` sets how the source is followed (mode, horizon, lag). The first
 * snapshot is made when the app gets ready.
 */
export function snapshotsOf (data: DirectoryData, source = 'test') {
  let snapshot: Snapshot | undefined
  const reloads = Object.fromEntries(RECORD_KINDS.map((kind) => [kind, { succeeded: 0, failed: 0 }])) as SnapshotInfo['changes']
  // Files are watched and have no horizon; any other source is a PostgreSQL notified, caught up.
  const measures = { replayLagSeconds: source === 'files' ? undefined : 0, clockOffsetSeconds: 0, oldestOpenSeconds: 0, relists: 0 }
  const following: Pick<SnapshotInfo, 'readFailures' | 'mode' | 'horizon' | 'lag' | keyof typeof measures> = source === 'files'
    ? { readFailures: 0, mode: 'watch', horizon: undefined, lag: { entries: 0, seconds: 0 }, ...measures }
    : { readFailures: 0, mode: 'notify', horizon: 1000, lag: { entries: 0, seconds: 0 }, ...measures }
  const ready = createSnapshot(data).then((first) => { snapshot = first })
  let confirmed: number | undefined
  return {
    ready,
    current: () => snapshot!,
    /** Current as of now, unless a test said when it was last confirmed (`confirmed`). */
    confirmedAt: () => confirmed ?? Date.now(),
    confirmed (at: number | undefined) { confirmed = at },
    clockOffsetMs: () => following.clockOffsetSeconds * 1000,
    info: (): SnapshotInfo => ({
      source,
      version: snapshot!.version,
      fingerprint: snapshot!.fingerprint,
      installedAt: snapshot!.installedAt,
      records: snapshot!.counts(),
      changes: structuredClone(reloads),
      readFailures: following.readFailures,
      mode: following.mode,
      horizon: following.horizon,
      lag: { ...following.lag },
      replayLagSeconds: following.replayLagSeconds,
      clockOffsetSeconds: following.clockOffsetSeconds,
      oldestOpenSeconds: following.oldestOpenSeconds,
      relists: following.relists,
      following: true
    }),
    async install (next: DirectoryData) {
      snapshot = await createSnapshot(next, snapshot!.version + 1)
      for (const kind of RECORD_KINDS) reloads[kind].succeeded++
      if (following.horizon !== undefined) following.horizon++
    },
    follows (state: Partial<typeof following>) {
      Object.assign(following, state)
    },
    refused (kind: keyof SnapshotInfo['changes'] = 'providers') {
      reloads[kind].failed++
    }
  } satisfies Snapshots & Record<string, unknown>
}

export interface BuildOptions {
  data?: DirectoryData
  snapshots?: Snapshots | ReturnType<typeof snapshotsOf>
  log?: LogOptions
  /** Settings of config.ts; their defaults otherwise. */
  settings?: Parameters<typeof buildApp>[0]['settings']
  /** Now, in ms since the epoch: a test moves it instead of waiting. */
  clock?: () => number
}

/** Apps built outside a test (in beforeAll, or while a file collects its tests), closed with the file. */
const fileApps: FastifyInstance[] = []

/**
 * The app over test data. Every response it sends is checked against the served OpenAPI document
 * (test/conformance.ts), whatever the test looks at. It is closed when the test that built it ends,
 * or at the end of its file when built outside a test (test/setup.ts).
 */
export function build ({ data = makeData(), snapshots = snapshotsOf(data), log, settings, clock }: BuildOptions = {}) {
  const app = buildApp({ snapshots, log, settings, ...clock === undefined ? {} : { clock } })
  if ('ready' in snapshots) app.addHook('onReady', async () => { await snapshots.ready })
  checkResponsesAgainstDocument(app)
  if (TestRunner.getCurrentTest()) onTestFinished(() => app.close())
  else fileApps.push(app)
  return app
}

/** Closes the apps built outside a test; test/setup.ts calls it after each file. */
export function closeFileApps () {
  return Promise.all(fileApps.splice(0).map((app) => app.close()))
}

/** Snapshots whose data layer fails on reading the lists and pages named (every one, unless told): for the 500s. */
export function failingSnapshots (
  data: DirectoryData = makeData(),
  failure = new Error('the data layer failed'),
  parts: Array<ListKind | 'members'> = [...LIST_KINDS, 'members']
): ReturnType<typeof snapshotsOf> {
  const broken = () => { throw failure }
  const snapshots = snapshotsOf(data)
  let view: Snapshot | undefined
  return {
    ...snapshots,
    current () {
      // A snapshot like the others, but for the lists and pages named.
      const served = snapshots.current()
      view ??= Object.assign(Object.create(served) as Snapshot, {
        list: (kind: ListKind) => parts.includes(kind) ? broken() : served.list(kind),
        ...parts.includes('members') ? { members: broken } : {}
      })
      return view
    }
  }
}

/** The records a snapshot serves, as a source reads them (keyed kinds in key order). */
export function recordsOf (snapshot: Snapshot) {
  const byKey = <T>(values: Iterable<T>, key: (value: T) => string) => [...values].sort((a, b) => key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0)
  // Every list kind of the registry, a test's own included.
  const lists = Object.fromEntries(LIST_KINDS.map((kind) => [kind, (snapshot.indexes[kind] as unknown as { records: unknown[] }).records]))
  return {
    ...lists as { [K in ListKind]: Array<Loaded<K>> } & Record<string, unknown[]>,
    organizations: byKey(snapshot.indexes.organizations.byKey.values(), (organization) => organization.id),
    keys: byKey(snapshot.indexes.keys.byKey.values(), (key) => key.name)
  }
}

/**
 * Follows a lifecycle with a logger of its own, and waits for what it does: `until` a snapshot
 * satisfies a test, the next refusal, a change of `following`, a number of installs.
 */
export function watchLifecycle (lifecycle: Lifecycle, timeoutMs = PATIENCE_MS) {
  const refusals: Array<{ kind: string, problem: string }> = []
  const states: Array<{ up: boolean, problem?: string }> = []
  let installed = 0
  /** The rows each install read, by kind, where the source counts them. */
  const rowsRead: Array<Record<string, number>> = []
  /** The version of the source each install was read from. */
  const sourcePositions: Array<string | undefined> = []
  /** What was logged as a warning (a read that failed and is tried again), with its problem. */
  const warnings: string[] = []
  /** The modes the source said it follows changes by, in order. */
  const modes: string[] = []
  const followed = lifecycle.follow({
    info (object: { change?: string, rows_read?: Record<string, number>, source_position?: string, mode?: string }, message) {
      if (message.startsWith('following changes by')) modes.push(object.mode!)
      // Kinds read together are installed together, their changes joined by '; '.
      if (message === 'change installed') {
        installed += String(object.change).split('; ').length
        rowsRead.push(object.rows_read ?? {})
        sourcePositions.push(object.source_position)
      }
      if (message.startsWith('following changes again')) states.push({ up: true })
    },
    error (object: { kind?: string, problem?: string }, message) {
      if (message.startsWith('change refused')) refusals.push({ kind: object.kind!, problem: object.problem! })
      else if (message.startsWith('cannot follow')) states.push({ up: false, problem: object.problem })
    },
    warn (object: { problem?: string }, message) {
      warnings.push(`${message}: ${object.problem ?? ''}`)
    }
  })
  const poll = async <T>(what: string, found: () => T | undefined): Promise<T> => await vi.waitFor(() => {
    const value = found()
    if (value === undefined) throw new Error(`timed out waiting for ${what}`)
    return value
  }, { timeout: timeoutMs, interval: 10 })
  return {
    until: (test: (data: ReturnType<typeof recordsOf>) => boolean) => poll('a snapshot', () => {
      const data = recordsOf(lifecycle.current())
      return test(data) ? data : undefined
    }),
    refusal: () => poll('a refusal', () => refusals.shift()),
    following: (up: boolean) => poll(`following ${up}`, () => {
      const index = states.findIndex((state) => state.up === up)
      return index < 0 ? undefined : states.splice(0, index + 1).at(-1)!.problem ?? ''
    }),
    installs: (count: number) => poll(`${count} installs`, () => installed >= count ? installed : undefined),
    rowsRead,
    sourcePositions,
    warnings,
    modes,
    /** Resolves once the source knows how it follows changes. */
    followed
  }
}

/**
 * Copies into `dir` what npm run docs reads besides the build (src/docs/generate.ts): the documents,
 * the Kubernetes base's kustomization.yaml and the bundled fixtures.
 */
export async function copyWhatDocsRead (dir: string) {
  await mkdir(join(dir, 'deploy/kubernetes'), { recursive: true })
  const files = ['README.md', 'CONTRIBUTING.md', 'deploy/kubernetes/kustomization.yaml', ...(await readdir('docs')).filter((file) => file.endsWith('.md')).map((file) => `docs/${file}`)]
  await Promise.all([...files.map((file) => cp(file, join(dir, file))), cp('fixtures', join(dir, 'fixtures'), { recursive: true })])
}
