import { afterAll, describe, expect, test } from 'vitest';
import { client, freePort, newStore, startApp, startWeir, until, weirEnv } from './procs.mjs';

// Faults, through the real app: weir server SIGKILLed mid-delivery and
// restarted, the app answering 500, the app down for a while, deliveries
// that are not weir's.

const lines = (bytes) => new TextDecoder().decode(bytes).split('\n').filter(Boolean);

for (const kind of ['sqlite', 'postgres']) {
  describe(`faults (${kind})`, () => {
    const cleanup = [];
    afterAll(async () => {
      for (const f of cleanup.reverse()) await f();
    });
    const track = (p) => (cleanup.push(() => p.stop()), p);

    test('weir server killed mid-delivery, then restarted: the run completes, no chunk twice', async () => {
      const store = newStore(kind);
      cleanup.push(() => store.drop());
      const port = await freePort();
      const args = ['--world-lease', '1s'];
      let weir = await startWeir(store.spec, { port, args });
      const app = track(await startApp(weirEnv(weir)));
      const c = client(app);
      // 4 steps of 25 chunks, one after the other: kill weir once the
      // first step's chunks are flowing.
      const { runId } = await c.invoke('workflows/bench.ts', 'benchRun', [4, 25, 64]);
      await until('chunks on the run stream', async () => {
        const res = await fetch(`${weir.url}/v1/world/runs/${runId}/streams`);
        const { streams } = await res.json();
        if (!streams.length) return undefined;
        const info = await (await fetch(`${weir.url}/v1/world/streams/${streams[0]}/info?view=live`)).json();
        return info.tailIndex >= 5 || undefined;
      });
      weir.kill();
      await weir.exited;
      weir = track(await startWeir(store.spec, { port, args }));
      await c.waitStatus(runId, 'completed', 90_000);
      const all = lines(await c.readable(runId));
      expect(all.length).toBe(100);
      const ids = all.map((l) => l.split(' ')[1]);
      expect(new Set(ids).size).toBe(100); // each step/chunk once
    });

    test('the app answers 500 twice: backed off, then delivered', async () => {
      const store = newStore(kind);
      cleanup.push(() => store.drop());
      const weir = track(await startWeir(store.spec));
      const app = track(await startApp(weirEnv(weir, { WEIR_TEST_FAIL_FLOW: '2' })));
      const c = client(app);
      const { runId } = await c.invoke('workflows/addition.ts', 'addition', [2, 3]);
      await c.waitStatus(runId, 'completed', 60_000);
      const metrics = await (await fetch(`${weir.url}/metrics`)).text();
      const failed = Number(/weir_world_deliveries_total\{outcome="failed"\} (\d+)/.exec(metrics)?.[1] ?? 0);
      expect(failed).toBeGreaterThanOrEqual(2);
      const dead = await (await fetch(`${weir.url}/v1/world/queue?state=dead`)).json();
      expect(dead.messages).toEqual([]);
    });

    test('the app down for a while: messages wait, nothing is lost', async () => {
      const store = newStore(kind);
      cleanup.push(() => store.drop());
      const weir = track(await startWeir(store.spec));
      const port = await freePort();
      let app = await startApp(weirEnv(weir), { port });
      const c = client(app);
      const { runId } = await c.invoke('workflows/world.ts', 'sleeper', [1000]);
      // Down while the run sleeps: its wake-up cannot be delivered.
      app.kill();
      await app.exited;
      await until('a failed delivery to the app that is down', async () => {
        const q = await (await fetch(`${weir.url}/v1/world/queue?state=pending`)).json();
        return q.messages.some((m) => m.failures > 0 && m.runId === runId) || undefined;
      });
      app = track(await startApp(weirEnv(weir), { port }));
      const run = await client(app).waitStatus(runId, 'completed', 60_000);
      expect(run.status).toBe('completed');
    });

    test('deliveries not signed by weir are refused with 401', async () => {
      const store = newStore(kind);
      cleanup.push(() => store.drop());
      const weir = track(await startWeir(store.spec));
      const app = track(await startApp(weirEnv(weir)));
      const body = JSON.stringify({ runId: 'wrun_forged' });
      const headers = { 'content-type': 'application/json', 'x-vqs-queue-name': '__wkf_workflow_x', 'x-vqs-message-id': 'msg_forged', 'x-vqs-message-attempt': '1' };
      for (const sig of [undefined, 't=1,v1=' + '0'.repeat(64), `t=${Math.floor(Date.now() / 1000)},v1=${'a'.repeat(64)}`]) {
        const res = await fetch(`${app.url}/.well-known/workflow/v1/flow`, {
          method: 'POST',
          headers: sig ? { ...headers, 'weir-signature': sig } : headers,
          body,
        });
        expect(res.status).toBe(401);
      }
      const step = await fetch(`${app.url}/.well-known/workflow/v1/step`, { method: 'POST', headers, body });
      expect(step.status).toBe(401);
    });
  });
}
