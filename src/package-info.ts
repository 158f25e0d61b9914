import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'

/**
 * The name and version of package.json, the one place they are written. Read from the file, beside
 * src/ and dist/ alike (and beside the bundled dist/main.js, one level down too), rather than imported:
 * a JSON import from outside src/ is outside tsc's root. Read on first use, so that a start reads no
 * more files than it did.
 */
let info: Promise<{ name: string, version: string }> | undefined
export function packageInfo () {
  info ??= readFile(new URL('../package.json', import.meta.url), 'utf8').then((text) => {
    const { name, version } = JSON.parse(text) as { name: string, version: string }
    return { name, version }
  })
  return info
}

/** The alerts' runbook, beside src/ and dist/ (and the bundled dist/main.js) as package.json is: the image holds it too. */
export const RUNBOOK_FILE = fileURLToPath(new URL('../docs/runbook.md', import.meta.url))
