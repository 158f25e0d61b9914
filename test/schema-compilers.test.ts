import Fastify, { type FastifyServerOptions } from 'fastify'
import { describe, expect, it } from 'vitest'
import { compilersFactory } from '../src/schema-compilers.js'
import { MemberPageQuerySchema } from '../src/schemas/member.js'

/** An app with one route that validates the member query and answers what the validator made of it. */
async function appValidatingQuery (options: FastifyServerOptions) {
  const app = Fastify(options)
  app.get('/members', { schema: { querystring: MemberPageQuerySchema } }, async (request) => request.query)
  await app.ready()
  return app
}

const QUERIES = ['', 'limit=5', 'offset=3&limit=2', 'limit=100', 'offset=0', 'other=1', 'limit=0', 'limit=101', 'limit=abc',
  'limit=1.5', 'limit=', 'offset=-1', 'offset=1e3', 'offset=Infinity', 'limit=5&limit=6', `limit=${'9'.repeat(400)}`]

describe('the validator built on first use', () => {
  // Our own copy of @fastify/ajv-compiler, built lazily: it must answer as the one Fastify would load
  // itself, which an upgrade of Fastify to another version of it could change.
  it('coerces, defaults and refuses every query as Fastify\'s own validator does', async () => {
    const [fastifys, ours] = await Promise.all([appValidatingQuery({}), appValidatingQuery({ schemaController: { compilersFactory } })])
    try {
      for (const query of QUERIES) {
        const expected = await fastifys.inject(`/members?${query}`)
        const actual = await ours.inject(`/members?${query}`)
        expect({ status: actual.statusCode, body: actual.json() }, query).toEqual({ status: expected.statusCode, body: expected.json() })
      }
    } finally {
      await Promise.all([fastifys.close(), ours.close()])
    }
  })
})
