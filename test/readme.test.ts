import { createHash } from 'node:crypto'
import { existsSync, readdirSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { basename, dirname, join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { BUNDLED_FIXTURES_DIR, loadConfig } from '../src/config.js'

/** Headings outside code blocks: level and text. */
function headings (markdown: string) {
  const found: Array<{ level: number, text: string }> = []
  let inCode = false
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) inCode = !inCode
    const match = !inCode && /^(#{1,6}) (.+)$/.exec(line)
    if (match) found.push({ level: match[1]!.length, text: match[2]! })
  }
  return found
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens. */
const anchorOf = (text: string) => text.toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/ /g, '-')

/** Links outside code blocks and code spans: [text](target). */
function links (markdown: string) {
  const prose = markdown.replace(/```[\s\S]*?```/g, '').replace(/`[^`\n]*`/g, '')
  return [...prose.matchAll(/\]\(([^)\s]+)\)/g)].map(([, target]) => target!)
}

/** The reference pages: every Markdown file of docs/. */
const PAGES = readdirSync('docs').filter((file) => file.endsWith('.md')).sort().map((file) => `docs/${file}`)

/** What a newcomer or an operator reads, and must be true today (the changelog is history). */
const CURRENT = ['README.md', 'CONTRIBUTING.md', ...PAGES]
const DOCUMENTS = [...CURRENT, 'CHANGELOG.md']

/** The folders of the repository a document names files in. */
const TOP = ['src', 'test', 'scripts', 'deploy', 'docs', 'fixtures', 'examples', '.ci']

/**
 * Paths of the repository a document names, anywhere in it (prose, code spans, code blocks): a word
 * that starts with one of the top folders and a slash, not part of a URL, an absolute or a relative
 * path (links are the link test's). A `*` stands for any part of one name.
 */
function namedPaths (markdown: string) {
  // npm's own output names files of the packages it installs, not of the repository.
  markdown = markdown.split('\n').filter((line) => !/^npm (warn|notice) /.test(line)).join('\n')
  const pattern = new RegExp(`(?<![\\w./~:-])(?:${TOP.map((top) => top.replace('.', '\\.')).join('|')})/[\\w.*/-]*`, 'g')
  return [...new Set([...markdown.matchAll(pattern)].map(([path]) => path.replace(/[.,:]+$/, '')))]
}

/** Whether a path exists, a `*` in its last name matching any characters. */
function pathExists (path: string) {
  if (!path.includes('*')) return existsSync(path)
  const folder = dirname(path)
  const name = new RegExp(`^${basename(path).replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*')}$`)
  return existsSync(folder) && readdirSync(folder).some((file) => name.test(file))
}

describe('the documentation', () => {
  it('covers every page of docs/', () => {
    expect(PAGES).toEqual(expect.arrayContaining(['docs/configuration.md', 'docs/data.md', 'docs/postgresql.md', 'docs/operations.md', 'docs/deployment.md', 'docs/performance.md', 'docs/decisions.md', 'docs/troubleshooting.md', 'docs/runbook.md']))
  })

  it.each(DOCUMENTS)('%s: every link to an anchor or a file of the repository resolves', async (document) => {
    const text = await readFile(document, 'utf8')
    for (const target of links(text)) {
      if (/^[a-z]+:/.test(target)) continue
      const [path, anchor] = target.split('#')
      const file = path ? join(dirname(document), path) : document
      expect(existsSync(file), `${document}: ${target}`).toBe(true)
      if (anchor) {
        const anchors = headings(await readFile(file, 'utf8')).map(({ text: heading }) => anchorOf(heading))
        expect(anchors, `${document}: ${target}`).toContain(anchor)
      }
    }
  })

  it.each(CURRENT)('%s: every file of the repository it names exists', async (document) => {
    const paths = namedPaths(await readFile(document, 'utf8'))
    for (const path of paths) expect(pathExists(path), `${document} names ${path}`).toBe(true)
  })

  it('finds the paths a document names, and sees one that does not exist', () => {
    const paths = namedPaths('see `src/repositories/directory.ts`, src/app.ts, deploy/monitoring and http://host/docs/json\nnpm warn x   y (postinstall: node scripts/z.js)')
    expect(paths).toEqual(['src/repositories/directory.ts', 'src/app.ts', 'deploy/monitoring'])
    expect(paths.map(pathExists)).toEqual([false, true, true])
    expect(pathExists('deploy/monitoring/tests/*.test.yaml')).toBe(true)
  })

  it('README: the table of contents lists every section, in order', async () => {
    const text = await readFile('README.md', 'utf8')
    const start = text.indexOf('## Contents\n')
    expect(start).toBeGreaterThan(0)
    const toc = text.slice(start, text.indexOf('\n## ', start + 1))
    const listed = [...toc.matchAll(/^( *)- \[(.+)\]\(#(.+)\)$/gm)].map(([, indent, title, anchor]) => ({ level: indent!.length / 2 + 2, title, anchor }))
    const sections = headings(text).filter(({ level, text: title }) => level >= 2 && level <= 3 && title !== 'Contents')
    expect(listed).toEqual(sections.map(({ level, text: title }) => ({ level, title, anchor: anchorOf(title) })))
  })

  it('README: a newcomer reads it in ten minutes (at most about 300 lines), and it links every page of docs/', async () => {
    const text = await readFile('README.md', 'utf8')
    expect(text.split('\n').length).toBeLessThanOrEqual(300)
    for (const page of PAGES) expect(links(text), page).toContain(page)
  })

  it('README: each development key is in the bundled keys.json under its name, kind and organization', async () => {
    const text = await readFile('README.md', 'utf8')
    const section = text.slice(text.indexOf('## Development keys'), text.indexOf('\n## ', text.indexOf('## Development keys') + 1))
    const rows = [...section.matchAll(/^\| `([^`]+)` \| `(sk-[^`]+)` \| (\w+) \| `(\w+)`/gm)].map(([, name, key, kind, organization]) => ({ name, key: key!, kind, organization }))
    const keys = JSON.parse(await readFile(join(BUNDLED_FIXTURES_DIR, 'keys.json'), 'utf8')) as Array<{ name: string, sha256: string, kind: string, organization_id: string }>
    expect(rows.map(({ name }) => name)).toEqual(keys.map(({ name }) => name))
    for (const { name, key, kind, organization } of rows) {
      expect(keys.find((record) => record.name === name)).toEqual({ name, sha256: createHash('sha256').update(key).digest('hex'), kind, organization_id: organization })
    }
  })

  it('docs/configuration.md: documents every setting, with the default the server takes', async () => {
    const text = await readFile('docs/configuration.md', 'utf8')
    const rows = new Map([...text.matchAll(/^\| `([A-Z_]+)` \| ([^|]+) \|/gm)].map(([, name, value]) => [name!, value!.trim()]))
    const defaults = loadConfig({}) as unknown as Record<string, unknown>
    const settings = Object.keys(loadConfig({ DATABASE_URL: 'postgresql://h/d', REDIS_URL: 'redis://h', TRUST_PROXY: '1', MAX_STALENESS_MS: '1000' }))
    expect([...rows.keys()].sort()).toEqual(settings.sort())
    for (const [name, value] of rows) {
      const literal = /^`(.*)`$/.exec(value)?.[1]
      if (literal !== undefined) expect(String(defaults[name]), name).toBe(literal)
      else expect(defaults[name] === undefined || defaults[name] === '' || name === 'DATA_DIR', `${name}: ${value}`).toBe(true)
    }
  })

  it.each(CURRENT)('%s: a captured key comes from npm run -s, without npm\'s banner', async (document) => {
    const text = await readFile(document, 'utf8')
    const captures = [...text.matchAll(/\$\([^)]*npm run[^)]*\)/g)].map(([capture]) => capture)
    for (const capture of captures) expect(capture).toMatch(/npm run -s /)
  })

  it('README: shows how to capture a key', async () => {
    expect(await readFile('README.md', 'utf8')).toMatch(/\$\(npm run -s key -- /)
  })

  it.each(CURRENT)('%s: points to no spec the repository does not ship', async (document) => {
    expect(await readFile(document, 'utf8')).not.toMatch(/\bthe spec\b|spec's|spec, section/)
  })
})
