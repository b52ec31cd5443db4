import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import {
  BadRequestError,
  Client,
  GoneError,
  KeyReusedError,
  NotFoundError,
  NotResumableError,
  UnknownWorkflowError,
  runStreamUrl,
  follow,
  type FollowEvent,
  type RunEvent,
} from '../src/index.js';
import { Proxy, startWeir, stores, text, texts, until, within, type WeirServer } from './helpers.js';

// The runs API, hooks, messages and run events against weir server's demo
// workflows: demo.tokens, demo.approval, demo.chat, demo.agent.

const ms = 1_000_000; // a Go time.Duration's millisecond
const rand = () => randomBytes(6).toString('hex');

for (const { name, store } of stores()) {
  describe(`runs, hooks, messages, run events (${name})`, () => {
    let weir: WeirServer;
    let proxy: Proxy;
    let c: Client;
    before(async () => {
      weir = await startWeir(store());
      proxy = await Proxy.start(weir.url);
      c = new Client({ baseUrl: weir.url });
    });
    after(async () => {
      await proxy?.close();
      await weir?.stop();
    });

    test('start (idempotent), get, list, events, streams, cancel', async () => {
      assert.deepEqual(
        (await c.workflows()).filter((w) => w.startsWith('demo.')),
        ['demo.agent', 'demo.approval', 'demo.chat', 'demo.tokens'],
      );
      const key = `k-${rand()}`;
      const input = { text: 'one two three', fail_after: 1 };
      const a = await c.start('demo.tokens', input, { idempotencyKey: key });
      const b = await c.start('demo.tokens', { fail_after: 1, text: 'one two three' }, { idempotencyKey: key });
      assert.equal(a.created, true);
      assert.equal(b.created, false);
      assert.equal(a.run.id, b.run.id);
      assert.equal(a.run.workflow, 'demo.tokens');
      await assert.rejects(c.start('demo.tokens', { text: 'other' }, { idempotencyKey: key }), KeyReusedError);
      await assert.rejects(c.start('demo.nope'), UnknownWorkflowError);
      const id = `run-${rand()}`;
      const byId = await c.start('demo.tokens', { text: 'x' }, { id });
      assert.equal(byId.run.id, id);
      assert.equal((await c.start('demo.tokens', { text: 'x' }, { id })).created, false);

      const done = await c.wait(a.run.id, { timeoutMs: 10_000 });
      assert.equal(done.status, 'completed');
      assert.deepEqual(done.output, { tokens: 3, attempts: 2 });
      assert.equal((await c.getRun(a.run.id)).status, 'completed');
      await assert.rejects(c.getRun(`run-${rand()}`), NotFoundError);

      const evs = await c.events(a.run.id);
      assert.deepEqual(
        evs.map((e) => e.type),
        ['run_started', 'step_started', 'step_failed', 'step_started', 'step_completed', 'run_completed'],
      );
      assert.deepEqual(evs.map((e) => e.seq), [1, 2, 3, 4, 5, 6]);
      assert.equal(evs[2]!.attempt, 1);
      assert.match(evs[2]!.error ?? '', /simulated failure/);
      assert.deepEqual((await c.events(a.run.id, { after: 4 })).map((e) => e.type), ['step_completed', 'run_completed']);

      const page = await c.listRuns({ workflow: 'demo.tokens', limit: 1 });
      assert.equal(page.runs.length, 1);
      assert.ok(page.next_cursor);
      const next = await c.listRuns({ workflow: 'demo.tokens', limit: 1, before: page.next_cursor });
      assert.notEqual(next.runs[0]!.id, page.runs[0]!.id);

      const streams = await c.streams(a.run.id);
      const tokens = streams.find((s) => s.name === 'tokens');
      assert.deepEqual(tokens && [tokens.path, tokens.closed, tokens.next_offset], [`runs/${a.run.id}/tokens`, true, 5]);

      const slow = await c.start('demo.approval', { token: `t-${rand()}`, timeout: 30_000 * ms });
      const cancelling = await c.cancel(slow.run.id);
      assert.equal(cancelling.id, slow.run.id);
      assert.equal((await c.wait(slow.run.id, { timeoutMs: 10_000 })).status, 'cancelled');

      // Run again: resumed with its id (then cancelled again), forked, retried.
      const resumed = await c.resume(slow.run.id);
      assert.equal(resumed.id, slow.run.id);
      await assert.rejects(c.resume(a.run.id), NotResumableError);
      await c.cancel(slow.run.id);
      assert.equal((await c.wait(slow.run.id, { timeoutMs: 10_000 })).status, 'cancelled');
      const forkId = `fork-${rand()}`;
      const fork = await c.fork(slow.run.id, { op: 1 }, { id: forkId });
      assert.equal(fork.id, forkId);
      assert.equal((await c.fork(slow.run.id, { op: 1 }, { id: forkId })).id, forkId, 'the same fork again');
      await assert.rejects(c.fork(slow.run.id, { op: 9 }), BadRequestError);
      await c.cancel(forkId);
      await c.wait(forkId, { timeoutMs: 10_000 });
    });

    test("a run's stream followed through a divergent retry, cut in the middle", async () => {
      const { run } = await c.start('demo.tokens', { text: 'a b c d', retry_text: 'a x y', fail_after: 2, delay: 30 * ms });
      const events: FollowEvent[] = [];
      const f = follow({ url: runStreamUrl(proxy.url, run.id, 'tokens'), waitForStreamMs: 10_000, onEvent: (e) => events.push(e) });
      await until('attempt 1 shown', () => texts(f.snapshot()).length >= 2);
      proxy.cut();
      const final = await within(f.done, 'the run stream to close');
      assert.deepEqual(texts(final), ['a', ' x', ' y']);
      assert.ok(final.chunks.every((ch) => ch.final && ch.writer === 'step/1' && ch.data instanceof Uint8Array));
      const rw = events.filter((e) => e.type === 'rewind') as Extract<FollowEvent, { type: 'rewind' }>[];
      assert.equal(rw.length, 1);
      assert.equal(rw[0]!.fromSeq, 1);
      assert.deepEqual(rw[0]!.removed.map(text), [' b']);
      assert.deepEqual(events.find((e) => e.type === 'commit'), { type: 'commit', writer: 'step/1', attempt: 2, count: 3 });
      assert.ok(events.some((e) => e.type === 'reconnect'));
      assert.equal((await c.wait(run.id, { timeoutMs: 10_000 })).status, 'completed');
      // The same through the client, from the start of the closed stream.
      assert.deepEqual(texts(await within(c.followRun(run.id, 'tokens').done, 'followRun')), ['a', ' x', ' y']);
    });

    test('hooks: deliver with an idempotency key, close, hooks', async () => {
      const token = `approve-${rand()}`;
      await assert.rejects(c.deliverHook(token, { approved: true }), NotFoundError);
      const { run } = await c.start('demo.approval', { token, timeout: 20_000 * ms });
      await until('the hook', async () => (await c.hooks(run.id)).some((h) => h.token === token));
      const d1 = await c.deliverHook(token, { approved: true, by: 'me' }, { idempotencyKey: 'click-1' });
      assert.equal(d1.run_id, run.id);
      assert.equal(d1.count, 1);
      assert.ok(!d1.duplicate);
      const d2 = await c.deliverHook(token, { by: 'me', approved: true }, { idempotencyKey: 'click-1' });
      assert.equal(d2.duplicate, true, 'the same payload, keys in another order: the same body');
      assert.equal(d2.seq, d1.seq);
      await assert.rejects(c.deliverHook(token, { approved: false }, { idempotencyKey: 'click-1' }), KeyReusedError);
      const done = await c.wait(run.id, { timeoutMs: 10_000 });
      assert.equal(done.status, 'completed');
      assert.deepEqual(done.output, { token, approved: true, payload: { approved: true, by: 'me' } });
      await assert.rejects(c.deliverHook(token, { approved: true }), GoneError);
      const hooks = await c.hooks(run.id);
      assert.deepEqual(hooks.map((h) => [h.token, h.received, h.disposed]), [[token, 1, true]]);

      // The last payload closes the hook; a close without one.
      const t2 = `last-${rand()}`;
      const t3 = `close-${rand()}`;
      const r2 = await c.start('demo.approval', { token: t2, timeout: 20_000 * ms });
      const r3 = await c.start('demo.approval', { token: t3, timeout: 20_000 * ms });
      await until('the hooks', async () => (await c.hooks(r2.run.id)).length > 0 && (await c.hooks(r3.run.id)).length > 0);
      const last = await c.deliverHook(t2, { approved: true }, { close: true });
      assert.equal(last.closed, true);
      assert.equal(last.count, 1);
      await assert.rejects(c.closeHook(t2), GoneError);
      const closed = await c.closeHook(t3, { idempotencyKey: 'close-1' });
      assert.equal(closed.closed, true);
      assert.equal(closed.count, 0);
      assert.equal((await c.closeHook(t3, { idempotencyKey: 'close-1' })).duplicate, true);
      await assert.rejects(c.deliverHook(t3, { late: true }), GoneError);
      assert.equal((await c.wait(r2.run.id, { timeoutMs: 10_000 })).status, 'completed');
      // demo.approval's wait takes the hook's close for an answer that never comes.
      const r3done = await c.wait(r3.run.id, { timeoutMs: 10_000 });
      assert.equal(r3done.status, 'failed', JSON.stringify(r3done));
      assert.match(r3done.error ?? '', /dispos|clos/);
    });

    test('messages and run events: demo.chat', async () => {
      const { run } = await c.start('demo.chat');
      const waiting = await c.getEvent(run.id, 'status', { waitMs: 10_000 });
      assert.ok(waiting);
      assert.deepEqual(waiting.value, { state: 'waiting', turns: 0 });
      const reply = c.followRun(run.id, 'reply', { waitForStreamMs: 10_000 });
      const sent = await c.sendMessage(run.id, 'user', { text: 'hello' }, { idempotencyKey: 'm-1' });
      assert.equal(sent.run_id, run.id);
      assert.equal(sent.topic, 'user');
      const again = await c.sendMessage(run.id, 'user', { text: 'hello' }, { idempotencyKey: 'm-1' });
      assert.equal(again.duplicate, true);
      assert.equal(again.seq, sent.seq);
      await assert.rejects(c.sendMessage(run.id, 'user', { text: 'other' }, { idempotencyKey: 'm-1' }), KeyReusedError);
      // Follow the key: each wait for a value newer than the last one seen.
      let ev: RunEvent | null = waiting;
      while (ev && !((ev.value as { state: string; turns: number }).state === 'waiting' && (ev.value as { turns: number }).turns === 1)) {
        ev = await c.getEvent(run.id, 'status', { waitMs: 10_000, after: ev.seq });
      }
      assert.ok(ev, 'status waiting, turn 1');
      assert.equal(await c.getEvent(run.id, 'status', { waitMs: 0, after: ev.seq }), null, 'nothing newer: 204');
      await until('the reply', () => texts(reply.snapshot()).join('') === 'you said: hello\n');
      await c.sendMessage(run.id, 'user', { text: 'bye' });
      const done = await c.wait(run.id, { timeoutMs: 10_000 });
      assert.equal(done.status, 'completed');
      assert.deepEqual(texts(await within(reply.done, 'the reply stream to close')), ['you', ' said:', ' hello', '\n']);
      const state = await c.state(run.id);
      assert.deepEqual(state.messages, [{ topic: 'user', received: 2, taken: 2, left: 0 }]);
      assert.deepEqual(state.events.map((e) => [e.key, e.value]), [['status', { state: 'done', turns: 1 }]]);
      await assert.rejects(c.sendMessage(run.id, 'user', { text: 'late' }), GoneError);
      await assert.rejects(c.getEvent(run.id, 'nope'), NotFoundError);
      await assert.rejects(c.getEvent(`run-${rand()}`, 'status'), NotFoundError);
    });
  });
}
