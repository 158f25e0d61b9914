import { Type, type Static } from '@sinclair/typebox'
import { IDENTIFIER_MAX, NAME_MAX, Nullable } from './common.js'

// Prices are decimal strings (never floats) so that no precision is lost on the way; bounded as an identifier is.
const PriceSchema = (description: string) => Type.String({ maxLength: IDENTIFIER_MAX, pattern: '^-?(0|[1-9][0-9]*)(\\.[0-9]+)?$', description })

const PercentilesSchema = (unit: string) => Type.Object({
  p50: Type.Number({ description: `Median, in ${unit}` }),
  p75: Type.Number({ description: `75th percentile, in ${unit}` }),
  p90: Type.Number({ description: `90th percentile, in ${unit}` }),
  p99: Type.Number({ description: `99th percentile, in ${unit}` })
}, { additionalProperties: false })

const UptimeSchema = (period: string) => Nullable(Type.Number({ minimum: 0, maximum: 100 }), {
  description: `Uptime percentage over the last ${period} (0 to 100), or null when not measured`
})

const endpointExample = {
  model_id: 'openai/gpt-5',
  model_name: 'OpenAI: GPT-5',
  name: 'OpenAI | openai/gpt-5',
  provider_name: 'OpenAI',
  tag: 'openai',
  context_length: 400000,
  max_prompt_tokens: 272000,
  max_completion_tokens: 128000,
  pricing: { prompt: '0.00000125', completion: '0.00001', image: '0', request: '0' },
  quantization: null,
  status: 0,
  supported_parameters: ['max_tokens', 'temperature', 'top_p', 'stop', 'seed', 'response_format', 'tools', 'tool_choice'],
  supports_implicit_caching: true,
  supports_tool_choice: { auto: true, function: true, none: true, required: true },
  latency_last_30m: { p50: 812, p75: 1137, p90: 1705, p99: 3492 },
  throughput_last_30m: { p50: 71.3, p75: 61.32, p90: 49.91, p99: 29.23 },
  uptime_last_5m: 100,
  uptime_last_30m: 99.93,
  uptime_last_1d: 99.81
}

export const EndpointSchema = Type.Object({
  model_id: Type.String({ maxLength: IDENTIFIER_MAX, pattern: '^[^/\\s]+/[^\\s]+$', description: 'Identifier of the model, in the form <vendor>/<model>' }),
  model_name: Type.String({ minLength: 1, maxLength: NAME_MAX, description: 'Display name of the model' }),
  name: Type.String({ minLength: 1, maxLength: NAME_MAX, description: 'Display name of the endpoint' }),
  provider_name: Type.String({ minLength: 1, maxLength: NAME_MAX, description: 'Display name of the provider' }),
  tag: Type.String({ minLength: 1, maxLength: IDENTIFIER_MAX, description: 'Tag of the endpoint (provider-derived label)' }),
  context_length: Type.Integer({ minimum: 0, description: 'Context length of the endpoint, in tokens' }),
  max_prompt_tokens: Nullable(Type.Integer({ minimum: 0 }), { description: 'Maximum prompt tokens, or null when not stated' }),
  max_completion_tokens: Nullable(Type.Integer({ minimum: 0 }), { description: 'Maximum completion tokens, or null when not stated' }),
  pricing: Type.Object({
    prompt: PriceSchema('Price of prompt tokens'),
    completion: PriceSchema('Price of completion tokens'),
    image: PriceSchema('Price of an image'),
    request: PriceSchema('Price of a request')
  }, { additionalProperties: false, description: 'Prices, each a decimal number in a string; -1 marks variable pricing upstream' }),
  quantization: Nullable(Type.String({ minLength: 1, maxLength: IDENTIFIER_MAX }), { description: 'Quantization level label, or null when not stated' }),
  status: Type.Integer({ description: 'Numeric status of the endpoint. Known values: 0 (up), -1, -2, -3, -5, -10 (degrees of degradation)' }),
  supported_parameters: Type.Array(Type.String({ minLength: 1, maxLength: IDENTIFIER_MAX }), { description: 'Names of the request parameters the endpoint supports' }),
  supports_implicit_caching: Type.Boolean({ description: 'Whether the endpoint supports implicit caching' }),
  supports_tool_choice: Type.Object({
    auto: Type.Boolean(),
    function: Type.Boolean(),
    none: Type.Boolean(),
    required: Type.Boolean()
  }, { additionalProperties: false, description: 'Which values of the tool_choice request parameter the endpoint supports' }),
  latency_last_30m: Nullable(PercentilesSchema('milliseconds'), { description: 'Latency percentiles over the last 30 minutes, in milliseconds, or null when not measured' }),
  throughput_last_30m: Nullable(PercentilesSchema('tokens per second'), { description: 'Throughput percentiles over the last 30 minutes, in tokens per second, or null when not measured' }),
  uptime_last_5m: UptimeSchema('5 minutes'),
  uptime_last_30m: UptimeSchema('30 minutes'),
  uptime_last_1d: UptimeSchema('day')
}, {
  $id: 'Endpoint',
  additionalProperties: false,
  description: 'A model endpoint available under zero data retention (ZDR); every key is always present',
  examples: [endpointExample]
})

export type Endpoint = Static<typeof EndpointSchema>

export const EndpointListSchema = Type.Object({
  data: Type.Array(EndpointSchema)
}, {
  additionalProperties: false,
  description: 'The endpoints available under ZDR, in the order of the data file',
  examples: [{ data: [endpointExample] }]
})
