// The second step of `npm run build`: the server's modules (dist/main.js, compiled by tsc, and all it
// imports, ours and our dependencies') bundled into dist/main.js itself, which dist/server.js loads.
// A start then reads one file instead of some 500, and resolves no package path: module loading was
// most of the time to the first answer. The other files of dist/ stay as tsc wrote them, for the
// command-line tools and the tests that import them.
//
// Left out of the bundle, and loaded from node_modules as before:
// - pino and its transports: pino-pretty runs in a worker thread that loads modules by name;
// - prom-client: loaded part by part, by paths into the package (src/plugins/prometheus.ts);
// - @fastify/swagger and @fastify/swagger-ui: loaded on first use, and Swagger UI serves the files
//   of its own package;
// - pg and ioredis: loaded only when DATABASE_URL or REDIS_URL is set.
// (The Ajv compiler, @fastify/ajv-compiler, is required on first use: not an import at all.)
import { dirname } from 'node:path'
import { build } from 'esbuild'

const entry = new URL('../dist/main.js', import.meta.url).pathname

await build({
  entryPoints: [entry],
  outdir: dirname(entry),
  allowOverwrite: true,
  // What main.js imports only when asked (the PostgreSQL source, with pg) goes to chunks of its own,
  // loaded then: in one file, esbuild would hoist pg's import to the top, loaded at every start.
  splitting: true,
  chunkNames: 'chunks/[name]-[hash]',
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node22',
  external: ['pino', 'pino-pretty', 'thread-stream', 'prom-client', '@fastify/swagger', '@fastify/swagger-ui', 'pg', 'ioredis'],
  // The CommonJS dependencies call require(): give the ES module bundle one.
  banner: { js: "import { createRequire as createRequireOfBundle } from 'node:module'; const require = createRequireOfBundle(import.meta.url);" },
  // Stack traces name the TypeScript sources (with --enable-source-maps), as tsc's own maps did.
  sourcemap: true,
  logLevel: 'warning'
})
