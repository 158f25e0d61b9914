// The second step of `npm run build`: the programs of dist/ (compiled by tsc), each with all it imports,
// ours and our dependencies', bundled in place: the server into dist/main.js, which dist/server.js
// loads, and each command into its own file of dist/cli/, the paths package.json's scripts, the
// Dockerfile's HEALTHCHECK and the tests run; what several of them import goes to dist/chunks/. A start
// then reads a few files instead of hundreds, and resolves no package path: module loading was most of
// the time to the server's first answer, and most of a command's whole run (BENCHMARKS.md, "Commands").
// The other files of dist/ stay as tsc wrote them, for the scripts of the bench that import them.
//
// Left out of the bundle, and loaded from node_modules as before:
// - pino and its transports: pino-pretty runs in a worker thread that loads modules by name;
// - prom-client: loaded part by part, by paths into the package (src/plugins/prometheus.ts);
// - @fastify/swagger and @fastify/swagger-ui: loaded on first use, and Swagger UI serves the files
//   of its own package;
// - ioredis: loaded only when REDIS_URL is set.
// (The Ajv compiler, @fastify/ajv-compiler, is required on first use: not an import at all.)
// pg is bundled, in a chunk with the PostgreSQL source, which the server loads only when DATABASE_URL
// is set; `npm run key` and `npm run db` load it at every run, files or not, and read it sooner from
// that chunk than from its 35 files in node_modules.
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'

const DIST = fileURLToPath(new URL('../dist', import.meta.url))

// The programs; every other module of dist/ goes into one of them or into a chunk they share.
const ENTRIES = ['main.js', 'cli/mint-key.js', 'cli/check.js', 'cli/db.js', 'cli/write-docs.js', 'cli/healthcheck.js']

// What each output file puts in place of this, in its first line: the way from itself to dist/.
const DIST_FROM_HERE = '__dist_from_here__'

/**
 * A module that finds a file beside it (config.ts the bundled fixtures, package-info.ts package.json,
 * write-docs.ts the repository) does so from import.meta.url, which in a bundle is the output file's:
 * dist/main.js, dist/cli/check.js or dist/chunks/..., at another depth than the module tsc wrote. Each
 * such module gets its own URL back, from dist/ as its output file finds it.
 */
const ownUrls = {
  name: 'own-import-meta-url',
  setup (build) {
    build.onLoad({ filter: /\.js$/ }, async ({ path }) => {
      const inDist = relative(DIST, path)
      if (inDist.startsWith('..')) return undefined
      const text = await readFile(path, 'utf8')
      if (!text.includes('import.meta.url')) return undefined
      return { contents: text.replaceAll('import.meta.url', `new URL(${JSON.stringify(inDist)}, distOfBundle).href`), loader: 'js', resolveDir: dirname(path) }
    })
  }
}

const { outputFiles } = await build({
  entryPoints: ENTRIES.map((entry) => join(DIST, entry)),
  outdir: DIST,
  outbase: DIST,
  allowOverwrite: true,
  // Code shared by the programs goes to chunks, read by each program that needs it; and what main.js
  // imports only when asked (the PostgreSQL source, with pg) goes to chunks of its own, loaded then:
  // in one file, esbuild would hoist pg's import to the top, loaded at every start.
  splitting: true,
  chunkNames: 'chunks/[name]-[hash]',
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node22',
  external: ['pino', 'pino-pretty', 'thread-stream', 'prom-client', '@fastify/swagger', '@fastify/swagger-ui', 'ioredis'],
  // The CommonJS dependencies call require(): give the ES module bundle one. distOfBundle: ownUrls.
  banner: { js: `import { createRequire as createRequireOfBundle } from 'node:module'; const require = createRequireOfBundle(import.meta.url); const distOfBundle = new URL('${DIST_FROM_HERE}', import.meta.url);` },
  plugins: [ownUrls],
  // Stack traces name the TypeScript sources (with --enable-source-maps), as tsc's own maps did.
  sourcemap: true,
  write: false,
  logLevel: 'warning'
})

for (const { path, text } of outputFiles) {
  // The first line is the banner (no source maps to it): the same length or not, no mapping moves.
  const toDist = relative(dirname(path), DIST) || '.'
  const contents = path.endsWith('.js') ? text.replace(DIST_FROM_HERE, `${toDist}/`) : text
  await mkdir(dirname(path), { recursive: true })
  await writeFile(path, contents)
}
