import { describe, expect, it } from 'vitest'
import { KEYS, bearer, build, makeData, makeMembers, snapshotsOf } from '../helper.js'

describe('one snapshot per request', () => {

  it('answers a request from the data it was authenticated with, even when a change is installed meanwhile', async () => {
    const directory = snapshotsOf(makeData())
    const app = build({ snapshots: directory })
    // The next snapshot revokes the key and shrinks its organization.
    const next = makeData({
      organizations: [{ id: 'org_alpha', name: 'Alpha', members: makeMembers('alpha', 3) }],
      keys: makeData().keys.filter((key) => key.name !== 'alpha-management')
    })
    let installed = false
    app.addHook('preHandler', async () => {
      if (!installed) await directory.install(next)
      installed = true
    })

    const during = await app.inject({ url: '/v1/organization/members?limit=1', headers: bearer(KEYS.alphaManagement) })
    expect(during.statusCode).toBe(200)
    expect(during.json().total_count).toBe(250)

    const after = await app.inject({ url: '/v1/organization/members?limit=1', headers: bearer(KEYS.alphaManagement) })
    expect(after.statusCode).toBe(401)
  })
})
