import { Type, type Static } from '@sinclair/typebox'
import { Nullable } from './common.js'

// Prices are decimal strings (never floats) so that no precision is lost on the way.
const PriceSchema = Type.String({ pattern: '^-?(0|[1-9][0-9]*)(\\.[0-9]+)?$' })

const PercentilesSchema = Type.Object({
  p50: Type.Number(),
  p75: Type.Number(),
  p90: Type.Number(),
  p99: Type.Number()
}, { additionalProperties: false })

const UptimeSchema = Nullable(Type.Number({ minimum: 0, maximum: 100 }))

export const EndpointSchema = Type.Object({
  model_id: Type.String({ pattern: '^[^/\\s]+/[^\\s]+$', description: 'Identifier of the model, <vendor>/<model>' }),
  model_name: Type.String({ minLength: 1 }),
  name: Type.String({ minLength: 1 }),
  provider_name: Type.String({ minLength: 1 }),
  tag: Type.String({ minLength: 1 }),
  context_length: Type.Integer({ minimum: 0 }),
  max_prompt_tokens: Nullable(Type.Integer({ minimum: 0 })),
  max_completion_tokens: Nullable(Type.Integer({ minimum: 0 })),
  pricing: Type.Object({
    prompt: PriceSchema,
    completion: PriceSchema,
    image: PriceSchema,
    request: PriceSchema
  }, { additionalProperties: false }),
  quantization: Nullable(Type.String({ minLength: 1 })),
  status: Type.Integer({ description: 'Known values: 0 (up), -1, -2, -3, -5, -10 (degrees of degradation)' }),
  supported_parameters: Type.Array(Type.String({ minLength: 1 })),
  supports_implicit_caching: Type.Boolean(),
  supports_tool_choice: Type.Object({
    auto: Type.Boolean(),
    function: Type.Boolean(),
    none: Type.Boolean(),
    required: Type.Boolean()
  }, { additionalProperties: false }),
  latency_last_30m: Nullable(PercentilesSchema),
  throughput_last_30m: Nullable(PercentilesSchema),
  uptime_last_5m: UptimeSchema,
  uptime_last_30m: UptimeSchema,
  uptime_last_1d: UptimeSchema
}, { $id: 'Endpoint', additionalProperties: false })

export type Endpoint = Static<typeof EndpointSchema>

export const EndpointListSchema = Type.Object({
  data: Type.Array(EndpointSchema)
}, { additionalProperties: false })
