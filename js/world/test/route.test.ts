import assert from 'node:assert/strict';
import { AsyncLocalStorage } from 'node:async_hooks';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { follow, type FollowEvent } from '@weirhq/client';
import { getExternalReducers, getSerializeStream } from '@workflow/core/serialization';
import { createWorld, decodeFrame, worldStreamName, worldStreamRoute } from '../src/index';
import { stableMessageId, withStableStart } from '../src/messageid';
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

test("DurableAgent's start chunk: the World's own messageId, the same for every attempt of a step; anything else untouched", async () => {
  const id = stableMessageId('wrun_1', 'step_1');
  assert.match(id, /^[0-9A-Za-z]{16}$/);
  assert.equal(stableMessageId('wrun_1', 'step_1'), id);
  assert.notEqual(stableMessageId('wrun_1', 'step_2'), id);
  assert.notEqual(stableMessageId('wrun_2', 'step_1'), id);
  // generateId()'s ids: 16 letters and digits.
  const [start] = await frames('wrun_1', [{ type: 'start', messageId: 'AbCdEfGh01234567' }]);
  const stable = withStableStart(start!, () => id);
  assert.equal(stable.byteLength, start!.byteLength);
  assert.deepEqual(await decodeFrame(stable, 'wrun_1'), { type: 'start', messageId: id });
  assert.deepEqual(await decodeFrame(start!, 'wrun_1'), { type: 'start', messageId: 'AbCdEfGh01234567' }, 'the chunk given is not changed');
  const others = await frames('wrun_1', [
    { type: 'start', messageId: 'msg-wrun_1' }, // an id the app chose
    { type: 'start', messageId: 'AbCdEfGh0123456' }, // 15 characters
    { type: 'start', messageId: 'AbCdEfGh0123456!' },
    { type: 'start', messageId: 'AbCdEfGh01234567', messageMetadata: { a: 1 } },
    { type: 'start' },
    { type: 'start-step' },
    { type: 'text-delta', id: '1', delta: 'AbCdEfGh01234567' },
    'devl[{"type":1,"messageId":2},"start","AbCdEfGh01234567"]',
  ]);
  for (const f of others) {
    assert.equal(
      withStableStart(f, () => assert.fail('the id is made only for a start chunk')),
      f,
    );
  }
});

test("DurableAgent's start chunk through the World: an identical retry is adopted, a divergent one rewinds from its first different token", async () => {
  const w = createWorld({ url: weir.url, secret: weir.secret, barrierMs: 5 }) as unknown as AnyWorld;
  const { run } = await w.events.create(null, { eventType: 'run_created', eventData: { deploymentId: 'd', workflowName: 'wf', input: enc('in') } });
  const runId = run.runId as string;
  await w.events.create(runId, { eventType: 'run_started' });
  const delta = (d: string) => ({ type: 'text-delta', id: '1', delta: d });
  // Each attempt of the model step makes up its own messageId, as
  // DurableAgent does; step_1's retry says the same, step_2's does not.
  const attempt = async (step: string, n: number, name: string, ds: string[]) =>
    inStep(runId, step, n, async () =>
      w.writeToStreamMulti(name, runId, await frames(runId, [{ type: 'start', messageId: `Rand0m${step.slice(-1)}Attempt${n}0`.slice(0, 16) }, { type: 'start-step' }, ...ds.map(delta)])),
    );
  const names = { same: worldStreamName(runId, 'same'), other: worldStreamName(runId, 'other') };
  for (const [step, name, retry] of [
    ['step_1', names.same, ['Hel', 'lo', '!']],
    ['step_2', names.other, ['Hi', '!']],
  ] as const) {
    await w.events.create(runId, { eventType: 'step_created', correlationId: step, eventData: { stepName: 'model' } });
    await w.events.create(runId, { eventType: 'step_started', correlationId: step });
    await attempt(step, 1, name, ['Hel', 'lo']);
    await w.events.create(runId, { eventType: 'step_retrying', correlationId: step, eventData: { error: 'model dropped' } });
    await w.events.create(runId, { eventType: 'step_started', correlationId: step });
    await attempt(step, 2, name, [...retry]);
    await w.events.create(runId, { eventType: 'step_completed', correlationId: step, eventData: { result: enc('r') } });
    await w.closeStream(name, runId);
  }
  const route = worldStreamRoute({ baseUrl: weir.url, stream: (req) => ({ runId, namespace: new URL(req.url).pathname.slice('/s/'.length) }) });
  const read = async (ns: string) => {
    const res = await route(new Request(`http://app.test/s/${ns}?offset=-1`));
    return (await res.text()).trimEnd().split('\n').map((l) => JSON.parse(l) as { kind: string; seq?: number; attempt?: number; from?: number; data?: unknown });
  };
  const start = { type: 'start', messageId: stableMessageId(runId, 'step_1') };
  const same = await read('same');
  assert.deepEqual(
    same.filter((r) => r.kind === 'data').map((r) => [r.attempt, r.seq, r.data]),
    [
      [1, 0, start],
      [1, 1, { type: 'start-step' }],
      [1, 2, delta('Hel')],
      [1, 3, delta('lo')],
      [2, 4, delta('!')],
    ],
  );
  assert.deepEqual(same.filter((r) => r.kind === 'abort'), [], 'an identical retry aborts nothing');
  const other = await read('other');
  assert.deepEqual(other.filter((r) => r.kind === 'abort').map((r) => [r.attempt, r.from]), [[2, 2]], 'rewound from the first delta, not from the start chunk');
  assert.deepEqual(other.filter((r) => r.kind === 'data').map((r) => r.data)[0], { type: 'start', messageId: stableMessageId(runId, 'step_2') });

  // Turned off, each attempt's own id: the retry diverges at seq 0.
  const off = createWorld({ url: weir.url, secret: weir.secret, barrierMs: 5, stableMessageIds: false }) as unknown as AnyWorld;
  const name = worldStreamName(runId, 'off');
  await off.events.create(runId, { eventType: 'step_created', correlationId: 'step_3', eventData: { stepName: 'model' } });
  await off.events.create(runId, { eventType: 'step_started', correlationId: 'step_3' });
  const offAttempt = async (n: number) =>
    inStep(runId, 'step_3', n, async () => off.writeToStreamMulti(name, runId, await frames(runId, [{ type: 'start', messageId: `RandomAttempt${n}00`.slice(0, 16) }, delta('Hel')])));
  await offAttempt(1);
  await off.events.create(runId, { eventType: 'step_retrying', correlationId: 'step_3', eventData: { error: 'model dropped' } });
  await off.events.create(runId, { eventType: 'step_started', correlationId: 'step_3' });
  await offAttempt(2);
  await off.events.create(runId, { eventType: 'step_completed', correlationId: 'step_3', eventData: { result: enc('r') } });
  await off.closeStream(name, runId);
  assert.deepEqual((await read('off')).filter((r) => r.kind === 'abort').map((r) => [r.attempt, r.from]), [[2, 0]]);
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
