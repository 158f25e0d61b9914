/**
 * What `npm run docs` writes: the OpenAPI document, the Kubernetes base's empty data files, and the
 * regions (regions.ts) of the documents and of the base's kustomization.yaml that restate the registry
 * of kinds or quote what the build says (the bundled counts, the schema version, `GET /`). A new kind
 * then costs its entry, its schema, its migration and its data: the rest is written here, and a test
 * (test/docs-generated.test.ts) fails while a committed file differs from what this makes now.
 */
import { readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { buildApp } from '../app.js'
import { KINDS, LIST_KINDS, OPERATIONS, RECORD_KINDS, type RecordKind } from '../registry.js'
import { fixedSnapshots } from '../repositories/lifecycle.js'
import { countRecords, describeCounts, orphanKeys } from '../repositories/records.js'
import { loadDataFolder } from '../repositories/sources/files.js'
import { LIST_COLUMNS, SCHEMA_VERSION, schemaLacks, schemaTooOld } from '../repositories/sources/postgres-schema.js'
import { fillRegions, syntaxOf, type Syntax } from './regions.js'
import { code, formatTables, lowerFirst, recordDescription } from './schema-tables.js'

/** The parts of the served OpenAPI document the regions read. */
interface OpenApiDocument {
  paths: Record<string, Record<string, { operationId: string, parameters?: Array<{ in: string, name: string }>, responses: Record<string, unknown> }>>
  components: { schemas: Record<string, unknown> }
}

/** What the build says, read once for every region. */
interface Facts {
  /** The OpenAPI document as GET /v1/openapi.json serves it, byte for byte. */
  openapi: string
  document: OpenApiDocument
  /** GET /'s body. */
  index: string
  /** The bundled fixtures, as npm run check reads them. */
  bundled: Awaited<ReturnType<typeof loadDataFolder>>
}

/** What the build says, and the bundled fixtures of `root` (a new kind's file is among them). */
async function readFacts (root: string): Promise<Facts> {
  // What the app says of its routes depends on the routes, not on the data: an empty directory will do.
  const app = buildApp({ snapshots: await fixedSnapshots(Object.fromEntries(RECORD_KINDS.map((kind) => [kind, []])) as never) })
  try {
    const [openapi, index] = await Promise.all(['/v1/openapi.json', '/'].map(async (url) => {
      const res = await app.inject({ url })
      if (res.statusCode !== 200) throw new Error(`GET ${url} answered ${res.statusCode}: ${res.body}`)
      return res.body
    }))
    return { openapi: openapi!, document: JSON.parse(openapi!) as OpenApiDocument, index: index!, bundled: await loadDataFolder(join(root, 'fixtures')) }
  } finally {
    await app.close()
  }
}

const fence = (language: string, lines: string[]) => [`\`\`\`${language}`, ...lines, '```'].join('\n')

/** The kinds whose data is a credential (the keys' hashes): in Kubernetes, a Secret rather than the ConfigMap. */
const isSecret = (kind: RecordKind) => KINDS[kind].index === 'keys'

/** The Kubernetes base's data set: a ConfigMap and a Secret, generated from the files of data/. */
const DATA_SET = [
  { object: 'ConfigMap', generator: 'configMapGenerator', name: 'model-gateway-directory-data', files: RECORD_KINDS.filter((kind) => !isSecret(kind)).map((kind) => KINDS[kind].file) },
  { object: 'Secret', generator: 'secretGenerator', name: 'model-gateway-directory-keys', files: RECORD_KINDS.filter(isSecret).map((kind) => KINDS[kind].file) }
]

/** Where an operation is in the OpenAPI document, with the method it answers. */
function documented ({ document }: Facts, { path, operationId }: { path: string, operationId: string }) {
  const found = Object.entries(document.paths[path] ?? {}).find(([, operation]) => operation.operationId === operationId)
  if (found === undefined) throw new Error(`the OpenAPI document has no operation ${operationId} at ${path}`)
  return { method: found[0].toUpperCase(), operation: found[1] }
}

/** The README's table of operations: what each does, its path with its query parameters, and the key it takes. */
function operationsTable (facts: Facts) {
  const rows = OPERATIONS.map((entry) => {
    const { method, operation } = documented(facts, entry)
    const query = (operation.parameters ?? []).filter((parameter) => parameter.in === 'query').map(({ name }) => `${name}=`)
    // Only an operation that refuses a standard key documents 403 (auth.ts, requireManagementKey).
    const key = '403' in operation.responses ? 'management key' : 'any key'
    return `| ${entry.summary} | ${code(`${method} /v1${entry.path}${query.length > 0 ? `?${query.join('&')}` : ''}`)} | ${key} |`
  })
  return ['| Operation | Path | Key |', '|---|---|---|', ...rows].join('\n')
}

/** The data files, each with what one of its records is. */
function dataFileList () {
  return RECORD_KINDS.map((kind) => `- ${code(KINDS[kind].file)}: ${lowerFirst(recordDescription(KINDS[kind].schema, KINDS[kind].file))}`).join('\n')
}

/** GitHub's anchor of a heading that is a file's name in code: `providers.json` is #providersjson. */
const anchorOfFile = (file: string) => file.replace(/[^\w-]/g, '')

/** docs/data.md: the table of files, then each file's format, made from its schema. */
function fileFormats () {
  const table = ['| File | Records |', '|---|---|', ...RECORD_KINDS.map((kind) => {
    const { file, schema } = KINDS[kind]
    return `| [${code(file)}](#${anchorOfFile(file)}) | ${recordDescription(schema, file)} |`
  })].join('\n')
  const formats = RECORD_KINDS.map((kind) => {
    const { file, schema } = KINDS[kind]
    const { operation } = KINDS[kind] as { operation?: { path: string } }
    const served = KINDS[kind].index === 'list' && operation !== undefined ? ` Served whole by ${code(`GET /v1${operation.path}`)}.` : ''
    return `### ${code(file)}\n\nA JSON array of records, each ${lowerFirst(recordDescription(schema, file))}.${served}\n\n${formatTables(schema, file)}`
  })
  return [table, ...formats].join('\n\n')
}

/** The base's kustomization.yaml: its ConfigMap and Secret, each with the data files it holds. */
function dataSetGenerators () {
  return DATA_SET.flatMap(({ generator, name, files }) => [`${generator}:`, `  - name: ${name}`, '    files:', ...files.map((file) => `      - data/${file}`)]).join('\n')
}

/** The base's data set in words, as docs/deployment.md's table of the base says it. */
function dataSetInWords () {
  return DATA_SET.map(({ object, name, files }) => `${object} ${code(name)} (${files.map(code).join(', ')})`).join(' and ')
}

/** docs/deployment.md's overlay: the base's data set replaced by the operator's files. */
function overlay () {
  return fence('yaml', [
    'apiVersion: kustomize.config.k8s.io/v1beta1',
    'kind: Kustomization',
    'namespace: directory',
    'resources:',
    '  - ../model-gateway-directory/deploy/kubernetes   # this base, by path or git URL',
    'images:',
    '  - name: model-gateway-directory',
    '    newName: registry.example.com/platform/model-gateway-directory',
    '    newTag: "1.0.0"',
    ...DATA_SET.flatMap(({ generator, name, files }) => [`${generator}:`, `  - name: ${name}`, '    behavior: replace', `    files: [${files.join(', ')}]`])
  ])
}

/** docs/postgresql.md: the table of each list kind, as its migration made it from the registry's entry. */
function listTables () {
  const rows = LIST_KINDS.map((kind) => {
    const { table } = KINDS[kind]
    const unique: readonly string[] = KINDS[kind].unique
    const generated = (field: string) => `generated from ${code(`document ->> '${field}'`)}`
    const columns: Record<string, string> = {
      id: unique.includes('id') ? `${code('id')} (${generated('id')}, primary key)` : `${code('id')} (identity, primary key)`,
      position: code('position'),
      document: code('document json'),
      document_bytes: `${code('document_bytes')} (generated: the document's size)`
    }
    const own = unique.filter((field) => field !== 'id')
    const described = LIST_COLUMNS.map((column) => {
      if (columns[column] === undefined) throw new Error(`docs: the list tables' column ${column} is not described in src/docs/generate.ts`)
      return columns[column]
    })
    return `| ${code(table)} | ${[...described, ...own.map((field) => `${code(field)} (${generated(field)})`)].join(', ')} | ${own.map((field) => `${code(field)} unique`).join(', ')} |`
  })
  return ['| Table | Columns | Constraints |', '|---|---|---|', ...rows].join('\n')
}

/** Where docs/postgresql.md's examples find the database. */
const DOC_URL = 'postgresql://directory@127.0.0.1:5433/directory'

/**
 * The summary of docs/postgresql.md's export: the bundled data but the two records it makes refused,
 * the organization of member user_globex0001 (an organization is refused with its members) and the key
 * acme-standard.
 */
function exportSummary ({ bundled }: Facts) {
  const counts = countRecords(bundled)
  const organization = bundled.organizations.find(({ members }) => members.slice().some(({ id }) => id === 'user_globex0001'))
  if (organization === undefined) throw new Error('docs/postgresql.md: the bundled data has no member user_globex0001, which its export refuses')
  const exported = { ...counts, organizations: counts.organizations - 1, members: counts.members - organization.members.length, keys: counts.keys - 1 }
  return fence('', [`exported ${describeCounts(exported)} from ${DOC_URL} to ./backup, leaving out the 2 records refused above`])
}

/** Each region's content, by its name, in the syntaxes it may be written in. */
const REGIONS: Record<string, Partial<Record<Syntax, (facts: Facts) => string>>> = {
  operations: { markdown: operationsTable },
  'data files': { markdown: dataFileList },
  'file names': { markdown: () => RECORD_KINDS.map((kind) => code(KINDS[kind].file)).join(', ') },
  'file formats': { markdown: fileFormats },
  'check output': { markdown: ({ bundled }) => fence('', [`/path/to/my-data: valid: ${describeCounts(countRecords(bundled))}`, ...orphanKeys(bundled).map((line) => `warning: ${line}`)]) },
  'GET /': { markdown: ({ index }) => fence('sh', ['curl -s http://127.0.0.1:3000/', `# ${index}`]) },
  components: { markdown: ({ document }) => Object.keys(document.components.schemas).map(code).join(', ') },
  'data set': { markdown: dataSetInWords, yaml: dataSetGenerators },
  overlay: { markdown: overlay },
  'list tables': { markdown: listTables },
  'export summary': { markdown: exportSummary },
  'schema too old': { markdown: () => fence('', [`cannot start: ${schemaTooOld(null)}`]) },
  // What checkSchema says when a kind's migration was left out (the kind of the registry's proof, test/extra-kind.test.ts, in the example).
  'missing table': { markdown: () => fence('', [`cannot start: ${schemaLacks(['table specimens'], SCHEMA_VERSION)}`]) }
}

/** The files that hold regions: the documents that must be true today (the changelog is history), and the base's kustomization. */
async function filesWithRegions (root: string) {
  const pages = (await readdir(join(root, 'docs'))).filter((file) => file.endsWith('.md')).sort().map((file) => `docs/${file}`)
  return ['README.md', 'CONTRIBUTING.md', ...pages, 'deploy/kubernetes/kustomization.yaml']
}

/**
 * Every file `npm run docs` writes, with the text it writes now: the documents with their regions
 * filled (their other text as it is in `root`), docs/openapi.json and the base's data files. What the
 * regions quote of the bundled data is read from `root`'s fixtures/.
 */
export async function generateDocs (root: string): Promise<Array<{ path: string, text: string }>> {
  const facts = await readFacts(root)
  const unused = new Set(Object.keys(REGIONS))
  const documents = await Promise.all((await filesWithRegions(root)).map(async (path) => {
    const syntax = syntaxOf(path)
    const current = await readFile(join(root, path), 'utf8')
    const text = fillRegions(current, syntax, path, (name) => {
      const make = REGIONS[name]?.[syntax]
      if (make === undefined) throw new Error(`${path}: no region "${name}" is made in ${syntax}: see src/docs/generate.ts for those that are`)
      unused.delete(name)
      return make(facts)
    })
    return { path, text }
  }))
  // A region that was removed from every document would no longer say what it says anywhere.
  if (unused.size > 0) throw new Error(`no document holds the region ${[...unused].map((name) => `"${name}"`).join(', ')} any more: put it back, or remove it from src/docs/generate.ts`)
  return [
    ...documents,
    { path: 'docs/openapi.json', text: facts.openapi },
    // The base's data set is empty and valid (`[]`): it starts, and serves nothing but 401, until an overlay replaces it.
    ...RECORD_KINDS.map((kind) => ({ path: `deploy/kubernetes/data/${KINDS[kind].file}`, text: '[]\n' }))
  ]
}
