// Run by the Dockerfile, as root, once the server's files are in place: makes V8's compile cache of the
// server's modules in dist/compile-cache for the user the image runs as, so that each start of a
// container reads its modules' compiled code instead of compiling them again. A container cannot keep
// a cache of its own: its root file system is read-only (the Kubernetes manifests) or new at each
// start, where the one Node.js keeps in the temporary folder would be missing at every start that
// matters. Node.js keeps one cache per user id, named after it: this process becomes that user before
// it makes it. `dist/server.js --help` loads every module a start loads, prints its help and returns.
// The Dockerfile then gives the files to root, readable by all, as the rest of the image.
import { chownSync, mkdirSync } from 'node:fs'
import module from 'node:module'
import { fileURLToPath } from 'node:url'

/** The Dockerfile's `USER node`. */
const IMAGE_USER = 1000

const cache = fileURLToPath(new URL('../compile-cache', import.meta.url))
mkdirSync(cache, { recursive: true })
// As another user (tests that rebuild the image without root), the cache is that user's.
if (process.getuid?.() === 0) {
  chownSync(cache, IMAGE_USER, IMAGE_USER)
  process.setgroups!([])
  process.setgid!(IMAGE_USER)
  process.setuid!(IMAGE_USER)
}
const { status, message } = module.enableCompileCache(cache)
if (status !== module.constants.compileCacheStatus.ENABLED) throw new Error(`cannot make the compile cache in ${cache}: ${message ?? status}`)
process.argv.splice(2, Infinity, '--help')
await import('../server.js')
