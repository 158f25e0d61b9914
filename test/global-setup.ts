import { execFileSync } from 'node:child_process'

export default function setup () {
  // `npm run build`: tsc, then the server's bundle.
  execFileSync(process.execPath, ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.build.json'], { stdio: 'inherit' })
  execFileSync(process.execPath, ['scripts/bundle.mjs'], { stdio: 'inherit' })
}
