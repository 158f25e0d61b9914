/** The oldest major version of Node.js this service supports: package.json's engines (a test holds them equal). */
const OLDEST_SUPPORTED = 22

/**
 * One line for a Node.js older than OLDEST_SUPPORTED, undefined for one supported. An older one still
 * runs the service today, so the line warns rather than refuses: but nothing tests it there, and the
 * majors before 22 get no security fixes any more.
 */
export function oldNodeWarning (version: string): string | undefined {
  if (Number(version.split('.')[0]) >= OLDEST_SUPPORTED) return undefined
  return `warning: Node.js ${version} is older than this service supports (${OLDEST_SUPPORTED} or later) and past its end of life; ` +
    'Node.js 24 comes from nvm use (.nvmrc), or from the npm registry without one (README.md, "Node.js 24 from the npm registry")'
}

/** Writes oldNodeWarning's line for the Node.js running, if any, on stderr: before anything else a program says. */
export function warnOfOldNode () {
  const warning = oldNodeWarning(process.versions.node)
  if (warning !== undefined) process.stderr.write(`${warning}\n`)
}
