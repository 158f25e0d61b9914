import { existsSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { describe, expect, it } from 'vitest'

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

const DOCUMENTS = ['README.md', 'CONTRIBUTING.md', 'CHANGELOG.md', 'docs/runbook.md']

describe('the documentation', () => {
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

  it('README: the table of contents lists every section, in order', async () => {
    const text = await readFile('README.md', 'utf8')
    const start = text.indexOf('## Contents\n')
    expect(start).toBeGreaterThan(0)
    const toc = text.slice(start, text.indexOf('\n## ', start + 1))
    const listed = [...toc.matchAll(/^( *)- \[(.+)\]\(#(.+)\)$/gm)].map(([, indent, title, anchor]) => ({ level: indent!.length / 2 + 2, title, anchor }))
    const sections = headings(text).filter(({ level, text: title }) => level >= 2 && level <= 3 && title !== 'Contents')
    expect(listed).toEqual(sections.map(({ level, text: title }) => ({ level, title, anchor: anchorOf(title) })))
  })

  it('README: a captured key comes from npm run -s, without npm\'s banner', async () => {
    const text = await readFile('README.md', 'utf8')
    const captures = [...text.matchAll(/\$\([^)]*npm run[^)]*\)/g)].map(([capture]) => capture)
    expect(captures.length).toBeGreaterThan(0)
    for (const capture of captures) expect(capture).toMatch(/npm run -s /)
  })

  it('README: points to no spec the repository does not ship', async () => {
    expect(await readFile('README.md', 'utf8')).not.toMatch(/\bthe spec\b|spec's|spec, section/)
  })
})
