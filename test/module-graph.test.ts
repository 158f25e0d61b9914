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
})
