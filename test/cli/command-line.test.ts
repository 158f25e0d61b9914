import { execFile, execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { stat } from 'node:fs/promises'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'
import { countRecords, describeCounts } from '../../src/repositories/records.js'
import { loadDataFolder } from '../../src/repositories/sources/files.js'

const run = promisify(execFile)
/** Runs a command of dist/cli with no DATABASE_URL or DATA_DIR: answers its exit code and output. */
const command = (file: string, ...args: string[]) =>
  run(process.execPath, [`dist/cli/${file}`, ...args], { env: { PATH: process.env.PATH ?? '' } }).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (error: { code: number, stdout: string, stderr: string }) => ({ code: error.code, stdout: error.stdout, stderr: error.stderr }))

const COMMANDS = [
  { name: 'key', file: 'mint-key.js', usage: 'usage: npm run key -- --kind standard|management --org <organization id> --name <name> [--expires-in <duration> | --expires-at <time>] [--rate-limit <n>]' },
  { name: 'check', file: 'check.js', usage: 'usage: npm run check -- [--data-dir <dir>] [--strict]' },
  { name: 'db', file: 'db.js', usage: 'usage: npm run db -- migrate' },
  { name: 'docs', file: 'write-docs.js', usage: 'usage: npm run docs' }
]

describe('--help', () => {
  it.each(COMMANDS.flatMap((entry) => [[entry.name, '--help', entry], [entry.name, '-h', entry]] as const))(
    'npm run %s -- %s prints the usage on stdout and exits 0', async (_name, flag, { file, usage }) => {
      const { code, stdout, stderr } = await command(file, flag)
      expect({ code, stderr }).toEqual({ code: 0, stderr: '' })
      expect(stdout).toContain(`${usage}\n`)
    })

  it.each([
    ['migrate', 'usage: npm run db -- migrate\n'],
    ['import', 'usage: npm run db -- import --data-dir <dir>\n'],
    ['export', 'usage: npm run db -- export --data-dir <dir>\n'],
    ['new-migration', 'usage: npm run db -- new-migration --kind <kind>\n']
  ])('npm run db -- %s --help prints the usage of that command, and touches no database', async (subcommand, usage) => {
    const { code, stdout, stderr } = await command('db.js', subcommand, '--help')
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' })
    expect(stdout).toContain(usage)
    expect(stdout).not.toContain('usage: npm run db -- migrate\n       npm run db -- import')
  })

  it('npm run docs -- --help leaves the files it writes alone', async () => {
    const files = ['docs/openapi.json', 'README.md']
    const before = await Promise.all(files.map((file) => stat(file)))
    const { code, stderr } = await command('write-docs.js', '--help')
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' })
    expect((await Promise.all(files.map((file) => stat(file)))).map(({ mtimeMs }) => mtimeMs)).toEqual(before.map(({ mtimeMs }) => mtimeMs))
  })

  it('wins over the other options, which are not checked', async () => {
    const { code, stdout } = await command('mint-key.js', 'revoke', '--kind', 'root', '--help')
    expect(code).toBe(0)
    expect(stdout).toContain('npm run key -- revoke --name <name>')
  })
})

