import { Type, type Static, type TOptional } from '@sinclair/typebox'
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

/** OpenRouter's Quantization enumeration: a label outside it is a typo far more often than a new format. */
const QUANTIZATIONS = ['int4', 'int8', 'fp4', 'mxfp4', 'nvfp4', 'fp6', 'fp8', 'mxfp8', 'fp16', 'bf16', 'fp32', 'unknown'] as const

const UTC_DAYS = ['monday', 'tuesday', 'wednesday', 'thursday', 'friday', 'saturday', 'sunday'] as const

/** A daily UTC time as an HHMM clock number (100 is 01:00, 1030 is 10:30). */
const ClockSchema = (description: string) => Type.Number({ minimum: 0, maximum: 2400, description })

// The prices OpenRouter adds to the four of the spec, each optional, as its clients describe them.
const optionalPrices = {
  audio: Type.Optional(PriceSchema('Price of an audio input token')),
  audio_output: Type.Optional(PriceSchema('Price of an audio output token')),
  image_output: Type.Optional(PriceSchema('Price of an output image')),
  image_token: Type.Optional(PriceSchema('Price of an image token')),
  input_audio_cache: Type.Optional(PriceSchema('Price of a cached audio input token')),
  input_cache_read: Type.Optional(PriceSchema('Price of a cached input token, read')),
  input_cache_write: Type.Optional(PriceSchema('Price of a cache-write token (the default TTL, 5 minutes where there are several)')),
  input_cache_write_1h: Type.Optional(PriceSchema('Price of a 1-hour cache-write token, where the provider prices that TTL apart')),
  internal_reasoning: Type.Optional(PriceSchema('Price of an internal reasoning token')),
  web_search: Type.Optional(PriceSchema('Price of a web search'))
}

const PricingOverrideSchema = Type.Object({
  prompt: Type.Optional(PriceSchema('Price of prompt tokens while the entry applies')),
  completion: Type.Optional(PriceSchema('Price of completion tokens while the entry applies')),
  audio: optionalPrices.audio,
  input_audio_cache: optionalPrices.input_audio_cache,
  input_cache_read: optionalPrices.input_cache_read,
  input_cache_write: optionalPrices.input_cache_write,
  input_cache_write_1h: optionalPrices.input_cache_write_1h,
  min_prompt_tokens: Type.Optional(Type.Number({ minimum: 0, description: 'Applies when a request has more prompt tokens than this' })),
  utc_days: Type.Optional(Type.Array(Type.Union(UTC_DAYS.map((day) => Type.Literal(day))), { description: 'Applies on these days (UTC)' })),
  utc_start: Type.Optional(ClockSchema('Applies from this time of day (UTC, HHMM), inclusive')),
  utc_end: Type.Optional(ClockSchema('Applies until this time of day (UTC, HHMM), exclusive; before utc_start, the window wraps past midnight'))
}, {
  additionalProperties: false,
  description: 'A conditional price: applies when all its conditions match a request; a later entry wins; a price it leaves out is the base price'
})

const WorkloadPerformanceSchema = Type.Object({
  latency: Nullable(PercentilesSchema('milliseconds'), { description: 'Latency percentiles, in milliseconds (end to end for image and video generation), or null when not measured' }),
  request_count: Nullable(Type.Integer({ minimum: 0 }), { description: 'Requests admitted for this workload in the window, or null when not counted' }),
  throughput: Nullable(PercentilesSchema('tokens per second'), { description: 'Throughput percentiles, in tokens per second, or null when not measured' })
}, {
  $id: 'WorkloadPerformance',
  additionalProperties: false,
  description: 'Performance of one kind of request over the last 30 minutes',
  examples: [{ latency: { p50: 812, p75: 1137, p90: 1705, p99: 3492 }, request_count: 18342, throughput: { p50: 71.3, p75: 61.32, p90: 49.91, p99: 29.23 } }]
})

// The kinds of request OpenRouter reports performance for.
const WORKLOADS = ['decisions', 'embeddings', 'image_generation', 'rerank', 'stt', 'text_generation', 'tts', 'unknown', 'video_generation'] as const

/**
 * The server tools the endpoint runs as the provider's own tool, by their `openrouter:*` name, each with
 * the provider's tool type a request is translated to.
 */
const NativeToolsSchema = Type.Record(
  Type.String({ pattern: '^openrouter:[a-z0-9_.-]+$' }),
  Type.Object({
    type: Type.String({ minLength: 1, maxLength: IDENTIFIER_MAX, description: 'The provider\'s tool type a request is translated to (web_search_20260209 on Anthropic, google_search on Gemini)' })
  }, { additionalProperties: false }),
  {
    additionalProperties: false,
    description: 'The server tools this endpoint runs as the provider\'s own built-in tool, keyed by their openrouter:* name; empty when it has none',
    examples: [{ 'openrouter:web_search': { type: 'web_search_20260209' } }]
  }
)

