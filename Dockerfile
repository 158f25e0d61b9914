# Build stage: every dependency, to compile the TypeScript sources to dist/.
FROM node:24-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# The cache mount keeps npm's download cache out of the layers and warm across builds.
RUN --mount=type=cache,target=/root/.npm npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts/build.mjs scripts/bundle.mjs ./scripts/
COPY src ./src
RUN npm run build

# Runtime stage: production dependencies, the compiled code, the bundled fixtures and the runbook, nothing else.
# test/container.test.ts rebuilds this stage from these lines without Docker and runs it.
FROM node:24-slim
WORKDIR /app
COPY package.json package-lock.json ./
RUN --mount=type=cache,target=/root/.npm npm ci --omit=dev --no-audit --no-fund
COPY --from=build /app/dist ./dist
# The migrations, which npm run db -- migrate applies (the migration Job) and whose number a replica needs.
COPY migrations ./migrations
COPY fixtures ./fixtures
# The alerts' runbook, which the server serves at /runbook (the alerts link there).
COPY docs/runbook.md ./docs/runbook.md
# V8's compile cache of the server's modules, made for the node user and only read at each start
# (src/cli/compile-cache.ts says why it is made here), then given to root like every other file.
RUN node dist/cli/compile-cache.js > /dev/null && chown -R root:root dist/compile-cache && chmod -R a+rX dist/compile-cache
# Files stay owned by root: the node user can read them, not change them.
USER node
ENV HOST=0.0.0.0 PORT=3000 NODE_COMPILE_CACHE=/app/dist/compile-cache
EXPOSE 3000
# Slim images have no curl; the check is a script of ours run by node, reading HOST and PORT.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 CMD ["node", "dist/cli/healthcheck.js"]
# node itself, not npm: SIGTERM goes straight to the server, which handles it (as PID 1 it gets no
# default signal handling from the kernel, and it starts no child process to reap). The same command
# as `npm start` (a test holds them equal): young-generation spaces of 4 MB instead of 16 keep the
# resident memory under 100 MB under load, at no measurable cost in throughput (BENCHMARKS.md).
# V8 optimizes hot functions on the main thread instead of a helper thread: the server has one core
# (its limit), where a helper thread runs only instead of the main one, and the helpers' memory
# (their own malloc arenas, kept after the work) was 10-15 MB of resident memory after a load.
CMD ["node", "--max-semi-space-size=4", "dist/server.js"]
