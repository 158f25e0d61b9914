import { join } from 'node:path'
import { Type, type Static } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { describeValueError, quoteValue } from '../schemas/describe-error.js'
import { ProviderSchema } from '../schemas/provider.js'
import { EndpointSchema } from '../schemas/endpoint.js'
import { OrganizationSchema, ApiKeySchema } from '../schemas/fixtures.js'
import { readJsonFile } from './json-file.js'

export const FIXTURE_FILES = {
  providers: 'providers.json',
  endpoints: 'zdr-endpoints.json',
  organizations: 'organizations.json',
  keys: 'keys.json'
} as const

const fileSchemas = {
  providers: Type.Array(ProviderSchema),
  endpoints: Type.Array(EndpointSchema),
  organizations: Type.Array(OrganizationSchema),
  keys: Type.Array(ApiKeySchema)
}

type FileName = keyof typeof fileSchemas

export type DirectoryData = { [name in FileName]: Static<(typeof fileSchemas)[name]> }

class FixtureError extends Error {
  override name = 'FixtureError'
}

// Compiled once: checking a million members takes a fraction of a second this way,
// and the slower error walk only runs when a file is invalid.
const checkers = Object.fromEntries(
  Object.entries(fileSchemas).map(([name, schema]) => [name, TypeCompiler.Compile(schema)])
) as { [name in FileName]: ReturnType<typeof TypeCompiler.Compile<(typeof fileSchemas)[name]>> }

/** Reads and validates the four data files; throws a FixtureError naming file, record and field. */
export async function loadFixtures (dir: string): Promise<DirectoryData> {
  const entries = await Promise.all(
    (Object.keys(fileSchemas) as FileName[]).map(async (name) => [name, await readFixture(dir, name)] as const)
  )
  const data = Object.fromEntries(entries) as DirectoryData
  assertUnique(FIXTURE_FILES.providers, data.providers.map((provider) => provider.slug), 'slug')
  assertUnique(FIXTURE_FILES.organizations, data.organizations.map((organization) => organization.id), 'id')
  assertUnique(FIXTURE_FILES.keys, data.keys.map((key) => key.sha256), 'sha256')
  // Operators revoke a key by deleting its record by name: a name must say which record.
  assertUnique(FIXTURE_FILES.keys, data.keys.map((key) => key.name), 'name')
  data.organizations.forEach((organization, index) => {
    assertUnique(FIXTURE_FILES.organizations, organization.members.map((member) => member.id), 'id', `[${index}].members`)
  })
  return data
}

async function readFixture<N extends FileName> (dir: string, name: N): Promise<DirectoryData[N]> {
  const file = FIXTURE_FILES[name]
  const value = await readJsonFile(join(dir, file), file)
  const checker = checkers[name]
  if (!checker.Check(value)) {
    const first = checker.Errors(value).First()
    throw new FixtureError(`${file}: ${first ? describeValueError(first) : 'invalid'}`)
  }
  return value as DirectoryData[N]
}

function assertUnique (file: string, values: string[], field: string, at = '') {
  const seen = new Map<string, number>()
  values.forEach((value, index) => {
    const previous = seen.get(value)
    if (previous !== undefined) {
      throw new FixtureError(`${file}: ${at}[${index}].${field}: ${quoteValue(value, field)} duplicates ${at}[${previous}].${field}`)
    }
    seen.set(value, index)
  })
}
