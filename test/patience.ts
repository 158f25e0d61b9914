/**
 * How long a test waits for something it expects (a server's start, a change followed, a standby's
 * replay) before it calls it stuck. Each wait ends when the event comes, so a working machine never
 * nears this; a busy one (a CI runner with noisy neighbours, load 13 on 2 cores) takes ten times its
 * usual time, and must not fail a test on no regression.
 */
export const PATIENCE_MS = 60_000
