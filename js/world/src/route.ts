import { streamRoute, type StreamRouteOptions } from '@weirhq/client';
import { resolveConfig, type Config } from './config';

// worldStreamRoute: a Vercel Workflow run's getWritable() stream served at
// the app's own route, for a browser. The stream lives in weir (the World
// writes it at runs/<runId>/<name>); its records carry the runtime's
// serialized frames, which a browser cannot read, so each data record is
// decoded on the way by the runtime's own deserializer into the value the
// workflow wrote (a UIMessageChunk, for a DurableAgent), and the records a
// reader needs to apply rewinds (abort, commit, close) pass as they are.

/** The run whose stream a request reads, as `getRun(runId).getReadable({ namespace })` names it. */
export interface WorldStreamChoice {
  runId: string;
  /** getWritable({ namespace }) of the workflow; default none. */
  namespace?: string;
}

/** How to serve a World run's stream. */
export interface WorldStreamRouteOptions {
  /** weir server's URL. Default as the World's: $WEIR_URL, else http://127.0.0.1:4437. */
  baseUrl?: string;
  /** weir server's bearer token, never sent to the browser. Default as the World's: $WEIR_TOKEN. */
  token?: string;
  /** A fetch to reach weir with instead of the global one. */
  fetch?: StreamRouteOptions['fetch'];
  /**
   * Picks the run a request reads, after the app's own checks of who may
   * read it. A Response answers the request instead (a 403, a 404).
   */
  stream: (req: Request) => WorldStreamChoice | Response | Promise<WorldStreamChoice | Response>;
}

/**
 * The name of a run's getWritable() stream: core's getWorkflowRunStreamId
 * (@workflow/core/dist/util.js), which core does not export.
 */
export function worldStreamName(runId: string, namespace?: string): string {
  const id = `${runId.replace('wrun_', 'strm_')}_user`;
  return namespace ? `${id}_${Buffer.from(namespace, 'utf-8').toString('base64url')}` : id;
}

/**
 * Returns a handler that serves a run's getWritable() stream with weir's
 * records (rewinds and all) and each chunk decoded to the value the
 * workflow wrote: `export const GET = worldStreamRoute({...})` in a Next.js
 * App Router route. The browser follows it with @weirhq/client's follow,
 * or WeirChat for a DurableAgent's UI message chunks. Everything else is
 * streamRoute's (@weirhq/client): GET and HEAD only, the reader's query
 * parameters only, no cookie to weir, no token to the browser.
 */
export function worldStreamRoute(opts: WorldStreamRouteOptions): (req: Request) => Promise<Response> {
  if (typeof opts?.stream !== 'function') throw new TypeError('worldStreamRoute: options.stream, a function that picks the run, is required');
  const over: Partial<Config> = {};
  if (opts.baseUrl !== undefined) over.url = opts.baseUrl;
  if (opts.token !== undefined) over.token = opts.token;
  const cfg = resolveConfig(over);
  return async (req: Request): Promise<Response> => {
    // Core's serialization starts loading with the first request, not its
    // first chunk: a page follows a run's stream before the run wrote it,
    // and the load (~0.4 s in a fresh Next.js server) overlaps the wait
    // instead of delaying the first tokens shown.
    loadSerialization().catch(() => {}); // the decode reports a failure
    // The runtime's revivers are the run's, so each request gets the
    // route for the run it picked.
    let runId = '';
    const route = streamRoute({
      baseUrl: cfg.url,
      ...(cfg.token !== undefined ? { token: cfg.token } : {}),
      ...(opts.fetch !== undefined ? { fetch: opts.fetch } : {}),
      stream: async (r) => {
        const c = await opts.stream(r);
        if (c instanceof Response) return c;
        runId = c.runId;
        return { run: c.runId, name: worldStreamName(c.runId, c.namespace) };
      },
      decode: (bytes) => decodeFrame(bytes, runId),
    });
    return route(req);
  };
}

// core's serialization, loaded on the first decode: it is an ES module the
// World (CommonJS, loaded by core itself) must not require while core is
// still loading, and an app that never serves a stream never needs it.
type Serialization = typeof import('@workflow/core/serialization');
let serialization: Promise<Serialization> | undefined;
const loadSerialization = (): Promise<Serialization> => (serialization ??= import('@workflow/core/serialization'));

const FRAME_HEADER = 4;
/** Where core's deserializer stops taking a length for a frame's (serialization.js: "sanity check: < 100MB"). */
const MAX_FRAME = 100_000_000;

/**
 * Decodes one record of a run's stream: exactly one whole frame of the
 * runtime's serialization ([4-byte big-endian length][format][payload]),
 * deserialized by the runtime's own getDeserializeStream with the revivers
 * getRun(runId).getReadable() uses. A record with more or less than one
 * frame, or a frame the runtime makes anything but one value of, is an
 * error: weir's World writes each chunk core hands it as one record, so
 * such a record means the framing changed, and a guess would show a reader
 * wrong data.
 */
export async function decodeFrame(bytes: Uint8Array, runId: string): Promise<unknown> {
  const n = bytes.byteLength;
  const len = n >= FRAME_HEADER ? new DataView(bytes.buffer, bytes.byteOffset, n).getUint32(0, false) : -1;
  if (len <= 0 || len >= MAX_FRAME || FRAME_HEADER + len !== n) {
    const what =
      len < 0 ? 'shorter than a frame header' : len === 0 || len >= MAX_FRAME ? `its header says ${len} bytes, not a frame's` : FRAME_HEADER + len < n ? `more than one frame (the first is ${FRAME_HEADER + len} bytes)` : `a cut frame (its header says ${len} bytes)`;
    throw new Error(`a record of ${n} bytes is not exactly one frame of the runtime's serialization: ${what}`);
  }
  const { getDeserializeStream, getExternalRevivers } = await loadSerialization();
  // No encryption key: encrypted frames ('encr') fail in the deserializer,
  // as the World stores data unencrypted (docs/world.md).
  const ds = getDeserializeStream(getExternalRevivers(globalThis, [], runId, undefined), undefined);
  const values: unknown[] = [];
  const reader = ds.readable.getReader();
  const writer = ds.writable.getWriter();
  const read = (async () => {
    for (;;) {
      const r = await reader.read();
      if (r.done) return;
      values.push(r.value);
    }
  })();
  await Promise.all([writer.write(bytes).then(() => writer.close()), read]);
  if (values.length !== 1) throw new Error(`the runtime's deserializer made ${values.length} values of one frame of ${n} bytes, not one`);
  return values[0];
}
