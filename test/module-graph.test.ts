import { readdirSync } from 'node:fs'
import { build } from 'esbuild'
import { describe, expect, it } from 'vitest'

/** Every module of src/ with the modules of src/ it imports (statically or not), as esbuild resolves them. */
async function importsOfSources () {
  const entryPoints = readdirSync('src', { recursive: true, encoding: 'utf8' }).filter((file) => file.endsWith('.ts')).map((file) => `src/${file}`)
  const { metafile } = await build({ entryPoints, bundle: true, write: false, metafile: true, platform: 'node', format: 'esm', packages: 'external', outdir: 'unused', logLevel: 'silent' })
  return new Map(Object.entries(metafile.inputs).map(([file, { imports }]) => [file, imports.filter((i) => !i.external).map((i) => i.path)]))
}

/** The import cycles of a graph, each as the path that closes it. */
function cyclesOf (graph: Map<string, string[]>): string[] {
  const cycles: string[] = []
  const finished = new Set<string>()
  const path: string[] = []
  const visit = (file: string) => {
    path.push(file)
    for (const next of graph.get(file) ?? []) {
      if (path.includes(next)) cycles.push([...path.slice(path.indexOf(next)), next].join(' -> '))
      else if (!finished.has(next)) visit(next)
    }
    path.pop()
    finished.add(file)
  }
  for (const file of graph.keys()) if (!finished.has(file)) visit(file)
  return cycles
}

describe('the modules of src/', () => {
  // Two modules that import each other load in an order that depends on which one is imported first:
  // a constant read at load time can then be undefined.
  it('import one another without a cycle', async () => {
    expect(cyclesOf(await importsOfSources())).toEqual([])
  })

  // CONTRIBUTING, "How the code is laid out": requests reach the data through the snapshot auth pins,
  // and plugins import only types from repositories/ (esbuild drops those, as tsc does).
  it('load repositories/ neither from a plugin nor from a route, and nothing of plugins or routes from repositories/', async () => {
    const graph = await importsOfSources()
    const crossings = [...graph].flatMap(([file, imports]) => imports.filter((imported) =>
      (/^src\/(plugins|routes)\//.test(file) && imported.startsWith('src/repositories/')) ||
      (file.startsWith('src/repositories/') && /^src\/(plugins|routes)\//.test(imported))
    ).map((imported) => `${file} -> ${imported}`))
    expect(crossings).toEqual([])
    // Not vacuous: the graph does see the process load repositories/.
    expect(graph.get('src/main.ts')?.some((imported) => imported.startsWith('src/repositories/'))).toBe(true)
  })
})
