import { existsSync } from 'node:fs'
import { chromium } from 'playwright-core'

// Debian's Chromium, never a downloaded browser; .ci/run installs it when it is missing.
const CHROMIUM = '/usr/bin/chromium'
// No sandbox (containers, root), no GPU, and none of the background traffic a fresh profile starts.
const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run']

/** Headless Chromium; throws, so that the test fails rather than skips, where it is missing: a page nobody has run is not tested. */
export function launchChromium () {
  if (!existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: install it with \`apt-get update && apt-get install -y chromium\``)
  return chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS })
}
