import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { cp, mkdir, readdir, readFile, stat } from 'node:fs/promises'
import { basename, dirname, join, posix } from 'node:path'
import dockerignoreModule from '@balena/dockerignore'
import { DockerfileParser, type Cmd, type Copy, type Env, type From, type Healthcheck, type Instruction, type Run } from 'dockerfile-ast'

// The package is CommonJS (module.exports is the factory), but its types declare an ES default export.
const dockerignore = dockerignoreModule as unknown as typeof dockerignoreModule.default

/** One stage of the Dockerfile, rebuilt in a folder of its own. */
export interface Stage {
  name: string | null
  /** The FROM image, `name:tag`. */
  image: string
  /** The stage's filesystem: an absolute path in the image is this folder plus that path. */
  root: string
  workdir: string
  env: Record<string, string>
  user: string | null
  expose: string[]
  cmd: string[] | null
  healthcheck: { options: Record<string, string>, cmd: string[] } | null
  /** Every RUN command, in order, as the shell got it. */
  runs: string[]
}

/** Where an absolute path of the image lives on this machine. */
export const hostPath = (stage: Stage, path: string) => join(stage.root, posix.resolve(stage.workdir, path))

/**
 * Rebuilds what `docker build` would, without Docker: copies the build context as .dockerignore
 * filters it, then carries out each stage's instructions in a folder standing for its
 * filesystem. COPY copies, RUN runs the command on this machine (its Node.js, not the image's),
 * a cache mount is npm's own cache. An instruction or flag this does not know fails the build,
 * so the Dockerfile cannot do something this rebuild silently skips.
 */
export async function buildImage (repository: string, workspace: string): Promise<Stage[]> {
  const context = join(workspace, 'context')
  await copyContext(repository, context)
  const dockerfile = DockerfileParser.parse(await readFile(join(repository, 'Dockerfile'), 'utf8'))

  const stages: Stage[] = []
  for (const instruction of dockerfile.getInstructions()) {
    const keyword = instruction.getKeyword()
    if (keyword === 'FROM') {
      const from = instruction as From
      const root = join(workspace, `stage-${stages.length}`)
      await mkdir(root, { recursive: true })
      stages.push({ name: from.getBuildStage(), image: `${from.getImageName()}:${from.getImageTag()}`, root, workdir: '/', env: {}, user: null, expose: [], cmd: null, healthcheck: null, runs: [] })
      continue
    }
    const stage = stages.at(-1)
    if (stage === undefined) throw new Error(`${keyword} before FROM`)
    switch (keyword) {
      case 'WORKDIR':
        stage.workdir = posix.resolve(stage.workdir, instruction.getArgumentsContent() ?? '')
        await mkdir(hostPath(stage, '.'), { recursive: true })
        break
      case 'COPY':
        await copy(instruction as Copy, stage, stages, context)
        break
      case 'RUN':
        await run(instruction as Run, stage)
        break
      case 'ENV':
        for (const property of (instruction as Env).getProperties()) stage.env[property.getName()] = property.getValue() ?? ''
        break
      case 'USER':
        stage.user = instruction.getArgumentsContent()
        break
      case 'EXPOSE':
        stage.expose.push(...instruction.getArguments().map((argument) => argument.getValue()))
        break
      case 'HEALTHCHECK':
        stage.healthcheck = healthcheck(instruction as Healthcheck)
        break
      case 'CMD':
        stage.cmd = execForm(instruction as Cmd)
        break
      default:
        throw new Error(`the rebuild does not know ${keyword} (line ${line(instruction)}): teach test/image.ts`)
    }
  }
  return stages
}

/** The context `docker build .` sends: the repository less what .dockerignore excludes. */
async function copyContext (repository: string, context: string) {
  const rules = (await readFile(join(repository, '.dockerignore'), 'utf8')).split('\n')
  const ignore = dockerignore().add(rules)
  const exceptions = rules.map((rule) => rule.trim()).filter((rule) => rule.startsWith('!')).map((rule) => rule.slice(1))
  const walk = async (relative: string): Promise<void> => {
    for (const entry of await readdir(join(repository, relative), { withFileTypes: true })) {
      const path = relative ? `${relative}/${entry.name}` : entry.name
      if (entry.isDirectory()) {
        // Like Docker, skip an excluded folder unless an exception reaches inside it.
        if (!ignore.ignores(path) || exceptions.some((exception) => exception.startsWith(`${path}/`))) await walk(path)
      } else if (!ignore.ignores(path)) {
        await cp(join(repository, path), join(context, path))
      }
    }
  }
  await walk('')
}

