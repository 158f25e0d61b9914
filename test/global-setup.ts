import { execFileSync } from 'node:child_process'

export default function setup () {
  // As npm start does: dist/ built from the current sources, and not built again when it is.
  execFileSync(process.execPath, ['scripts/build.mjs', '--if-stale'], { stdio: 'inherit' })
}
