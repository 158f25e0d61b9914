import { brotliDecompressSync, gunzipSync } from 'node:zlib'
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js'
import type { FastifyInstance } from 'fastify'
import { buildApp } from '../src/app.js'
import { fixedSnapshots } from '../src/repositories/lifecycle.js'
import { type DirectoryData } from '../src/repositories/records.js'
import { RECORD_KINDS } from '../src/registry.js'
import { ajvFormats } from '../src/schemas/formats.js'

interface MediaType { schema: unknown, example?: unknown }
interface OpenApiResponse { description: string, content?: Record<string, MediaType> }
interface OpenApiOperation {
  operationId: string
  tags?: string[]
  security?: unknown[]
  parameters?: Array<{ name: string, in: string, required: boolean, description?: string, schema: Record<string, unknown> }>
  responses: Record<string, OpenApiResponse>
}
export interface OpenApiDocument {
  openapi: string
  info: { version: string }
  servers: Array<{ url: string }>
  security?: Array<Record<string, unknown>>
  paths: Record<string, Record<string, OpenApiOperation>>
  components: { schemas: Record<string, Record<string, unknown>>, securitySchemes: Record<string, unknown> }
}

/** What the server sent, as far as the contract is concerned. */
interface SentResponse {
  method: string
  /** The route that answered (`/v1/providers`); undefined for an unknown path or a wrong method. */
  route: string | undefined
  statusCode: number
  contentType: string | undefined
  /** undefined when the body was a stream. */
  body: string | undefined
}

const DOCUMENT_ID = 'openapi.json'

/** `/organization/members` as a JSON-pointer token. */
const pointerToken = (text: string) => text.replace(/~/g, '~0').replace(/\//g, '~1')

/** The document the server publishes at /v1/openapi.json, from an app of its own. */
export async function fetchServedDocument () {
  const app = buildApp({ snapshots: await fixedSnapshots(Object.fromEntries(RECORD_KINDS.map((kind) => [kind, []])) as unknown as DirectoryData) })
  try {
    const res = await app.inject({ url: '/v1/openapi.json' })
    if (res.statusCode !== 200) throw new Error(`GET /v1/openapi.json answered ${res.statusCode}`)
    return { text: res.body, document: res.json() as OpenApiDocument }
  } finally {
    await app.close()
  }
}

/** Ajv (JSON Schema 2020-12, the dialect of OpenAPI 3.1) that resolves references inside the document. */
export function createDocumentValidator (document: OpenApiDocument) {
  const ajv = new Ajv2020({ strict: true, allErrors: true })
  for (const [name, validate] of Object.entries(ajvFormats)) ajv.addFormat(name, { type: 'string', validate })
  // The document's own fields (openapi, info, paths...) are not schema keywords; declaring them keeps
  // strict mode on for the schemas themselves, so a misspelt keyword there fails loudly.
  ajv.addVocabulary(Object.keys(document))
  ajv.addSchema(document, DOCUMENT_ID)
  const compiled = new Map<string, ValidateFunction>()
  /** Checks `value` against the schema at `pointer` in the document; answers the problems. */
  return (pointer: string, value: unknown): string[] => {
    let validate = compiled.get(pointer)
    if (validate === undefined) {
      validate = ajv.compile({ $ref: `${DOCUMENT_ID}#${pointer}` })
      compiled.set(pointer, validate)
    }
    if (validate(value)) return []
    return (validate.errors ?? []).map((error) => `${error.instancePath || '(body)'} ${error.message ?? 'is invalid'} (${error.schemaPath})`)
  }
}

/**
 * Answers what is wrong with a response, judged by the document alone: the schema the document
 * publishes for that operation and status (the Error component for a path or method that is not an
 * operation), and the documented media type. Empty when the response conforms.
 */
export function createConformanceChecker (document: OpenApiDocument) {
  const validate = createDocumentValidator(document)
  const base = document.servers[0]?.url ?? ''

  return function check (res: SentResponse): string[] {
    const where = `${res.method} ${res.route ?? '(no route)'} answered ${res.statusCode}`
    const path = res.route?.startsWith(base) ? res.route.slice(base.length) : undefined
    // HEAD is answered by the GET operation, without the body.
    const method = res.method === 'HEAD' ? 'get' : res.method.toLowerCase()
    const operation = path === undefined ? undefined : document.paths[path]?.[method]

    let pointer: string
    if (operation !== undefined) {
      const response = operation.responses[String(res.statusCode)]
      if (response === undefined) return [`${where}: status ${res.statusCode} is not documented for ${operation.operationId}`]
      if (response.content === undefined) {
        return res.body ? [`${where}: sent a body where ${operation.operationId} ${res.statusCode} documents none`] : []
      }
      const mediaType = res.contentType?.split(';')[0]?.trim() ?? ''
      if (response.content?.[mediaType] === undefined) {
        return [`${where}: content type ${JSON.stringify(res.contentType)} is not documented for ${operation.operationId} ${res.statusCode}`]
      }
      pointer = ['', 'paths', pointerToken(path!), method, 'responses', String(res.statusCode), 'content', pointerToken(mediaType), 'schema'].join('/')
    } else if (res.statusCode >= 400) {
      // Not an operation (unknown path, other method): still the one error body the document publishes.
      pointer = '/components/schemas/Error'
    } else {
      // Not part of the API: the document itself, the reference page and its assets.
      return []
    }

    if (res.method === 'HEAD') return []
    if (res.body === undefined) return [`${where}: the body is a stream, which no operation documents`]
    let body: unknown
    try {
      body = JSON.parse(res.body)
    } catch {
      return [`${where}: the body is not JSON: ${res.body.slice(0, 80)}`]
    }
    const problems = validate(pointer, body).map((problem) => `${where}: ${problem}`)
    const code = (body as { error?: { code?: unknown } }).error?.code
    if (res.statusCode >= 400 && code !== res.statusCode) problems.push(`${where}: error.code is ${JSON.stringify(code)}, not the HTTP status`)
    return problems
  }
}

let servedChecker: Promise<ReturnType<typeof createConformanceChecker>> | undefined
const failures: string[] = []

/**
 * Checks every response `app` sends against the served document. Problems are collected rather
 * than thrown, so the response itself stays as the server made it; test/setup.ts fails the test
 * that provoked them.
 */
export function checkResponsesAgainstDocument (app: FastifyInstance) {
  app.addHook('onSend', async (request, reply, payload) => {
    servedChecker ??= fetchServedDocument().then(({ document }) => createConformanceChecker(document))
    const check = await servedChecker
    failures.push(...check({
      method: request.method,
      route: request.routeOptions.url,
      statusCode: reply.statusCode,
      contentType: reply.getHeader('content-type')?.toString(),
      body: typeof payload === 'string' ? payload : Buffer.isBuffer(payload) ? decode(payload, reply.getHeader('content-encoding')).toString('utf8') : undefined
    }))
    return payload
  })
}

/** The body as the client reads it once it has undone the content coding. */
function decode (body: Buffer, coding: unknown): Buffer {
  if (coding === 'gzip') return gunzipSync(body)
  if (coding === 'br') return brotliDecompressSync(body)
  return body
}

/** The problems found since the last call, removed from the list. */
export function takeConformanceFailures (): string[] {
  return failures.splice(0)
}
