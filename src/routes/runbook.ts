import { readFile } from 'node:fs/promises'
import type { FastifyPluginAsync } from 'fastify'
import { RUNBOOK_FILE } from '../package-info.js'

/**
 * What the page may do: show its own text and styles, nothing else (no script, no request elsewhere).
 * Its text is the operators' runbook, not a stranger's: the policy is there for what an alert links to.
 */
const CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

const escape = (text: string) => text.replace(/[&<>"]/g, (character) => `&#${character.charCodeAt(0)};`)

/** A heading's anchor as GitHub makes it (`## DirectoryChangeRefused` is `#directorychangerefused`), which the alerts' runbook_url name. */
export const anchorOf = (heading: string) => heading.toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/ /g, '-')

/**
 * The runbook as a page: its Markdown as written, in a preformatted block, each heading outside a code
 * fence made an element with its anchor, so that an alert's link lands on its entry. Not rendered
 * further: a Markdown library would be a dependency for one page that reads well as it is.
 */
export function runbookPage (markdown: string): string {
  let fenced = false
  const body = markdown.split('\n').map((line) => {
    if (line.startsWith('```')) fenced = !fenced
    const heading = fenced ? null : /^(#{1,6}) (.+)$/.exec(line)
    if (heading === null) return escape(line)
    const level = heading[1]!.length
    return `</pre><h${level} id="${escape(anchorOf(heading[2]!))}">${escape(heading[2]!)}</h${level}><pre>`
  }).join('\n')
  const title = /^# (.+)$/m.exec(markdown)?.[1] ?? 'Runbook'
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>${escape(title)}</title>
<style>body{max-width:60rem;margin:1rem auto;padding:0 1rem;font-family:system-ui,sans-serif}pre{white-space:pre-wrap;font-size:.95rem}h1,h2,h3{margin:1.5rem 0 .5rem}</style>
</head><body><pre>${body}</pre></body></html>
`
}

/**
 * GET /runbook: the runbook of the alerts (docs/runbook.md) of this very release, without a key, like
 * /docs. The alerts' runbook_url link here by default (deploy/monitoring): a link an operator can open,
 * where a path in the repository cannot be. Read once, on first use.
 */
const runbookRoutes: FastifyPluginAsync = async (app) => {
  let page: Promise<string> | undefined
  app.get('/runbook', { schema: { hide: true } }, async (_request, reply) => {
    page ??= readFile(RUNBOOK_FILE, 'utf8').then(runbookPage)
    reply.type('text/html; charset=utf-8').header('content-security-policy', CONTENT_SECURITY_POLICY)
    return await page
  })
}

export default runbookRoutes
