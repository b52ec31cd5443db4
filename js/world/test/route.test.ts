import assert from 'node:assert/strict';
import { AsyncLocalStorage } from 'node:async_hooks';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { follow, type FollowEvent } from '@weirhq/client';
import { getExternalReducers, getSerializeStream } from '@workflow/core/serialization';
import { createWorld, decodeFrame, worldStreamName, worldStreamRoute } from '../src/index';
import { startWeir, type WeirServer } from './server';

// worldStreamRoute: a run's getWritable() stream, written as core writes it
// (each chunk one frame of core's own serializer, through the World), read
// by a browser's follower through the route: the values the workflow wrote,
// with weir's rewinds applied.

/** Frames values with core's own serializer, as getWritable() does: one frame per value. */
async function frames(runId: string, values: unknown[]): Promise<Uint8Array[]> {
  const ser = getSerializeStream(getExternalReducers(globalThis, [], runId, undefined), undefined);
  const out: Uint8Array[] = [];
  const read = (async () => {
    const r = ser.readable.getReader();
    for (;;) {
      const { done, value } = await r.read();
      if (done) return;
      out.push(value);
    }
  })();
  const w = ser.writable.getWriter();
  for (const v of values) await w.write(v);
  await w.close();
  await read;
  return out;
}

const concat = (a: Uint8Array, b: Uint8Array) => {
  const c = new Uint8Array(a.length + b.length);
  c.set(a);
  c.set(b, a.length);
  return c;
};

test("worldStreamName is core's getWorkflowRunStreamId", async () => {
  // core does not export it: loaded from its file, to compare.
  const req = createRequire(__filename);
  const util: { getWorkflowRunStreamId(runId: string, ns?: string): string } = req(join(dirname(req.resolve('@workflow/core')), 'util.js'));
  for (const [run, ns] of [
    ['wrun_01ABC', undefined],
    ['wrun_01ABC', 'chat/1 é'],
    ['wrun_01ABC', '?'],
  ] as const) {
    assert.equal(worldStreamName(run, ns), util.getWorkflowRunStreamId(run, ns));
  }
});

