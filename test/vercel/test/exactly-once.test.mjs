import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { appDir, client, newStore, PG_BASE, startApp, startWeir, weirEnv } from './procs.mjs';

// The exactly-once scenario (workflows/stream-retry.ts), side by side: step
// A writes A0 A1 A2 to getWritable() and fails once; step B writes B through
// a writable passed in as an argument and fails once; step F writes F0 F1
// and fails for good; step C writes `end` and closes. On weir each chunk is
// there once, in both views; on world-local and world-postgres, today, the
// retried steps' chunks are there twice (the seed report). Should they
// ever stop, this test says so.

const lines = (bytes) => new TextDecoder().decode(bytes).split('\n').filter(Boolean);

async function scenario(app, mode) {
  const c = client(app);
  const { runId } = await c.invoke('workflows/stream-retry.ts', 'streamRetry', [mode]);
  const run = await c.waitStatus(runId, 'completed');
  expect(run.status).toBe('completed');
  return { runId, live: lines(await c.readable(runId)) };
}

const IDENTICAL = ['A0', 'A1', 'A2', 'B', 'end'];
const FAILED = ['F0', 'F1'];

for (const variant of [
  { kind: 'sqlite' },
  { kind: 'postgres' },
  // No barrier: B's chunk (a writable passed in, flushed after the
  // outcome) reaches weir after step_completed, and still counts once.
  { kind: 'sqlite', env: { WEIR_WORLD_BARRIER_MS: '0' }, late: true },
]) {
  describe(`weir (${variant.kind}${variant.late ? ', writes after the outcome' : ''})`, () => {
    let weir, store, app, committedApp;
    beforeAll(async () => {
      store = newStore(variant.kind);
      weir = await startWeir(store.spec);
      app = await startApp(weirEnv(weir, variant.env));
      // A second app, reading the committed view.
      committedApp = await startApp(weirEnv(weir, { ...variant.env, WEIR_WORLD_READ_VIEW: 'committed' }));
    });
    afterAll(async () => {
      await app?.stop();
      await committedApp?.stop();
      await weir?.stop();
      await store?.drop();
    });

    async function records(runId) {
      const { streams } = await (await fetch(`${weir.url}/v1/world/runs/${runId}/streams`)).json();
      expect(streams.length).toBe(1);
      const res = await fetch(`${weir.url}/v1/stream/runs/${runId}/${streams[0]}?format=ndjson&view=live`);
      return (await res.text()).split('\n').filter(Boolean).map((l) => JSON.parse(l));
    }

    // Without the barrier, a write that lands after its step's outcome is
    // still taken (weir's late rule) and the committed view stays exact;
    // the live view may then show a chunk an earlier attempt also wrote
    // (docs/world.md), and a failed step's late chunks are dropped. No
    // chunk of a completed step is lost from either.
    const inOrder = (all, part) => {
      let i = 0;
      for (const x of all) if (x === part[i]) i++;
      return i === part.length;
    };

    test('identical retries: each chunk once, in both views', async () => {
      const { runId, live } = await scenario(app, 'identical');
      const committed = lines(await client(committedApp).readable(runId));
      expect(committed).toEqual(IDENTICAL);
      if (variant.late) {
        expect(inOrder(live, IDENTICAL), `live ${live} holds ${IDENTICAL}`).toBe(true);
        return;
      }
      expect(live).toEqual(['A0', 'A1', 'A2', 'B', ...FAILED, 'end']);
      // The retries adopted their chunks: no abort but the failed step's.
      const recs = await records(runId);
      const aborts = recs.filter((r) => r.kind === 'abort');
      expect(aborts.length).toBe(1);
      const metrics = await (await fetch(`${weir.url}/metrics`)).text();
      const adopted = Number(/weir_stream_chunks_total\{outcome="adopted"\} (\d+)/.exec(metrics)?.[1] ?? 0);
      expect(adopted).toBeGreaterThanOrEqual(variant.late ? 3 : 4);
    });

    test('divergent retries: the committed view holds the final attempts, the live view shows the aborts', async () => {
      const { runId, live } = await scenario(app, 'divergent');
      const committed = lines(await client(committedApp).readable(runId));
      expect(committed).toEqual(['A0@2', 'A1@2', 'B@2', 'end']);
      if (variant.late) {
        expect(inOrder(live, committed), `live ${live} holds ${committed}`).toBe(true);
        return;
      }
      // Every chunk written, as another World shows them: never more.
      expect(live).toEqual(['A0@1', 'A1@1', 'A2@1', 'A0@2', 'A1@2', 'B@1', 'B@2', ...FAILED, 'end']);
      // weir-aware readers see where each attempt diverged.
      const recs = await records(runId);
      const aborts = recs.filter((r) => r.kind === 'abort').map((r) => `${r.writer}@${r.from}`);
      expect(aborts.length).toBe(3); // A's first difference, B's, and F's abort from 0
      expect(aborts.some((a) => a.endsWith('@0'))).toBe(true);
    });
  });
}

describe('world-local 4.4.1, today', () => {
  let app, dir;
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'world-local-'));
    app = await startApp({ WORKFLOW_TARGET_WORLD: 'local', WORKFLOW_LOCAL_DATA_DIR: dir });
  });
  afterAll(async () => {
    await app?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  test('identical retries: the retried chunks twice', async () => {
    const { live } = await scenario(app, 'identical');
    expect(live).toEqual(['A0', 'A1', 'A2', 'A0', 'A1', 'A2', 'B', 'B', ...FAILED, 'end']);
  });
  test('divergent retries: both attempts', async () => {
    const { live } = await scenario(app, 'divergent');
    expect(live).toEqual(['A0@1', 'A1@1', 'A2@1', 'A0@2', 'A1@2', 'B@1', 'B@2', ...FAILED, 'end']);
  });
});

describe('world-postgres 4.3.7, today', () => {
  let app;
  const db = 'weir_world_postgres';
  const url = PG_BASE.replace(/\/[^/?]+(\?|$)/, `/${db}$1`);
  beforeAll(async () => {
    const admin = new pg.Client({ connectionString: PG_BASE.replace(/\?.*$/, '') });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${db}`);
    await admin.end();
    execFileSync(process.execPath, [path.join(appDir, 'node_modules/@workflow/world-postgres/bin/setup.js')], {
      env: { ...process.env, WORKFLOW_POSTGRES_URL: url },
      stdio: 'pipe',
    });
    app = await startApp({ WORKFLOW_TARGET_WORLD: '@workflow/world-postgres', WORKFLOW_POSTGRES_URL: url });
  });
  afterAll(async () => {
    await app?.stop();
  });
  test('identical retries: the retried chunks twice', async () => {
    const { live } = await scenario(app, 'identical');
    expect(live).toEqual(['A0', 'A1', 'A2', 'A0', 'A1', 'A2', 'B', 'B', ...FAILED, 'end']);
  });
  test('divergent retries: both attempts', async () => {
    const { live } = await scenario(app, 'divergent');
    expect(live).toEqual(['A0@1', 'A1@1', 'A2@1', 'A0@2', 'A1@2', 'B@1', 'B@2', ...FAILED, 'end']);
  });
});