async function copy (instruction: Copy, stage: Stage, stages: Stage[], context: string) {
  const flags = instruction.getFlags()
  const unknown = flags.find((flag) => flag.getName() !== 'from')
  if (unknown || instruction.getOpeningBracket()) throw new Error(`the rebuild does not know this form of COPY (line ${line(instruction)})`)
  const fromName = instruction.getFromFlag()?.getValue()
  const from = fromName === undefined ? undefined : stages.find((candidate) => candidate.name === fromName)
  if (fromName !== undefined && from === undefined) throw new Error(`COPY --from=${fromName}: no such stage`)

  const args = instruction.getArguments().map((argument) => argument.getValue())
  const destination = args.pop()
  if (destination === undefined || args.length === 0) throw new Error(`COPY needs a source and a destination (line ${line(instruction)})`)
  const into = hostPath(stage, destination)
  for (const source of args) {
    if (/[*?[]/.test(source)) throw new Error(`the rebuild does not expand wildcards in COPY (line ${line(instruction)})`)
    const origin = from ? hostPath(from, source) : join(context, posix.normalize(source))
    // A missing source fails `docker build`; it fails here too.
    const isFolder = (await stat(origin)).isDirectory()
    // Docker copies a folder's contents; a file goes into a destination ending in / (or given
    // several sources), else becomes the destination.
    const target = isFolder || !(destination.endsWith('/') || args.length > 1) ? into : join(into, basename(origin))
    await mkdir(isFolder ? target : dirname(target), { recursive: true })
    await cp(origin, target, { recursive: true })
  }
}

async function run (instruction: Run, stage: Stage) {
  for (const flag of instruction.getFlags()) {
    // A cache mount keeps npm's cache between builds; npm's cache on this machine does the same.
    if (!(flag.getName() === 'mount' && flag.getOption('type')?.getValue() === 'cache')) {
      throw new Error(`the rebuild does not know RUN --${flag.getName()} (line ${line(instruction)})`)
    }
  }
  if (instruction.getOpeningBracket()) throw new Error(`the rebuild runs only the shell form of RUN (line ${line(instruction)})`)
  if (stage.user !== null) throw new Error(`the rebuild runs RUN as root only, not after USER (line ${line(instruction)})`)
  const command = instruction.getArgumentsContent() ?? ''
  stage.runs.push(command)
  // This machine's environment (npm's registry settings, certificates) under the image's ENV.
  const child = spawn('sh', ['-c', command], { cwd: hostPath(stage, '.'), env: { ...process.env, ...stage.env }, stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { output += chunk })
  const [code] = await once(child, 'exit')
  if (code !== 0) throw new Error(`RUN ${command} (line ${line(instruction)}) exited ${code}:\n${output}`)
}

function healthcheck (instruction: Healthcheck) {
  const options = Object.fromEntries(instruction.getFlags().map((flag) => [flag.getName(), flag.getValue() ?? '']))
  const text = instruction.getArgumentsContent() ?? ''
  if (instruction.getSubcommand()?.getValue() !== 'CMD' || !text.replace(/^CMD\s+/, '').startsWith('[')) {
    throw new Error(`HEALTHCHECK must be CMD in exec form (line ${line(instruction)})`)
  }
  return { options, cmd: JSON.parse(text.replace(/^CMD\s+/, '')) as string[] }
}

function execForm (instruction: Cmd) {
  if (!instruction.getOpeningBracket()) throw new Error(`CMD must be in exec form, so that signals reach the process (line ${line(instruction)})`)
  return instruction.getJSONStrings().map((string) => string.getJSONValue())
}

const line = (instruction: Instruction) => instruction.getRange().start.line + 1
