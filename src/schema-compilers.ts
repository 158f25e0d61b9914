import { createRequire } from 'node:module'
import type { FastifySchemaCompiler, FastifySchemaValidationError, FastifyServerOptions } from 'fastify'

type CompilersFactory = NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>
type ValidatorCompiler = FastifySchemaCompiler<unknown>

// Required on first use, not imported (see below). The same major version as Fastify's own, which
// npm installs once for both; test/schema-compilers.test.ts holds the two validators' answers equal.
const requireOnFirstUse = createRequire(import.meta.url)

/**
 * Fastify's default validation (Ajv, with Fastify's options and our shared schemas), built when a
 * request first needs it instead of when the app is built: loading Ajv (with ajv-formats and fast-uri,
 * some 90 modules) and building it was a large part of every start (docs/performance.md, "Start-up"),
 * and only the member listing's query has a schema to validate. The validator is the same Ajv code
 * with the same options, so a query passes, is coerced and defaulted, and fails with the same messages
 * as before; the first member listing of a process pays the build instead.
 */
function buildValidatorOnFirstUse (externalSchemas: unknown, ajvOptions: unknown): ValidatorCompiler {
  let compile: ValidatorCompiler | undefined
  return (route) => {
    let validate: ReturnType<ValidatorCompiler> | undefined
    // Fastify reads `errors` from the function it was given when it returns false, as from Ajv's.
    const validateOnFirstUse = Object.assign((data: unknown) => {
      if (validate === undefined) {
        compile ??= requireOnFirstUse('@fastify/ajv-compiler')()(externalSchemas, ajvOptions)
        validate = compile!(route)
      }
      const result = validate(data)
      validateOnFirstUse.errors = (validate as { errors?: FastifySchemaValidationError[] | null }).errors
      return result
    }, { errors: undefined as FastifySchemaValidationError[] | null | undefined })
    return validateOnFirstUse
  }
}

/**
 * The compilers of every route. Responses are sent with JSON.stringify: lists and members are
 * serialized once per data snapshot (a page is slices of them), the rest (errors, probes) are a few
 * bytes, and start-up compiles no serializer per response schema nor loads the serializer compiler;
 * the response schemas still document every answer.
 */
export const compilersFactory = {
  buildValidator: buildValidatorOnFirstUse,
  buildSerializer: () => () => (data: unknown) => JSON.stringify(data)
  // Fastify declares these builders with Ajv's and fast-json-stringify's own signatures; what it
  // calls them with (a route's schema definition) is FastifySchemaCompiler's.
} as unknown as CompilersFactory
