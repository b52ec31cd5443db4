/** The package's version, sent as the default deployment id. */
export const VERSION = '0.1.0';

/** A World stream view: live (every chunk as written) or committed. */
export type View = 'live' | 'committed';

/** Config configures the World. Every field has an environment default. */
export interface Config {
  /** weir server's URL. Default $WEIR_URL, else http://127.0.0.1:4437. */
  url: string;
  /** The bearer token weir server wants. Default $WEIR_TOKEN. */
  token?: string;
  /**
   * The app's base URL, where weir delivers queue messages. Default
   * $WEIR_APP_URL, else $WORKFLOW_LOCAL_BASE_URL, else
   * http://127.0.0.1:$PORT (3000 without $PORT), read at each queue().
   */
  appUrl?: string;
  /**
   * The secret weir signs deliveries with (weir server --world-secret).
   * Default $WEIR_WORLD_SECRET. Without it every delivery is refused (401).
   */
  secret?: string;
  /** The deployment id of this app. Default $WEIR_DEPLOYMENT_ID, else weir-world@<version>. */
  deploymentId: string;
  /**
   * The view run.getReadable() reads. Default $WEIR_WORLD_READ_VIEW, else
   * live: Vercel's latency, each chunk once across identical retries;
   * committed holds a step's chunks until the step ends (docs/world.md).
   */
  readView: View;
  /**
   * How long a step's outcome waits, before it reaches weir, for the
   * step's stream writes to be handed over (v4 flushes them after the
   * outcome): one flush window and then the writes in flight. Default
   * $WEIR_WORLD_BARRIER_MS, else 10 ms (twice the flush interval, if more).
   */
  barrierMs: number;
  /**
   * How long core buffers a step's stream writes before it hands them over
   * (the World's streamFlushIntervalMs). Default $WEIR_WORLD_FLUSH_MS, else
   * 1 ms: a write to weir is one loopback round trip, and core's write()
   * waits for the flush, so its 10 ms default costs a step 10 ms a chunk.
   */
  flushMs: number;
  /**
   * Whether DurableAgent's start chunk ({type: 'start', messageId:
   * generateId()}, the first chunk of its model step) is written with a
   * messageId made from the run and the step instead, the same on every
   * attempt, so that a retry saying the same words is adopted and a
   * divergent one rewinds from its first different token, not from the
   * start (docs/world.md). Default $WEIR_WORLD_STABLE_MESSAGE_IDS, else
   * true; "0" or "false" turns it off.
   */
  stableMessageIds: boolean;
}

/** Returns the config, from overrides and the environment. */
export function resolveConfig(overrides: Partial<Config> = {}, env: NodeJS.ProcessEnv = process.env): Config {
  const view = (overrides.readView ?? env.WEIR_WORLD_READ_VIEW ?? 'live') as View;
  if (view !== 'live' && view !== 'committed') {
    throw new Error(`@weirhq/world: WEIR_WORLD_READ_VIEW=${String(view)}: want live or committed`);
  }
  const flush = overrides.flushMs ?? Number(env.WEIR_WORLD_FLUSH_MS ?? 1);
  if (!Number.isFinite(flush) || flush < 0) {
    throw new Error(`@weirhq/world: WEIR_WORLD_FLUSH_MS=${String(env.WEIR_WORLD_FLUSH_MS)}: want a number of milliseconds`);
  }
  const barrier = overrides.barrierMs ?? Number(env.WEIR_WORLD_BARRIER_MS ?? Math.max(10, 2 * flush));
  if (!Number.isFinite(barrier) || barrier < 0) {
    throw new Error(`@weirhq/world: WEIR_WORLD_BARRIER_MS=${String(env.WEIR_WORLD_BARRIER_MS)}: want a number of milliseconds`);
  }
  const stableEnv = env.WEIR_WORLD_STABLE_MESSAGE_IDS;
  if (stableEnv !== undefined && !['0', '1', 'true', 'false'].includes(stableEnv)) {
    throw new Error(`@weirhq/world: WEIR_WORLD_STABLE_MESSAGE_IDS=${stableEnv}: want true or false`);
  }
  const cfg: Config = {
    url: (overrides.url ?? env.WEIR_URL ?? 'http://127.0.0.1:4437').replace(/\/+$/, ''),
    deploymentId: overrides.deploymentId ?? env.WEIR_DEPLOYMENT_ID ?? `weir-world@${VERSION}`,
    readView: view,
    barrierMs: barrier,
    flushMs: flush,
    stableMessageIds: overrides.stableMessageIds ?? (stableEnv === undefined || stableEnv === '1' || stableEnv === 'true'),
  };
  const token = overrides.token ?? env.WEIR_TOKEN;
  if (token) cfg.token = token;
  const app = overrides.appUrl ?? env.WEIR_APP_URL;
  if (app) cfg.appUrl = app;
  const secret = overrides.secret ?? env.WEIR_WORLD_SECRET;
  if (secret) cfg.secret = secret;
  return cfg;
}

/** The app's base URL now (see Config.appUrl). */
export function appUrl(cfg: Config, env: NodeJS.ProcessEnv = process.env): string {
  const u = cfg.appUrl ?? env.WORKFLOW_LOCAL_BASE_URL ?? `http://127.0.0.1:${env.PORT ?? '3000'}`;
  return u.replace(/\/+$/, '');
}
