import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { WorkflowWorldError } from '@workflow/errors';
import { Chain } from './chain';
import { chunkBytes, decode, Deframer, frame } from './codec';
import type { Config, View } from './config';
import { send, seg } from './http';
import { stableMessageId, withStableStart } from './messageid';

// The World's streams on weir. A write takes its step's identity, in this
// order: core's step context (a getWritable() in the step's body), else the
// delivery this package is running (v4 runs one step per /step delivery,
// so a writable passed in as an argument, or a stream the step returns, is
// that step's), else none. A step's writes are writer step/<stepId> at the
// attempt weir's own step_started gave, numbered from 0 per (stream, step,
// attempt): a retry's identical chunks are adopted, divergent ones abort
// the earlier attempt's from the first difference, a failed step is
// aborted, a zombie attempt is fenced, and a page re-sent after a lost
// reply is acknowledged, not appended (docs/semantics.md). Writes with no
// step are appended once each, de-duplicated on retry by Idempotency-Key.

/** What a queue delivery this package runs is for. */
export interface Delivery {
  runId?: string;
  stepId?: string;
}

interface Identity {
  stepId: string;
  attempt: number;
}

/** The module-global state of the streams (core keeps two World instances). */
export interface StreamState {
  delivery: AsyncLocalStorage<Delivery>;
  attempts: Map<string, number>; // run/step -> the attempt step_started gave
  chains: Map<string, Chain>; // run, name, step, attempt
  inflight: Map<string, Set<Promise<unknown>>>; // run/step -> writes in flight
  dropped: Set<string>; // warned-about (run/step/attempt) writes weir refused as stale
}

export function newStreamState(): StreamState {
  return { delivery: new AsyncLocalStorage(), attempts: new Map(), chains: new Map(), inflight: new Map(), dropped: new Set() };
}

const CORE_CONTEXT = Symbol.for('WORKFLOW_STEP_CONTEXT_STORAGE');