const endpointExample = {
  model_id: 'openai/gpt-5',
  model_name: 'OpenAI: GPT-5',
  name: 'OpenAI | openai/gpt-5',
  provider_name: 'OpenAI',
  tag: 'openai',
  context_length: 400000,
  max_prompt_tokens: 272000,
  max_completion_tokens: 128000,
  pricing: { prompt: '0.00000125', completion: '0.00001', image: '0', request: '0', input_cache_read: '0.000000125' },
  quantization: null,
  status: 0,
  supported_parameters: ['max_tokens', 'temperature', 'top_p', 'stop', 'seed', 'response_format', 'tools', 'tool_choice'],
  supports_implicit_caching: true,
  supports_tool_choice: { auto: true, function: true, none: true, required: true },
  latency_last_30m: { p50: 812, p75: 1137, p90: 1705, p99: 3492 },
  throughput_last_30m: { p50: 71.3, p75: 61.32, p90: 49.91, p99: 29.23 },
  uptime_last_5m: 100,
  uptime_last_30m: 99.93,
  uptime_last_1d: 99.81,
  native_tools: {}
}

// The fields of an endpoint but native_tools, in the order of the spec, with OpenRouter's newer ones beside
// their kin. Every other field is refused: an allow-list of the vendor's names, so that a typo is caught
// (with a did-you-mean) rather than served.
const endpointFields = {
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
    // Optional, as the vendor's schema has them: its own records leave them out where there is no such price.
    image: Type.Optional(PriceSchema('Price of an image')),
    request: Type.Optional(PriceSchema('Price of a request')),
    ...optionalPrices,
    discount: Type.Optional(Type.Number({ minimum: 0, maximum: 1, description: 'Fraction taken off every price: 0 none, 1 free' })),
    overrides: Type.Optional(Type.Array(PricingOverrideSchema, { description: 'Conditional prices (long context, hours of the day); the prices above are those under default conditions' }))
  }, { additionalProperties: false, description: 'Prices, each a decimal number in a string (-1 marks variable pricing upstream): prompt and completion always, the others (image and request among them) where the provider has them' }),
  quantization: Nullable(Type.Union(QUANTIZATIONS.map((label) => Type.Literal(label))), { description: 'Quantization of the weights served, or null when not stated' }),
  // Optional, as the vendor's schema has it: a record exported from the vendor without it must load.
  status: Type.Optional(Type.Integer({ description: 'Numeric status of the endpoint, absent where the data has none. Known values: 0 (up), -1, -2, -3, -5, -10 (degrees of degradation)' })),
  supported_parameters: Type.Array(Type.String({ minLength: 1, maxLength: IDENTIFIER_MAX }), { description: 'Names of the request parameters the endpoint supports' }),
  supports_implicit_caching: Type.Boolean({ description: 'Whether the endpoint supports implicit caching' }),
  supports_tool_choice: Type.Object({
    auto: Type.Boolean(),
    function: Type.Boolean(),
    none: Type.Boolean(),
    required: Type.Boolean()
  }, { additionalProperties: false, description: 'Which values of the tool_choice request parameter the endpoint supports: auto, function, none and required, each a boolean' }),
  supports_voice_cloning: Type.Optional(Type.Boolean({ description: 'Whether this text-to-speech endpoint takes reference audio to clone a voice (absent: no)' })),
  latency_last_30m: Nullable(PercentilesSchema('milliseconds'), { description: 'Latency percentiles (p50, p75, p90, p99) over the last 30 minutes, in milliseconds, or null when not measured' }),
  throughput_last_30m: Nullable(PercentilesSchema('tokens per second'), { description: 'Throughput percentiles (p50, p75, p90, p99) over the last 30 minutes, in tokens per second, or null when not measured' }),
  perf_last_30m_by_workload: Type.Optional(Type.Object(
    Object.fromEntries(WORKLOADS.map((workload) => [workload, Type.Optional(WorkloadPerformanceSchema)])) as Record<typeof WORKLOADS[number], TOptional<typeof WorkloadPerformanceSchema>>,
    { additionalProperties: false, description: 'Performance over the last 30 minutes by the kind of request served, beside the figures for all of them' }
  )),
  uptime_last_5m: UptimeSchema('5 minutes'),
  uptime_last_30m: UptimeSchema('30 minutes'),
  uptime_last_1d: UptimeSchema('day')
}

/**
 * An endpoint as served. native_tools is always there: OpenRouter's newer clients require it, so a record
 * whose data has none is served with an empty one (servedEndpoint).
 */
export const EndpointSchema = Type.Object({
  ...endpointFields,
  native_tools: NativeToolsSchema
}, {
  $id: 'Endpoint',
  additionalProperties: false,
  description: 'A model endpoint available under zero data retention (ZDR). The optional keys are absent where the data has none; the others are always present',
  examples: [endpointExample]
})

/**
 * An endpoint as a data file or a PostgreSQL document holds it: native_tools may be left out, so that the
 * data written before it existed still loads.
 */
export const EndpointRecordSchema = Type.Object({
  ...endpointFields,
  native_tools: Type.Optional(NativeToolsSchema)
}, {
  additionalProperties: false,
  description: 'A model endpoint available under zero data retention (ZDR), as served; native_tools may be left out, and is then served empty'
})

export type Endpoint = Static<typeof EndpointRecordSchema>

const NO_NATIVE_TOOLS = Object.freeze({})

/** An endpoint as served: its record, with an empty native_tools after its last field when it has none. */
export function servedEndpoint (record: Endpoint): Static<typeof EndpointSchema> {
  return record.native_tools === undefined ? { ...record, native_tools: NO_NATIVE_TOOLS } : record as Static<typeof EndpointSchema>
}
