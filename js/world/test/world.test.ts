import assert from 'node:assert/strict';
import { AsyncLocalStorage } from 'node:async_hooks';
import { createServer, type Server } from 'node:http';
import { after, before, test } from 'node:test';
import { EntityConflictError, HookNotFoundError, RunExpiredError, TooEarlyError, WorkflowRunNotFoundError } from '@workflow/errors';
import { createWorld, StreamWriter } from '../src/index';
import { startWeir, until, type WeirServer } from './server';

// The World against a real weir server: what the runtime calls, with core's
// step context simulated as core sets it (a process-global
// AsyncLocalStorage at Symbol.for('WORKFLOW_STEP_CONTEXT_STORAGE')).

let weir: WeirServer;
before(async () => {
  weir = await startWeir();
});
after(async () => {
  await weir?.stop();
});

type AnyWorld = Record<string, any>;
const world = (): AnyWorld => createWorld({ url: weir.url, secret: weir.secret, barrierMs: 5 }) as unknown as AnyWorld;

const core = ((globalThis as Record<symbol, unknown>)[Symbol.for('WORKFLOW_STEP_CONTEXT_STORAGE')] ??= new AsyncLocalStorage()) as AsyncLocalStorage<unknown>;
const inStep = <T>(runId: string, stepId: string, attempt: number, f: () => Promise<T>) =>
  core.run({ stepMetadata: { stepId, attempt, stepName: 's' }, workflowMetadata: { workflowRunId: runId } }, f);

const bytes = (s: string) => new TextEncoder().encode(s);
async function readAll(r: ReadableStream<Uint8Array>): Promise<string[]> {
  const out: string[] = [];
  for await (const c of r as unknown as AsyncIterable<Uint8Array>) out.push(new TextDecoder().decode(c));
  return out;
}

async function newRun(w: AnyWorld): Promise<string> {
  const created = await w.events.create(null, { eventType: 'run_created', eventData: { deploymentId: 'd', workflowName: 'wf', input: bytes('in') } });
  assert.match(created.run.runId, /^wrun_/);
  assert.ok(created.run.createdAt instanceof Date);
  assert.deepEqual(created.run.input, bytes('in'));
  const started = await w.events.create(created.run.runId, { eventType: 'run_started' });
  assert.equal(started.run.status, 'running');
  return created.run.runId as string;
}

test('statuses map to the classes the runtime tests for', async () => {
  const w = world();
  const run = await newRun(w);
  await w.events.create(run, { eventType: 'step_created', correlationId: 'step_1', eventData: { stepName: 's', input: bytes('x') } });
  await assert.rejects(w.events.create(run, { eventType: 'step_created', correlationId: 'step_1', eventData: { stepName: 's' } }), (e) =>
    EntityConflictError.is(e),
  );
  const started = await w.events.create(run, { eventType: 'step_started', correlationId: 'step_1' });
  assert.equal(started.step.attempt, 1);
  assert.ok(started.step.startedAt instanceof Date);
  await w.events.create(run, { eventType: 'step_retrying', correlationId: 'step_1', eventData: { error: 'e', retryAfter: new Date(Date.now() + 60_000) } });
  await assert.rejects(w.events.create(run, { eventType: 'step_started', correlationId: 'step_1' }), (e) => TooEarlyError.is(e) && (e as TooEarlyError & { retryAfter: number }).retryAfter >= 59);
  await assert.rejects(w.runs.get('wrun_nope'), (e) => WorkflowRunNotFoundError.is(e));
  await assert.rejects(w.hooks.getByToken('nope'), (e) => HookNotFoundError.is(e));
  await w.events.create(run, { eventType: 'run_completed', eventData: { output: bytes('out') } });
  await assert.rejects(w.events.create(run, { eventType: 'run_started' }), (e) => RunExpiredError.is(e));
  const got = await w.runs.get(run);
  assert.equal(got.status, 'completed');
  assert.deepEqual(got.output, bytes('out'));
  const none = await w.runs.get(run, { resolveData: 'none' });
  assert.equal(none.output, undefined);
  const events = await w.events.list({ runId: run, pagination: { limit: 2 } });
  assert.equal(events.data.length, 2);
  assert.equal(events.hasMore, true);
  const rest = await w.events.list({ runId: run, pagination: { cursor: events.cursor } });
  assert.deepEqual(
    [...events.data, ...rest.data].map((e: { eventType: string }) => e.eventType),
    ['run_created', 'run_started', 'step_created', 'step_started', 'step_retrying', 'run_completed'],
  );
  const steps = await w.steps.list({ runId: run });
  assert.equal(steps.data[0].stepId, 'step_1');
  assert.ok((await w.steps.get(undefined, 'step_1')).retryAfter instanceof Date);
});

