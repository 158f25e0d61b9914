import { readFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'

// The pinned SDK's function for each of the three operations.
const FUNCTIONS = ['providersList', 'endpointsListZdrEndpoints', 'organizationListMembers']

/**
 * The headers the pinned @openrouter/sdk sets on each of the three operations from its options (httpReferer,
 * appTitle, appCategories), read from its code rather than copied from its docs, so that a header a new pin
 * sends fails the tests until CORS allows it. Each function writes them as `"Name": encodeSimple(...)`.
 */
export async function sdkRequestHeaders (): Promise<Record<string, string[]>> {
  const sdk = dirname(createRequire(import.meta.url).resolve('@openrouter/sdk'))
  return Object.fromEntries(await Promise.all(FUNCTIONS.map(async (name) => {
    const code = await readFile(join(sdk, 'funcs', `${name}.js`), 'utf8')
    return [name, [...code.matchAll(/"([A-Za-z-]+)": encodeSimple\(/g)].map((match) => match[1]!)]
  })))
}