interface CoreStore {
  stepMetadata?: { stepId?: string; attempt?: number };
  workflowMetadata?: { workflowRunId?: string };
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Chains idle this long are forgotten. */
const CHAIN_IDLE_MS = 30 * 60_000;

export function createStreams(cfg: Config, st: StreamState) {
  function identity(runId: string): Identity | undefined {
    const als = (globalThis as Record<symbol, unknown>)[CORE_CONTEXT] as AsyncLocalStorage<CoreStore> | undefined;
    const core = als?.getStore?.();
    const meta = core?.stepMetadata;
    if (meta?.stepId && typeof meta.attempt === 'number' && (core?.workflowMetadata?.workflowRunId ?? runId) === runId) {
      return { stepId: meta.stepId, attempt: meta.attempt };
    }
    const d = st.delivery.getStore();
    if (d?.stepId && d.runId === runId) {
      const attempt = st.attempts.get(`${runId}/${d.stepId}`);
      if (attempt) return { stepId: d.stepId, attempt };
    }
    return undefined;
  }

  function chain(runId: string, name: string, id: Identity): Chain {
    const k = `${runId}\0${name}\0${id.stepId}\0${id.attempt}`;
    let c = st.chains.get(k);
    if (!c) {
      c = new Chain();
      st.chains.set(k, c);
      if (st.chains.size % 1024 === 0) prune();
    }
    return c;
  }

  function prune() {
    const cut = Date.now() - CHAIN_IDLE_MS;
    for (const [k, c] of st.chains) if (c.lastUsed < cut) st.chains.delete(k);
  }

  /** Tracks p as a write in flight of runId's step, for the barrier. */
  function track<T>(runId: string, stepId: string, p: Promise<T>): Promise<T> {
    const k = `${runId}/${stepId}`;
    let set = st.inflight.get(k);
    if (!set) st.inflight.set(k, (set = new Set()));
    set.add(p);
    const done = () => {
      set!.delete(p);
      if (set!.size === 0 && st.inflight.get(k) === set) st.inflight.delete(k);
    };
    p.then(done, done);
    return p;
  }

  async function postStep(runId: string, name: string, id: Identity, seq: number, chunks: Uint8Array[]) {
    try {
      await send(cfg, {
        method: 'POST',
        path: `world/runs/${seg(runId)}/streams/${seg(name)}`,
        headers: {
          'content-type': 'application/octet-stream',
          'weir-writer': `step/${id.stepId}`,
          'weir-attempt': String(id.attempt),
          'weir-seq': String(seq),
          'weir-framing': 'u32be',
        },
        body: frame(chunks),
        idempotent: true, // by seq
      });
    } catch (err) {
      const code = err instanceof WorkflowWorldError ? err.code : undefined;
      if (code === 'fenced' || code === 'writer_finished' || code === 'closed') {
        // A zombie attempt (a newer one began), a failed step's late write,
        // or a write after the close: nothing of it belongs in the stream,
        // and the attempt has failed anyway. Dropped, as weir refused it.
        const k = `${runId}/${id.stepId}/${id.attempt}`;
        if (!st.dropped.has(k)) {
          st.dropped.add(k);
          console.warn(`[@weirhq/world] stream ${name}: a write of step ${id.stepId} attempt ${id.attempt} was refused (${code}) and dropped`);
        }
        return;
      }
      throw err;
    }
  }

  async function postAnonymous(runId: string, name: string, chunks: Uint8Array[]) {
    await send(cfg, {
      method: 'POST',
      path: `world/runs/${seg(runId)}/streams/${seg(name)}`,
      headers: { 'content-type': 'application/octet-stream', 'weir-framing': 'u32be', 'idempotency-key': randomUUID() },
      body: frame(chunks),
      idempotent: true, // by Idempotency-Key
    });
  }

  async function writeMulti(name: string, runIdArg: string | Promise<string>, raw: (string | Uint8Array)[]) {
    const runId = await runIdArg;
    // Empty chunks carry nothing (world-local's readers skip them), and
    // weir's framing has none.
    const chunks = raw.map(chunkBytes).filter((c) => c.byteLength > 0);
    if (chunks.length === 0) return;
    const id = identity(runId);
    if (!id) {
      // One request at a time per stream keeps anonymous chunks in call order.
      const c = chain(runId, name, { stepId: '', attempt: 0 });
      await c.write(chunks, (_seq, b) => postAnonymous(runId, name, b));
      return;
    }
    const c = chain(runId, name, id);
    // The first chunk of the attempt on this stream: DurableAgent's start
    // chunk gets the id every attempt of the step gives it (messageid.ts).
    if (c.next === 0 && cfg.stableMessageIds) chunks[0] = withStableStart(chunks[0]!, () => stableMessageId(runId, id.stepId));
    await track(runId, id.stepId, c.write(chunks, (seq, b) => postStep(runId, name, id, seq, b)));
  }

  return {
    /** Records the attempt weir's step_started gave a step. */
    started(runId: string, stepId: string, attempt: number) {
      st.attempts.set(`${runId}/${stepId}`, attempt);
      if (st.attempts.size > 100_000) {
        const first = st.attempts.keys().next().value;
        if (first !== undefined) st.attempts.delete(first);
      }
    },

    /**
     * Waits, before a step's outcome reaches weir, for the step's writes to
     * be handed over: one flush window, then every write of the step in
     * flight in this process. A write handed over later still lands: weir
     * takes a completed attempt's late chunks into the committed view at
     * once (docs/world.md).
     */
    async barrier(runId: string, stepId: string) {
      if (cfg.barrierMs > 0) await sleep(cfg.barrierMs);
      const k = `${runId}/${stepId}`;
      for (let i = 0; i < 100; i++) {
        const set = st.inflight.get(k);
        if (!set || set.size === 0) return;
        await Promise.allSettled([...set]);
      }
    },

    async writeToStream(name: string, runId: string | Promise<string>, chunk: string | Uint8Array) {
      await writeMulti(name, runId, [chunk]);
    },

    writeToStreamMulti: writeMulti,

    async closeStream(name: string, runIdArg: string | Promise<string>) {
      const runId = await runIdArg;
      const id = identity(runId);
      // After this attempt's writes (or the anonymous ones) on this stream.
      const c = chain(runId, name, id ?? { stepId: '', attempt: 0 });
      await c.settled();
      const body = id ? JSON.stringify({ stepId: id.stepId, attempt: id.attempt }) : '{}';
      const p = send(cfg, {
        method: 'POST',
        path: `world/runs/${seg(runId)}/streams/${seg(name)}/close`,
        json: body,
        idempotent: true,
      });
      await (id ? track(runId, id.stepId, p) : p);
    },

    async listStreamsByRunId(runId: string): Promise<string[]> {
      const { res } = await send(cfg, { method: 'GET', path: `world/runs/${seg(runId)}/streams`, idempotent: true, subject: runId });
      return ((await res.json()) as { streams: string[] }).streams;
    },

    async getStreamInfo(name: string, _runId?: string): Promise<{ tailIndex: number; done: boolean }> {
      const { res } = await send(cfg, { method: 'GET', path: `world/streams/${seg(name)}/info`, query: { view: cfg.readView }, idempotent: true });
      return (await res.json()) as { tailIndex: number; done: boolean };
    },

    async getStreamChunks(name: string, _runId: string, options?: { limit?: number; cursor?: string | null }) {
      const { res } = await send(cfg, {
        method: 'GET',
        path: `world/streams/${seg(name)}/chunks`,
        query: { view: cfg.readView, limit: options?.limit, cursor: options?.cursor ?? undefined },
        idempotent: true,
      });
      return decode<{ data: { index: number; data: Uint8Array }[]; cursor: string | null; hasMore: boolean; done: boolean }>(await res.text());
    },

    async readFromStream(name: string, startIndex = 0): Promise<ReadableStream<Uint8Array>> {
      return readStream(cfg, name, startIndex, cfg.readView);
    },
  };
}

/**
 * Reads World stream name from chunk index start (negative: from the
 * tail) in view, following it until it is closed; a cut response is
 * resumed from the index reached.
 */
export function readStream(cfg: Config, name: string, start: number, view: View): ReadableStream<Uint8Array> {
  const abort = new AbortController();
  let index = start;
  let body: AsyncIterator<Buffer> | undefined;
  let deframer = new Deframer();
  let failures = 0;
  let resolved = start >= 0;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      for (;;) {
        if (!body) {
          try {
            const { res } = await send(cfg, {
              method: 'GET',
              path: `world/streams/${seg(name)}`,
              query: { index, view, follow: 'true' },
              idempotent: true,
              signal: abort.signal,
              streaming: true,
            });
            if (!resolved) {
              index = Number(res.headers.get('weir-index') ?? '0');
              resolved = true;
            }
            body = res.stream[Symbol.asyncIterator]();
            deframer = new Deframer();
          } catch (err) {
            if (abort.signal.aborted) return;
            if (++failures > 20) {
              controller.error(err);
              return;
            }
            await sleep(Math.min(100 * 2 ** failures, 2000));
            continue;
          }
        }
        let r: IteratorResult<Buffer>;
        try {
          r = await body.next();
        } catch {
          if (abort.signal.aborted) return;
          body = undefined; // cut mid-body: resume from index
          continue;
        }
        if (r.done) {
          body = undefined;
          continue; // ended without the end-of-stream frame: resume
        }
        const chunks = deframer.push(new Uint8Array(r.value.buffer, r.value.byteOffset, r.value.byteLength));
        for (const c of chunks) controller.enqueue(c);
        index += chunks.length;
        if (chunks.length > 0) failures = 0;
        if (deframer.eof) {
          controller.close();
          return;
        }
        if (chunks.length > 0) return;
      }
    },
    cancel() {
      abort.abort();
    },
  });
}