describe('a command line a command does not understand', () => {
  it.each(COMMANDS.map(({ name, file }) => [name, file]))('npm run %s names an unknown option and points to --help, exit 2', async (name, file) => {
    const { code, stdout, stderr } = await command(file, '--fixture-dir', 'x')
    expect({ code, stdout, stderr }).toEqual({ code: 2, stdout: '', stderr: `unknown option '--fixture-dir'; see npm run ${name} -- --help\n` })
  })

  it.each([
    ['key', 'mint-key.js', "unknown command 'frob' (rotate, expire, disable, enable, limit, revoke, prune, history, list; a key is minted without one)"],
    ['db', 'db.js', "unknown command 'frob' (migrate, trim, import, export or new-migration)"],
    // They take no command: a word is an argument they do not take.
    ['check', 'check.js', "unexpected argument 'frob'"],
    ['docs', 'write-docs.js', "unexpected argument 'frob'"]
  ])('npm run %s -- frob names the command it does not know and points to --help, exit 2', async (name, file, problem) => {
    const { code, stdout, stderr } = await command(file, 'frob')
    expect({ code, stdout, stderr }).toEqual({ code: 2, stdout: '', stderr: `${problem}; see npm run ${name} -- --help\n` })
  })

  it.each([
    ['check.js', ['--data-dir'], "option '--data-dir <value>' argument missing; see npm run check -- --help\n"],
    ['check.js', ['fixtures'], "unexpected argument 'fixtures'; see npm run check -- --help\n"],
    ['write-docs.js', ['now'], "unexpected argument 'now'; see npm run docs -- --help\n"],
    ['db.js', [], 'usage: npm run db -- migrate | trim [--older-than <duration>] | import --data-dir <dir> | export --data-dir <dir> | new-migration --kind <kind>; see npm run db -- --help\n'],
    ['db.js', ['dump', '--data-dir', 'x'], "unknown command 'dump' (migrate, trim, import, export or new-migration); see npm run db -- --help\n"],
    ['mint-key.js', ['mint', '--kind', 'standard', '--org', 'o', '--name', 'x'], "unknown command 'mint' (rotate, expire, disable, enable, limit, revoke, prune, history, list; a key is minted without one); see npm run key -- --help\n"],
    ['db.js', ['new-migration', '--kind', 'keys'], '--kind "keys" is not a list kind of the registry (providers, endpoints); see npm run db -- --help\n'],
    ['db.js', ['fr\nob'], "unknown command 'fr\\nob' (migrate, trim, import, export or new-migration); see npm run db -- --help\n"],
    ['mint-key.js', ['-x'], "unknown option '-x'; see npm run key -- --help\n"]
  ])('%s %j: one line saying what is wrong, exit 2', async (file, args, line) => {
    const { code, stdout, stderr } = await command(file, ...args)
    expect({ code, stdout, stderr }).toEqual({ code: 2, stdout: '', stderr: line })
  })

  it('is told apart from bad data, which exits 1', async () => {
    const { code, stderr } = await command('check.js', '--data-dir', 'no-such-folder')
    expect(code).toBe(1)
    expect(stderr).toMatch(/^invalid: /)
  })
})

// Debian 12's own Node.js is 20: where the machine has it, a command is run on it.
const OLD_NODE = '/usr/bin/node'
const oldNodeMajor = existsSync(OLD_NODE) ? Number(execFileSync(OLD_NODE, ['-p', 'process.versions.node.split(".")[0]']).toString()) : undefined

describe.skipIf(oldNodeMajor === undefined || oldNodeMajor >= 22)(`a command on Node.js ${oldNodeMajor} (${OLD_NODE})`, () => {
  it('says first, in one line on stderr, that it is too old and where Node.js 24 comes from, then does its work', async () => {
    const { code, stdout, stderr } = await run(OLD_NODE, ['dist/cli/check.js', '--data-dir', 'fixtures'], { env: { PATH: process.env.PATH ?? '' } })
      .then(({ stdout, stderr }) => ({ code: 0, stdout, stderr }), (error: { code: number, stdout: string, stderr: string }) => error)
    expect({ code, stdout }).toEqual({ code: 0, stdout: `fixtures: valid: ${describeCounts(countRecords(await loadDataFolder('fixtures')))}\n` })
    // First; then what check warns of in the bundled data (a key of a deleted organization, kept on purpose).
    expect(stderr).toMatch(new RegExp(`^warning: Node.js ${oldNodeMajor}\\.\\d+\\.\\d+ is older than this service supports \\(22 or later\\)[^\\n]*npm registry[^\\n]*\\n(warning: keys\\.json: [^\\n]*\\n)*$`))
  })
})
