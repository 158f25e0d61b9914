import { readFile } from 'node:fs/promises'
import { describe, expect, it } from 'vitest'
import { anchorOf, runbookPage } from '../../src/routes/runbook.js'
import { build } from '../helper.js'

describe('GET /runbook', () => {
  it('serves the alerts\' runbook without a key, as a page whose every heading is its anchor, with nothing to run', async () => {
    const app = build()
    const res = await app.inject({ url: '/runbook' })
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toBe('text/html; charset=utf-8')
    expect(res.headers['content-security-policy']).toContain("default-src 'none'")
    expect(res.body).not.toContain('<script')
    const markdown = await readFile('docs/runbook.md', 'utf8')
    const headings = [...markdown.matchAll(/^## (.+)$/gm)].map(([, heading]) => heading!)
    expect(headings).toContain('DirectoryChangeRefused')
    for (const heading of headings) expect(res.body).toContain(`<h2 id="${anchorOf(heading)}">`)
    expect((await app.inject({ url: '/' })).json()).toMatchObject({ runbook: '/runbook' })
  })

  it('keeps a line that starts with # inside a code fence as text, and escapes what it shows', () => {
    const page = runbookPage('# Title\n\n```sh\n# a comment\n```\n\n## A <b>heading</b> & more\n')
    expect(page).toContain('<h1 id="title">Title</h1>')
    expect(page).toContain('\n# a comment\n')
    expect(page).toContain('<h2 id="a-bheadingb--more">A &#60;b&#62;heading&#60;/b&#62; &#38; more</h2>')
  })
})
