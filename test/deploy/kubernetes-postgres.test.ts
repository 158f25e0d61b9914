import { readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { parseAllDocuments, parseDocument } from 'yaml'
import { Deployment } from 'kubernetes-models/apps/v1/Deployment'
import { CronJob } from 'kubernetes-models/batch/v1/CronJob'
import { Job } from 'kubernetes-models/batch/v1/Job'
import { beforeAll, describe, expect, it } from 'vitest'

const BASE = 'deploy/kubernetes'
const VARIANT = 'deploy/kubernetes-postgres'

type Node = Record<string, unknown>

async function readYaml (file: string) {
  const documents = parseAllDocuments(await readFile(file, 'utf8'))
  if (!Array.isArray(documents)) throw new Error(`${file}: empty`)
  return documents.map((document) => {
    if (document.errors.length > 0) throw new Error(`${file}: ${document.errors[0]!.message}`)
    return document.toJS() as Node
  })
}

// The merge keys of the lists the patch touches (Kubernetes' strategic merge patch).
const MERGE_KEYS: Record<string, string> = { containers: 'name', env: 'name', volumeMounts: 'mountPath', volumes: 'name' }

/** Kustomize's strategic merge, for what the variant's Deployment patch uses: maps, keyed lists, `$patch: delete`. */
function strategicMerge (base: unknown, patch: unknown, field = ''): unknown {
  if (Array.isArray(patch) && Array.isArray(base) && MERGE_KEYS[field]) {
    const key = MERGE_KEYS[field]!
    const merged = [...base] as Node[]
    for (const item of patch as Node[]) {
      const index = merged.findIndex((existing) => existing[key] === item[key])
      if (item.$patch === 'delete') {
        expect(index, `${field} ${item[key]} to delete`).toBeGreaterThanOrEqual(0)
        merged.splice(index, 1)
      } else if (index >= 0) merged[index] = strategicMerge(merged[index], item) as Node
      else merged.push(item)
    }
    return merged
  }
  if (patch && typeof patch === 'object' && !Array.isArray(patch) && base && typeof base === 'object') {
    const merged: Node = { ...(base as Node) }
    for (const [name, value] of Object.entries(patch)) merged[name] = strategicMerge(merged[name], value, name)
    return merged
  }
  return patch
}

describe('the PostgreSQL variant of the Kubernetes manifests (deploy/kubernetes-postgres)', () => {
  let kustomization: { resources: string[], patches: Array<{ path?: string, patch?: string }> }
  let base: { configMapGenerator: Array<{ name: string }>, secretGenerator: Array<{ name: string }> }
  let deployment: Deployment
  let job: Job
  let cronJob: CronJob

  beforeAll(async () => {
    kustomization = (await readYaml(join(VARIANT, 'kustomization.yaml')))[0] as typeof kustomization
    base = (await readYaml(join(BASE, 'kustomization.yaml')))[0] as typeof base
    const [baseDeployment] = await readYaml(join(BASE, 'deployment.yaml'))
    const [patch] = await readYaml(join(VARIANT, 'deployment-database.yaml'))
    deployment = new Deployment(strategicMerge(baseDeployment, patch) as never)
    const [jobObject] = await readYaml(join(VARIANT, 'migrate-job.yaml'))
    job = new Job(jobObject as never)
    const [cronJobObject] = await readYaml(join(VARIANT, 'trim-cronjob.yaml'))
    cronJob = new CronJob(cronJobObject as never)
  })

  it('builds on the base and lists every file of its folder', async () => {
    expect(kustomization.resources).toContain('../kubernetes')
    const files = (await readdir(VARIANT)).filter((file) => file !== 'kustomization.yaml').sort()
    const listed = [...kustomization.resources.filter((file) => file.endsWith('.yaml')), ...kustomization.patches.flatMap(({ path }) => path ? [path] : [])]
    expect(listed.sort()).toEqual(files)
  })

  it('holds objects that validate against the Kubernetes schemas, the patched Deployment included', () => {
    expect(() => job.validate()).not.toThrow()
    expect(() => cronJob.validate()).not.toThrow()
    expect(() => deployment.validate()).not.toThrow()
  })

  it('drops the base\'s data set: no ConfigMap, no keys Secret, no volume, no DATA_DIR', () => {
    const deleted = kustomization.patches.flatMap(({ patch }) => patch ? [parseDocument(patch).toJS() as Node] : [])
      .filter((object) => object.$patch === 'delete')
      .map((object) => `${object.kind}/${(object.metadata as Node).name}`)
    expect(deleted.sort()).toEqual([`ConfigMap/${base.configMapGenerator[0]!.name}`, `Secret/${base.secretGenerator[0]!.name}`])
    const pod = deployment.spec!.template.spec!
    expect(pod.volumes).toEqual([])
    expect(pod.containers[0]!.volumeMounts).toEqual([])
    expect(pod.containers[0]!.env!.map((variable) => variable.name)).not.toContain('DATA_DIR')
  })

  it('gives the pods and the migration Job the same DATABASE_URL, from a Secret', () => {
    const url = (env: Array<{ name: string, valueFrom?: unknown }> | undefined) => env?.find((variable) => variable.name === 'DATABASE_URL')?.valueFrom
    const fromPods = url(deployment.spec!.template.spec!.containers[0]!.env)
    expect(fromPods).toEqual({ secretKeyRef: { name: expect.any(String), key: expect.any(String) } })
    expect(url(job.spec!.template.spec!.containers[0]!.env)).toEqual(fromPods)
    expect(url(cronJob.spec!.jobTemplate.spec!.template.spec!.containers[0]!.env)).toEqual(fromPods)
  })

  it('trims the change log with the command of npm run db -- trim, one Job at a time, in the service\'s image, as the node user', async () => {
    const scripts = JSON.parse(await readFile('package.json', 'utf8')).scripts as Record<string, string>
    const spec = cronJob.spec!.jobTemplate.spec!.template.spec!
    const container = spec.containers[0]!
    expect(`node scripts/build.mjs --if-stale && exec ${container.command!.slice(0, 3).join(' ')}`).toBe(scripts.db)
    expect(container.command!.slice(3)).toEqual(['trim'])
    expect(cronJob.spec!.concurrencyPolicy).toBe('Forbid')
    expect(container.image).toBe(deployment.spec!.template.spec!.containers[0]!.image)
    expect(spec.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 1000 })
    expect(container.securityContext).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false })
  })

  it('migrates with the command of npm run db -- migrate, in the service\'s image, as the node user', async () => {
    const scripts = JSON.parse(await readFile('package.json', 'utf8')).scripts as Record<string, string>
    const container = job.spec!.template.spec!.containers[0]!
    expect(`node scripts/build.mjs --if-stale && exec ${container.command!.slice(0, 3).join(' ')}`).toBe(scripts.db)
    expect(container.command!.slice(3)).toEqual(['migrate'])
    expect(container.image).toBe(deployment.spec!.template.spec!.containers[0]!.image)
    expect(job.spec!.template.spec!.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 1000 })
    expect(container.securityContext).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false })
  })
})