test("decodeFrame: core's deserializer, exactly one frame a record", async () => {
  const values = [{ type: 'text-delta', id: '1', delta: 'Hel' }, { when: new Date(0), big: 10n, bytes: new Uint8Array([1, 2]) }, 'plain'];
  const fs = await frames('wrun_x', values);
  assert.equal(fs.length, 3);
  for (let i = 0; i < 3; i++) assert.deepEqual(await decodeFrame(fs[i]!, 'wrun_x'), values[i]);
  await assert.rejects(decodeFrame(concat(fs[0]!, fs[2]!), 'wrun_x'), /not exactly one frame of the runtime's serialization: more than one frame/);
  await assert.rejects(decodeFrame(fs[0]!.subarray(0, fs[0]!.length - 1), 'wrun_x'), /a cut frame/);
  await assert.rejects(decodeFrame(new Uint8Array([0, 0]), 'wrun_x'), /shorter than a frame header/);
  await assert.rejects(decodeFrame(new TextEncoder().encode('["legacy"]\n'), 'wrun_x'), /not exactly one frame/);
  const unknownFormat = fs[2]!.slice();
  unknownFormat.set(new TextEncoder().encode('zzzz'), 4);
  await assert.rejects(decodeFrame(unknownFormat, 'wrun_x'));
});

let weir: WeirServer;
before(async () => {
  weir = await startWeir();
});
after(async () => {
  await weir?.stop();
});

type AnyWorld = Record<string, any>;
const core = ((globalThis as Record<symbol, unknown>)[Symbol.for('WORKFLOW_STEP_CONTEXT_STORAGE')] ??= new AsyncLocalStorage()) as AsyncLocalStorage<unknown>;
const inStep = <T>(runId: string, stepId: string, attempt: number, f: () => Promise<T>) =>
  core.run({ stepMetadata: { stepId, attempt, stepName: 's' }, workflowMetadata: { workflowRunId: runId } }, f);
const enc = (s: string) => new TextEncoder().encode(s);

test("a run's stream through the route: the values written, a divergent retry's voided ones taken back", async () => {
  const w = createWorld({ url: weir.url, secret: weir.secret, barrierMs: 5 }) as unknown as AnyWorld;
  const { run } = await w.events.create(null, { eventType: 'run_created', eventData: { deploymentId: 'd', workflowName: 'wf', input: enc('in') } });
  const runId = run.runId as string;
  await w.events.create(runId, { eventType: 'run_started' });
  const name = worldStreamName(runId, 'chat');
  const delta = (d: string) => ({ type: 'text-delta', id: '1', delta: d });
  await w.events.create(runId, { eventType: 'step_created', correlationId: 'step_1', eventData: { stepName: 'model' } });
  await w.events.create(runId, { eventType: 'step_started', correlationId: 'step_1' });
  await inStep(runId, 'step_1', 1, async () => w.writeToStreamMulti(name, runId, await frames(runId, [delta('Hel'), delta('lo')])));
  await w.events.create(runId, { eventType: 'step_retrying', correlationId: 'step_1', eventData: { error: 'model dropped' } });
  await w.events.create(runId, { eventType: 'step_started', correlationId: 'step_1' });
  await inStep(runId, 'step_1', 2, async () => w.writeToStreamMulti(name, runId, await frames(runId, [delta('Hel'), delta('p!')])));
  await w.events.create(runId, { eventType: 'step_completed', correlationId: 'step_1', eventData: { result: enc('r') } });
  await w.closeStream(name, runId);

  let asked = '';
  const route = worldStreamRoute({
    baseUrl: weir.url,
    stream: (req) => {
      asked = new URL(req.url).pathname;
      return req.headers.get('x-user') === 'me' ? { runId, namespace: 'chat' } : new Response('not yours', { status: 403 });
    },
  });
  const fetchRoute = (input: string | URL | Request, init?: RequestInit) => {
    const h = new Headers(init?.headers);
    h.set('x-user', 'me');
    return route(new Request(String(input), { ...init, headers: h }));
  };
  for (const view of ['live', 'committed'] as const) {
    const events: FollowEvent[] = [];
    const f = follow({ url: `http://app.test/chat/${runId}/stream`, view, fetch: fetchRoute, onEvent: (ev) => events.push(ev) });
    const final = await f.done;
    assert.deepEqual(final.chunks.map((c) => c.data), [delta('Hel'), delta('p!')], view);
    const rewinds = events.filter((e): e is Extract<FollowEvent, { type: 'rewind' }> => e.type === 'rewind');
    if (view === 'live') {
      // The retry's "Hel" is adopted; "p!" diverges at seq 1.
      assert.deepEqual(rewinds.map((r) => [r.fromSeq, r.removed.map((c) => c.data)]), [[1, [delta('lo')]]]);
    } else assert.deepEqual(rewinds, []);
  }
  assert.equal(asked, `/chat/${runId}/stream`);
  const denied = await route(new Request('http://app.test/s'));
  assert.equal(denied.status, 403);
  const raw = await route(new Request('http://app.test/s?offset=-1', { headers: { 'x-user': 'me' } }));
  assert.equal(raw.headers.get('weir-data-encoding'), 'json');
  const kinds = (await raw.text()).trimEnd().split('\n').map((l) => (JSON.parse(l) as { kind: string }).kind);
  assert.deepEqual(kinds, ['data', 'data', 'abort', 'data', 'commit', 'close']);
});

test('a record that is not exactly one frame: the reader fails, naming it', async () => {
  const w = createWorld({ url: weir.url, secret: weir.secret, barrierMs: 5 }) as unknown as AnyWorld;
  const { run } = await w.events.create(null, { eventType: 'run_created', eventData: { deploymentId: 'd', workflowName: 'wf', input: enc('in') } });
  const runId = run.runId as string;
  await w.events.create(runId, { eventType: 'run_started' });
  const name = worldStreamName(runId);
  const [a, b] = await frames(runId, ['one', 'two']);
  await w.writeToStreamMulti(name, runId, [a!, concat(a!, b!)]);
  const route = worldStreamRoute({ baseUrl: weir.url, stream: () => ({ runId }) });
  const res = await route(new Request('http://app.test/s?offset=-1'));
  assert.equal(res.status, 500);
  assert.match(await res.text(), /the data record at offset 1 \(writer "", attempt 0, seq 0\) could not be decoded: a record of \d+ bytes is not exactly one frame of the runtime's serialization: more than one frame/);
  const f = follow({ url: 'http://app.test/s', fetch: (i, init) => route(new Request(String(i), init)), maxReconnects: 0 });
  await assert.rejects(f.done, /could not be decoded: .*more than one frame/);
  assert.deepEqual(f.snapshot().chunks.map((c) => c.data), ['one']);
});
