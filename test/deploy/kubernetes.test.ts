import { readdir, readFile } from 'node:fs/promises'
import { basename, join } from 'node:path'
import { parseAllDocuments } from 'yaml'
import { Deployment, type IDeployment } from 'kubernetes-models/apps/v1/Deployment'
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler'
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget'
import { Service } from 'kubernetes-models/v1/Service'
import { beforeAll, describe, expect, it } from 'vitest'
import { DATA_FILES, loadDataFolder } from '../../src/repositories/sources/files.js'

const BASE = 'deploy/kubernetes'

/** The Kubernetes kinds the base may hold, each with its schema (kubernetes-models). */
const MODELS = {
  'apps/v1/Deployment': Deployment,
  'v1/Service': Service,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget
}

interface Kustomization {
  resources: string[]
  configMapGenerator: Array<{ name: string, files: string[] }>
  secretGenerator: Array<{ name: string, files: string[] }>
}

async function readYaml (file: string) {
  const documents = parseAllDocuments(await readFile(join(BASE, file), 'utf8'))
  if (!Array.isArray(documents)) throw new Error(`${file}: empty`)
  return documents.map((document) => {
    if (document.errors.length > 0) throw new Error(`${file}: ${document.errors[0]!.message}`)
    return document.toJS() as Record<string, unknown>
  })
}

/** Bytes in a memory quantity such as 160Mi. */
function bytes (quantity: string | number | undefined) {
  const match = /^(\d+)(Mi|Gi)$/.exec(String(quantity))
  if (!match) throw new Error(`memory quantity ${quantity}: write it in Mi or Gi`)
  return Number(match[1]) * (match[2] === 'Gi' ? 2 ** 30 : 2 ** 20)
}

