import { readdirSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { basename } from 'node:path'
import { describe, expect, it } from 'vitest'
import { parse as parseYaml } from 'yaml'
import { KINDS, LIST_KINDS, OPERATIONS, RECORD_KINDS } from '../src/registry.js'
import { build } from './helper.js'

// The lists of operations, files and kinds the documents and the Kubernetes base give, held to the
// registry (src/kinds.ts). GET /v1/models was once added by hand, and these lists went stale without a
// test noticing. npm run docs writes them now (test/docs-generated.test.ts holds them to what it
// writes); these say that what it writes names every kind, once, in the registry's order.

/** Every kind's data file, in the registry's order. */
const FILES = RECORD_KINDS.map((kind) => KINDS[kind].file)

/** The data files a piece of a document names (`providers.json`...), in its order. */
const jsonFiles = (text: string) => [...text.matchAll(/[\w-]+\.json\b/g)].map(([file]) => file)

/** The part of `text` from the line that starts with `start` to the next blank line. */
function paragraph (text: string, start: string) {
  const at = text.indexOf(`\n${start}`)
  expect(at, `no paragraph starts with ${start}`).toBeGreaterThan(0)
  const end = text.indexOf('\n\n', at + 1)
  return text.slice(at + 1, end < 0 ? undefined : end)
}

/** The one line of `text` that starts with `start` (a table's row). */
function line (text: string, start: string) {
  const found = text.split('\n').filter((candidate) => candidate.startsWith(start))
  expect(found, `lines that start with ${start}`).toHaveLength(1)
  return found[0]!
}

/** The rows of the Markdown table whose header starts with `header`, without its header and rule (nor the end of a region after it). */
function tableRows (text: string, header: string) {
  return paragraph(text, header).split('\n').slice(2).filter((row) => row.startsWith('|'))
}

describe('the operations, as the documents list them', () => {
  it('README: the table of operations has one row per operation of the registry, by path, in its order', async () => {
    const rows = tableRows(await readFile('README.md', 'utf8'), '| Operation | Path |')
    const paths = rows.map((row) => /`GET (\/v1\/[^`?\s]*)/.exec(row)?.[1])
    expect(paths).toEqual(OPERATIONS.map(({ path }) => `/v1${path}`))
  })

  it('docs/api.md: the GET / it shows is what the app answers', async () => {
    const shown = /^curl -s http:\/\/127\.0\.0\.1:3000\/\n# (.+)$/m.exec(await readFile('docs/api.md', 'utf8'))
    expect(shown, 'docs/api.md shows curl -s http://127.0.0.1:3000/ and its answer').not.toBeNull()
    const res = await build().inject({ url: '/' })
    expect(JSON.parse(shown![1]!)).toStrictEqual(res.json())
  })
})

