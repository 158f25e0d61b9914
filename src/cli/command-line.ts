// What every command does with its command line. --help (-h) is an option of each, so that a
// newcomer's first guess works; a command line the command does not understand exits 2 with one
// line that says so and points to --help, which a script and a reader tell apart from bad data (1).
import { parseArgs, type ParseArgsOptionsConfig } from 'node:util'
import { warnOfOldNode } from '../node-version.js'
import { ECHO_MAX, truncate } from '../truncate.js'

const HELP_OPTION = { help: { type: 'boolean', short: 'h' } } as const

/**
 * The command line of `npm run <command>` (`npm start` for the server), parsed with `options` and
 * --help; refused when it does not parse. Read first by every command, so a Node.js too old is told of here.
 */
export function readCommandLine<T extends ParseArgsOptionsConfig> (command: string, options: T, allowPositionals = false) {
  warnOfOldNode()
  try {
    return parseArgs({ options: { ...options, ...HELP_OPTION }, allowPositionals, strict: true })
  } catch (error) {
    const { code, message } = error as { code?: string, message: string }
    if (!code?.startsWith('ERR_PARSE_ARGS_')) throw error
    // Node.js's first sentence names the problem (`Unknown option '--fixture-dir'`); the next ones
    // give advice about `--` that fits none of our commands.
    const problem = message.split('. ')[0]!
    refuseCommandLine(command, problem.charAt(0).toLowerCase() + problem.slice(1))
  }
}

/** Exits 2 with one line: what is wrong with the command line, and where the usage is. */
export function refuseCommandLine (command: string, problem: string): never {
  process.stderr.write(`${problem}; see npm ${command === 'start' ? 'start' : `run ${command}`} -- --help\n`)
  process.exit(2)
}

/**
 * Exits 2 naming the command word not understood, and those that are: a word the usage line has no
 * room for would otherwise leave the reader to find it there. Quoted as JSON escapes it, and bounded,
 * so that the line stays one line.
 */
export function refuseUnknownCommand (command: string, word: string, known: string): never {
  refuseCommandLine(command, `unknown command '${truncate(JSON.stringify(word).slice(1, -1), ECHO_MAX)}' (${known})`)
}

/** --data-dir, and its former name --fixtures-dir (the folder held only the bundled fixtures then), for the commands that read or write a data folder. */
export const DATA_DIR_OPTIONS = { 'data-dir': { type: 'string' }, 'fixtures-dir': { type: 'string' } } as const

/** The data folder a command was given, by either name; both, naming different folders, are refused. */
export function dataDirOf (command: string, values: { 'data-dir'?: string, 'fixtures-dir'?: string }): string | undefined {
  const { 'data-dir': dir, 'fixtures-dir': former } = values
  if (dir !== undefined && former !== undefined && dir !== former) refuseCommandLine(command, '--fixtures-dir is the former name of --data-dir: give one of them')
  return dir ?? former
}
