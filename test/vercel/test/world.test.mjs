import { createWorld } from '@weirhq/world';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { client, newStore, startApp, startWeir, until, weirEnv } from './procs.mjs';

// What the world-testing port does not cover, through the real app: waits,
// runs that fail or are cancelled (from the app and from weir), hook
// conflicts and disposal, a fan-out of 110 steps, and the read methods.

const types = (events) => events.map((e) => e.eventType);

for (const kind of ['sqlite', 'postgres']) {
  describe(`weir's World (${kind})`, () => {
    let weir, store, app, c, world;
    beforeAll(async () => {
      store = newStore(kind);
      weir = await startWeir(store.spec);
      app = await startApp(weirEnv(weir));
      c = client(app);
      world = createWorld({ url: weir.url });
    });
    afterAll(async () => {
      await app?.stop();
      await weir?.stop();
      await store?.drop();
    });

    test('sleep: wait_created, then wait_completed after the delay', async () => {
      const { runId } = await c.invoke('workflows/world.ts', 'sleeper', [1500]);
      const run = await c.waitStatus(runId, 'completed');
      expect(run.status).toBe('completed');
      const evs = types(await c.events(runId));
      expect(evs).toContain('wait_created');
      expect(evs).toContain('wait_completed');
      expect(evs.indexOf('wait_created')).toBeLessThan(evs.indexOf('wait_completed'));
    });

    test('a workflow that throws: run_failed with its error', async () => {
      const { runId } = await c.invoke('workflows/world.ts', 'thrower');
      const run = await c.waitStatus(runId, 'failed');
      expect(run.error.message).toMatch(/the workflow itself threw/);
      expect(types(await c.events(runId)).at(-1)).toBe('run_failed');
    });

    test('cancel from the app: run_cancelled, its hooks disposed', async () => {
      const token = `cancel-${kind}-${Date.now()}`;
      const { runId } = await c.invoke('workflows/world.ts', 'hookWaiter', [token]);
      await until('the hook', async () => (await c.hook(token)).ok || undefined);
      await c.cancel(runId);
      await c.waitStatus(runId, 'cancelled');
      expect((await c.hook(token)).status).toBe(404);
      expect(types(await c.events(runId))).toContain('run_cancelled');
    });

    test('cancel from weir: run_cancelled, and the app hears of it', async () => {
      const token = `wcancel-${kind}-${Date.now()}`;
      const { runId } = await c.invoke('workflows/world.ts', 'hookWaiter', [token]);
      await until('the hook', async () => (await c.hook(token)).ok || undefined);
      const res = await fetch(`${weir.url}/v1/runs/${runId}/cancel`, { method: 'POST' });
      expect(res.status).toBe(202);
      await c.waitStatus(runId, 'cancelled');
      expect((await c.hook(token)).status).toBe(404);
      // weir runs ls shows it with the Go runs, kind world.
      const runs = await (await fetch(`${weir.url}/v1/runs?limit=100`)).json();
      expect(runs.runs.find((r) => r.id === runId)).toMatchObject({ kind: 'world', status: 'cancelled' });
    });

    test('two runs, one hook token: the second gets hook_conflict and fails', async () => {
      const token = `conflict-${kind}-${Date.now()}`;
      const first = await c.invoke('workflows/world.ts', 'hookWaiter', [token]);
      await until('the first hook', async () => (await c.hook(token)).ok || undefined);
      const second = await c.invoke('workflows/world.ts', 'hookWaiter', [token]);
      const failed = await c.waitStatus(second.runId, 'failed');
      expect(failed.error.message).toMatch(/token|conflict/i);
      expect(types(await c.events(second.runId))).toContain('hook_conflict');
      // The first still holds it; resuming it completes the first.
      const hook = await (await c.hook(token)).json();
      expect(hook.runId).toBe(first.runId);
      await c.resume(token, { n: 7 });
      const done = await c.waitStatus(first.runId, 'completed');
      expect(done.status).toBe('completed');
    });

    test('hook.dispose(): hook_disposed, and the token is free again', async () => {
      const token = `dispose-${kind}-${Date.now()}`;
      const { runId } = await c.invoke('workflows/world.ts', 'hookDisposer', [token]);
      await c.waitStatus(runId, 'completed');
      expect(types(await c.events(runId))).toContain('hook_disposed');
      const next = await c.invoke('workflows/world.ts', 'hookWaiter', [token]);
      const hook = await until('the token taken again', async () => {
        const r = await c.hook(token);
        return r.ok ? r.json() : undefined;
      });
      expect(hook.runId).toBe(next.runId);
      await c.resume(token, { n: 1 });
      await c.waitStatus(next.runId, 'completed');
    });

    test('a fan-out of 110 steps, and the read methods', async () => {
      const { runId } = await c.invoke('workflows/world.ts', 'fanout', [110]);
      await c.waitStatus(runId, 'completed', 120_000);
      // steps.list, paged.
      const steps = [];
      let cursor;
      do {
        const page = await world.steps.list({ runId, pagination: { limit: 50, cursor } });
        steps.push(...page.data);
        cursor = page.hasMore ? page.cursor : undefined;
      } while (cursor);
      const squares = steps.filter((s) => s.stepName.endsWith('//square'));
      expect(squares.length).toBe(110);
      expect(squares.every((s) => s.status === 'completed' && s.attempt === 1)).toBe(true);
      // events.listByCorrelationId: a step's own events.
      const byStep = await world.events.listByCorrelationId({ correlationId: squares[0].stepId });
      expect(types(byStep.data)).toEqual(['step_created', 'step_started', 'step_completed']);
      // runs.list, with a filter.
      const runs = await world.runs.list({ workflowName: squares.length ? undefined : 'x', status: 'completed', pagination: { limit: 100 } });
      expect(runs.data.some((r) => r.runId === runId)).toBe(true);
      // hooks.list: none live once their runs ended.
      const hooks = await world.hooks.list({ runId });
      expect(hooks.data).toEqual([]);
      // events.get.
      const evs = await world.events.list({ runId, pagination: { limit: 1 } });
      const one = await world.events.get(runId, evs.data[0].eventId);
      expect(one.eventType).toBe('run_created');
      expect((await world.runs.get(runId, { resolveData: 'none' })).input).toBeUndefined();
    });
  });
}