test('a retried step is exactly once in both views, late writes included', async () => {
  const w = world();
  const run = await newRun(w);
  const name = `strm_${run}_user`;
  await w.events.create(run, { eventType: 'step_created', correlationId: 'step_a', eventData: { stepName: 'a' } });
  await w.events.create(run, { eventType: 'step_started', correlationId: 'step_a' });
  await inStep(run, 'step_a', 1, () => w.writeToStreamMulti(name, run, ['A0', 'A1', 'A2']));
  await w.events.create(run, { eventType: 'step_retrying', correlationId: 'step_a', eventData: { error: 'boom' } });
  await w.events.create(run, { eventType: 'step_started', correlationId: 'step_a' });
  // Attempt 2 writes the same, one chunk at a time, plus one more.
  await inStep(run, 'step_a', 2, async () => {
    for (const c of ['A0', 'A1', 'A2']) await w.writeToStream(name, run, c);
  });
  // A writable passed in as an argument: no core context, the delivery's.
  const st = (globalThis as Record<symbol, any>)[Symbol.for('@weirhq/world//state')];
  await st.delivery.run({ runId: run, stepId: 'step_a' }, () => w.writeToStream(name, run, 'B'));
  await w.events.create(run, { eventType: 'step_completed', correlationId: 'step_a', eventData: { result: bytes('r') } });
  // v4 flushes after the outcome: this one lands late and still counts once.
  await inStep(run, 'step_a', 2, () => w.writeToStream(name, run, 'late'));
  // No step at all: appended once.
  await w.writeToStream(name, run, 'anon');
  const want = ['A0', 'A1', 'A2', 'B', 'late', 'anon'];
  const views = ['live', 'committed'] as const;
  const readers = await Promise.all(
    views.map(async (view) => {
      const v = createWorld({ url: weir.url, readView: view }) as unknown as AnyWorld;
      // Readers that start before the close follow the stream to its end.
      return { v, view, all: readAll(await v.readFromStream(name)), tail: readAll(await v.readFromStream(name, 4)), neg: readAll(await v.readFromStream(name, -2)) };
    }),
  );
  await w.closeStream(name, run);
  for (const { v, view, all, tail, neg } of readers) {
    assert.deepEqual(await all, want, `${view} view`);
    assert.deepEqual(await tail, want.slice(4), `${view} view from 4`);
    assert.deepEqual(await neg, want.slice(4), `${view} view from -2`);
    const info = await v.getStreamInfo(name, run);
    assert.deepEqual(info, { tailIndex: 5, done: true });
    const page = await v.getStreamChunks(name, run, { limit: 4 });
    assert.equal(page.data.length, 4);
    assert.equal(page.hasMore, true);
    const page2 = await v.getStreamChunks(name, run, { cursor: page.cursor });
    assert.deepEqual(
      [...page.data, ...page2.data].map((c: { data: Uint8Array }) => new TextDecoder().decode(c.data)),
      want,
    );
    assert.equal(page2.done, true);
  }
  assert.deepEqual(await w.listStreamsByRunId(run), [name]);
});

