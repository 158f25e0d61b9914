// The process's entry point. V8's compile cache is turned on first, so that the modules loaded next
// (some 600 files of Fastify, its plugins and ours) are read from it instead of compiled again:
// static imports would all be loaded before any line of this file ran, hence the dynamic import.
// The cache is kept in NODE_COMPILE_CACHE, or else in the system's temporary folder; where that
// cannot be written (a read-only root file system), Node.js carries on without it. The image brings one
// made at build, which it only reads (src/cli/compile-cache.ts).
import module from 'node:module'

module.enableCompileCache?.()
await import('./main.js')