describe('the data files, as the documents and the Kubernetes base list them', () => {
  it('README: the list after "Point DATA_DIR at a folder..." has one item per kind\'s file, in the registry\'s order', async () => {
    const text = await readFile('README.md', 'utf8')
    const items = text.slice(text.indexOf('Point `DATA_DIR` at a folder')).split('\n\n')[1]!.split('\n').filter((item) => item.startsWith('- '))
    expect(items.map((item) => /^- `([\w-]+\.json)`: /.exec(item)?.[1])).toEqual(FILES)
  })

  it('docs/data.md: the table of files has one row per kind, and a section of its fields, in the registry\'s order', async () => {
    const text = await readFile('docs/data.md', 'utf8')
    const rows = tableRows(text, '| File | Records |')
    expect(rows.map((row) => /^\| \[`([\w-]+\.json)`\]\(#[\w-]+\) \|/.exec(row)?.[1])).toEqual(FILES)
    const sections = [...text.matchAll(/^### `([\w-]+\.json)`\n\n.*\n\n\| Field \| Type \| Required \| Description \|$/gm)].map(([, file]) => file)
    expect(sections).toEqual(FILES)
  })

  it('docs/deployment.md: the base\'s kustomization row and the overlay\'s generators name every kind\'s file once', async () => {
    const text = await readFile('docs/deployment.md', 'utf8')
    // Of the two kustomization.yaml rows (the base's, the PostgreSQL overlay's), the one that names the data.
    const rows = text.split('\n').filter((row) => row.startsWith('| `kustomization.yaml` |') && jsonFiles(row).length > 0)
    expect(rows).toHaveLength(1)
    expect(jsonFiles(rows[0]!).sort()).toEqual([...FILES].sort())
    const overlay = [...text.matchAll(/```yaml\n([\s\S]*?)```/g)].map(([, block]) => block!).find((block) => block.includes('configMapGenerator:'))!
    const { configMapGenerator, secretGenerator } = parseYaml(overlay) as Record<string, Array<{ files: string[] }>>
    expect([...configMapGenerator!, ...secretGenerator!].flatMap(({ files }) => files).sort()).toEqual([...FILES].sort())
  })

  it('docs/postgresql.md: the row of npm run db -- export names every kind\'s file once', async () => {
    const row = line(await readFile('docs/postgresql.md', 'utf8'), '| `npm run db -- export')
    expect(jsonFiles(row).sort()).toEqual([...FILES].sort())
  })

  it('deploy/kubernetes: the ConfigMap and the Secret generate every kind\'s file once, from data/, which holds those files alone', async () => {
    const { configMapGenerator, secretGenerator } = parseYaml(await readFile('deploy/kubernetes/kustomization.yaml', 'utf8')) as Record<string, Array<{ files: string[] }>>
    const generated = [...configMapGenerator!, ...secretGenerator!].flatMap(({ files }) => files)
    expect(generated.map((file) => basename(file)).sort()).toEqual([...FILES].sort())
    expect(generated.every((file) => file.startsWith('data/'))).toBe(true)
    expect(readdirSync('deploy/kubernetes/data').sort()).toEqual([...FILES].sort())
  })
})

/** The documents that must be true today (the changelog is history). */
const CURRENT = ['README.md', 'CONTRIBUTING.md', ...readdirSync('docs').filter((file) => file.endsWith('.md')).sort().map((file) => `docs/${file}`)]

const NUMBERS = ['one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine', 'ten']

/**
 * The counts a document says in words, of what the registry counts: "three operations", "the four
 * files", "four data files", "two lists", "four kinds of record". Each is held to the registry; prose
 * that needs no count is better without one.
 */
function countsSaid (text: string) {
  const number = `(${NUMBERS.join('|')}|\\d+)`
  const counted = [
    { what: 'operations', pattern: new RegExp(`\\b${number}(?: read-only| public)? operations\\b`, 'gi'), expected: OPERATIONS.length },
    { what: 'data files', pattern: new RegExp(`\\b${number}(?: data| JSON)? files\\b`, 'gi'), expected: RECORD_KINDS.length },
    { what: 'lists', pattern: new RegExp(`\\b${number} lists\\b`, 'gi'), expected: LIST_KINDS.length },
    { what: 'kinds', pattern: new RegExp(`\\b${number} kinds of records?\\b`, 'gi'), expected: RECORD_KINDS.length }
  ]
  return counted.flatMap(({ what, pattern, expected }) => [...text.matchAll(pattern)].map(([said, count]) => ({
    said, what, count: /^\d+$/.test(count!) ? Number(count) : NUMBERS.indexOf(count!.toLowerCase()) + 1, expected
  })))
}

describe('the counts the documents say in words', () => {
  it.each(CURRENT)('%s: every count of operations, data files, lists or kinds is the registry\'s', async (document) => {
    const wrong = countsSaid(await readFile(document, 'utf8')).filter(({ count, expected }) => count !== expected)
    expect(wrong.map(({ said, what, expected }) => `"${said}": the registry has ${expected} ${what}`)).toEqual([])
  })

  it('sees a count the registry does not have', () => {
    const said = countsSaid(`Seven operations, the ${NUMBERS[RECORD_KINDS.length - 1]} files and 9 lists.`)
    expect(said.map(({ count, expected }) => count === expected)).toEqual([false, true, false])
  })
})