test('a failed step is absent from the committed view; a zombie is dropped', async () => {
  const w = world();
  const run = await newRun(w);
  const name = `strm_${run}_f`;
  await w.events.create(run, { eventType: 'step_created', correlationId: 'step_f', eventData: { stepName: 'f' } });
  await w.events.create(run, { eventType: 'step_started', correlationId: 'step_f' });
  await inStep(run, 'step_f', 1, () => w.writeToStreamMulti(name, run, ['F0', 'F1']));
  await w.events.create(run, { eventType: 'step_failed', correlationId: 'step_f', eventData: { error: 'fatal' } });
  // A late write of the failed attempt is refused by weir and dropped.
  await inStep(run, 'step_f', 1, () => w.writeToStream(name, run, 'F2'));
  await w.writeToStream(name, run, 'end');
  await w.closeStream(name, run);
  const committed = createWorld({ url: weir.url, readView: 'committed' }) as unknown as AnyWorld;
  assert.deepEqual(await readAll(await committed.readFromStream(name)), ['end']);
  const live = createWorld({ url: weir.url, readView: 'live' }) as unknown as AnyWorld;
  assert.deepEqual(await readAll(await live.readFromStream(name)), ['F0', 'F1', 'end']);
});

test('queue() is delivered, signed, to the handler; unsigned requests get 401', async () => {
  const got: { message: any; meta: any }[] = [];
  let server: Server | undefined;
  const port = await new Promise<number>((resolve) => {
    server = createServer(async (req, res) => {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const headers = new Headers();
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers.set(k, v);
      const handler = w.createQueueHandler('__wkf_workflow_', async (message: unknown, meta: unknown) => {
        got.push({ message, meta });
        return got.length === 1 ? { timeoutSeconds: 0 } : undefined;
      });
      const r: Response = await handler(new Request(`http://127.0.0.1${req.url}`, { method: 'POST', headers, body: Buffer.concat(chunks) }));
      res.writeHead(r.status, { 'content-type': 'application/json' });
      res.end(Buffer.from(await r.arrayBuffer()));
    }).listen(0, '127.0.0.1', () => resolve((server!.address() as { port: number }).port));
  });
  const w = createWorld({ url: weir.url, secret: weir.secret, appUrl: `http://127.0.0.1:${port}` }) as unknown as AnyWorld;
  try {
    const { messageId } = await w.queue('__wkf_workflow_wf', { runId: 'wrun_x', requestedAt: new Date(0), data: bytes('b') });
    assert.match(messageId, /^msg_/);
    await until('two deliveries', () => got.length >= 2 || undefined);
    assert.equal(got[0]!.meta.messageId, messageId);
    assert.equal(got[0]!.meta.attempt, 1);
    assert.equal(got[1]!.meta.attempt, 2);
    assert.deepEqual(got[0]!.message.data, bytes('b'));
    const unsigned = await fetch(`http://127.0.0.1:${port}/.well-known/workflow/v1/flow`, {
      method: 'POST',
      headers: { 'x-vqs-queue-name': '__wkf_workflow_wf', 'x-vqs-message-id': 'msg_1', 'x-vqs-message-attempt': '1' },
      body: '{"runId":"wrun_x"}',
    });
    assert.equal(unsigned.status, 401);
    assert.equal(got.length, 2);
  } finally {
    server?.close();
  }
});

test('StreamWriter writes exactly once for any producer', async () => {
  const path = `jobs/${Date.now()}`;
  const a1 = new StreamWriter({ url: weir.url, path, writer: 'job-1', attempt: 1 });
  assert.deepEqual((await a1.write('x', 'y')).map((a) => a.outcome), ['appended', 'appended']);
  const a2 = new StreamWriter({ url: weir.url, path, writer: 'job-1', attempt: 2 });
  assert.deepEqual((await a2.write('x', 'y', 'z')).map((a) => a.outcome), ['adopted', 'adopted', 'appended']);
  await a2.commit();
  const res = await fetch(`${weir.url}/v1/stream/${path}`);
  assert.equal(await res.text(), 'xyz');
});
