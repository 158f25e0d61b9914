// @fastify/rate-limit's own counter stores, which its package ships without types. Used directly
// (plugins/rate-limit.ts): their callbacks answer at once in memory, with no promise per request.
declare module '@fastify/rate-limit/store/*.js' {
  interface Count {
    current: number
    /** Milliseconds until the window resets; 0 from `read` when no window is open. */
    ttl: number
  }
  type Answer = (error: Error | null, count: Count) => void
  class Store {
    constructor (continueExceeding: boolean, exponentialBackoff: boolean, ...rest: unknown[])
    incr (key: string, answer: Answer, timeWindow: number, max: number): void
    read (key: string, answer: Answer, timeWindow: number, max: number): void
  }
  export = Store
}