describe('the Kubernetes base (deploy/kubernetes)', () => {
  let kustomization: Kustomization
  const objects: Array<{ file: string, object: Record<string, unknown> }> = []
  let deployment: Deployment
  let service: Service
  let autoscaler: HorizontalPodAutoscaler
  let budget: PodDisruptionBudget

  beforeAll(async () => {
    [kustomization] = await readYaml('kustomization.yaml') as unknown as [Kustomization]
    for (const file of kustomization.resources) {
      for (const object of await readYaml(file)) objects.push({ file, object })
    }
    const only = <T>(kind: string) => {
      const found = objects.filter(({ object }) => object.kind === kind)
      expect(found, kind).toHaveLength(1)
      return found[0]!.object as T
    }
    deployment = new Deployment(only('Deployment'))
    service = new Service(only('Service'))
    autoscaler = new HorizontalPodAutoscaler(only('HorizontalPodAutoscaler'))
    budget = new PodDisruptionBudget(only('PodDisruptionBudget'))
  })

  it('lists every manifest of the folder in kustomization.yaml', async () => {
    const manifests = (await readdir(BASE)).filter((file) => /\.ya?ml$/.test(file) && file !== 'kustomization.yaml')
    expect([...kustomization.resources].sort()).toEqual(manifests.sort())
  })

  it('holds only objects that validate against the Kubernetes schemas of their kind', () => {
    expect(objects.map(({ object }) => `${object.apiVersion}/${object.kind}`).sort()).toEqual(Object.keys(MODELS).sort())
    for (const { file, object } of objects) {
      const Model = MODELS[`${object.apiVersion}/${object.kind}` as keyof typeof MODELS]
      expect(() => new Model(object as never).validate(), file).not.toThrow()
    }
  })

  it('catches a manifest that breaks the schema', () => {
    const broken = structuredClone(deployment.toJSON()) as IDeployment
    broken.spec!.template.spec!.containers[0]!.imagePullPolicy = 'Sometimes' as never
    expect(() => new Deployment(broken).validate()).toThrow(/imagePullPolicy/)
  })

  describe('the Deployment', () => {
    const pod = () => deployment.spec!.template.spec!
    const container = () => pod().containers[0]!
    const env = (name: string) => container().env?.find((variable) => variable.name === name)?.value

    it('leaves the replica count to the autoscaler, which keeps two or more', () => {
      expect(deployment.spec!.replicas).toBeUndefined()
      expect(autoscaler.spec!.scaleTargetRef).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name: deployment.metadata!.name })
      expect(autoscaler.spec!.minReplicas).toBeGreaterThanOrEqual(2)
      expect(autoscaler.spec!.maxReplicas).toBeGreaterThan(autoscaler.spec!.minReplicas!)
    })

    it('probes liveness on /health and readiness on /ready, on the port the server listens on', () => {
      const port = container().ports!.find((candidate) => candidate.name === 'http')!
      expect(String(port.containerPort)).toBe(env('PORT'))
      expect(container().livenessProbe!.httpGet).toEqual({ path: '/health', port: 'http' })
      expect(container().readinessProbe!.httpGet).toEqual({ path: '/ready', port: 'http' })
    })

    it('pauses before SIGTERM so endpoints drain, and gives the server its whole grace period after', () => {
      const command = container().lifecycle!.preStop!.exec!.command!
      expect(command.slice(0, 1)).toEqual(['sleep'])
      const pause = Number(command[1])
      const grace = Number(env('SHUTDOWN_GRACE_MS')) / 1000
      expect(pause).toBeGreaterThan(0)
      expect(grace).toBeGreaterThan(0)
      expect(pod().terminationGracePeriodSeconds).toBeGreaterThan(pause + grace)
    })

    it('runs as the node user, read-only, without privileges or a service account token', () => {
      expect(pod().automountServiceAccountToken).toBe(false)
      expect(pod().securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 1000, seccompProfile: { type: 'RuntimeDefault' } })
      expect(container().securityContext).toEqual({
        allowPrivilegeEscalation: false,
        readOnlyRootFilesystem: true,
        runAsNonRoot: true,
        capabilities: { drop: ['ALL'] }
      })
    })

    it('mounts the fixtures (ConfigMap) and the keys (Secret) of the generators into one DATA_DIR folder', async () => {
      const mount = container().volumeMounts!.find((candidate) => candidate.mountPath === env('DATA_DIR'))!
      expect(mount.readOnly).toBe(true)
      const volume = pod().volumes!.find((candidate) => candidate.name === mount.name)!
      const sources = volume.projected!.sources!
      expect(sources.map((source) => source.configMap?.name ?? source.secret?.name)).toEqual([
        kustomization.configMapGenerator[0]!.name,
        kustomization.secretGenerator[0]!.name
      ])
      const fixtures = kustomization.configMapGenerator[0]!.files.map((file) => basename(file))
      const keys = kustomization.secretGenerator[0]!.files.map((file) => basename(file))
      expect(keys).toEqual([DATA_FILES.keys])
      expect([...fixtures, ...keys].sort()).toEqual(Object.values(DATA_FILES).sort())
    })

    it('ships generator data that the server accepts, with no key in it', async () => {
      const folders = new Set([...kustomization.configMapGenerator[0]!.files, ...kustomization.secretGenerator[0]!.files].map((file) => join(BASE, file, '..')))
      expect(folders.size).toBe(1)
      const data = await loadDataFolder([...folders][0]!)
      expect(data.keys).toEqual([])
    })

    // What the server uses is measured by npm run bench (BENCHMARKS.md) and written in docs/performance.md,
    // not here: an RSS read in a test depends on the machine that runs it.
    it('asks for memory and CPU, and caps memory above the request', () => {
      const { requests, limits } = container().resources!
      expect(bytes(requests!.memory)).toBeGreaterThan(0)
      expect(bytes(limits!.memory)).toBeGreaterThan(bytes(requests!.memory))
      expect(requests!.cpu).toBeDefined()
    })
  })

  it('serves the Deployment\'s pods through the Service and guards them with the disruption budget', () => {
    const labels = deployment.spec!.template.metadata!.labels
    expect(service.spec!.selector).toEqual(labels)
    expect(deployment.spec!.selector.matchLabels).toEqual(labels)
    expect(budget.spec!.selector!.matchLabels).toEqual(labels)
    expect(budget.spec!.maxUnavailable).toBe(1)
    const ports = deployment.spec!.template.spec!.containers[0]!.ports!.map((port) => port.name)
    expect(ports).toContain(service.spec!.ports![0]!.targetPort)
  })
})
