import type { World } from '@workflow/world';
import { resolveConfig, type Config } from './config';
import { createQueue } from './queue';
import { streamState } from './shared';
import { createStorage } from './storage';
import { createStreams } from './streams';

export { resolveConfig, type Config, type View } from './config';
export { sign, verifySignature } from './queue';
export { decodeFrame, worldStreamName, worldStreamRoute, type WorldStreamChoice, type WorldStreamRouteOptions } from './route';
export { StreamWriter, type Ack, type StreamWriterOptions } from '@weirhq/client';

/**
 * createWorld returns a Vercel Workflow World (workflow@4.8.x, World spec 3)
 * whose runs, steps, hooks, sleeps, queue and streams live in a weir server,
 * with exactly-once streams. Set WORKFLOW_TARGET_WORLD=@weirhq/world: core
 * calls it with no argument, and the environment configures it (Config).
 */
export function createWorld(overrides: Partial<Config> = {}): World {
  const cfg = resolveConfig(overrides);
  const st = streamState();
  const streams = createStreams(cfg, st);
  const storage = createStorage(cfg, { streams });
  const queue = createQueue(cfg, st);
  const world = {
    specVersion: 3,
    streamFlushIntervalMs: cfg.flushMs,
    ...queue,
    ...storage,
    ...streams,
    async start() {
      // Nothing to start: weir pushes deliveries to the app.
    },
    async close() {},
  } satisfies World;
  return world;
}

export default createWorld;
