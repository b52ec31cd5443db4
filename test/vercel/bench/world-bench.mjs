// weir bench world: N runs of M steps, each step writing K chunks to the
// run's stream, through the real test app, on weir's World (SQLite and
// PostgreSQL) and on world-postgres 4.3.7 against the same PostgreSQL, in one
// sitting. Each run has a reader following its stream from the start; each
// chunk carries the time it was written, so the reader measures
// writer→reader latency.
//
//   WEIR_BIN=/tmp/weir node bench/world-bench.mjs [--runs 50] [--steps 5] [--chunks 20] [--size 100] [--concurrency 8] [--worlds weir-sqlite,weir-postgres,world-postgres]
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import pg from 'pg';
import { appDir, client, newStore, PG_BASE, startApp, startWeir, weirEnv } from '../test/procs.mjs';

const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const N = Number(arg('runs', 50)), M = Number(arg('steps', 5)), K = Number(arg('chunks', 20));
const SIZE = Number(arg('size', 100)), C = Number(arg('concurrency', 8));
const worlds = arg('worlds', 'weir-sqlite,weir-postgres,world-postgres').split(',');

async function worldPostgresEnv() {
  const db = 'weir_bench_world_postgres';
  const url = PG_BASE.replace(/\/[^/?]+(\?|$)/, `/${db}$1`);
  const admin = new pg.Client({ connectionString: PG_BASE.replace(/\?.*$/, '') });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
  await admin.query(`CREATE DATABASE ${db}`);
  await admin.end();
  execFileSync(process.execPath, [path.join(appDir, 'node_modules/@workflow/world-postgres/bin/setup.js')], {
    env: { ...process.env, WORKFLOW_POSTGRES_URL: url },
    stdio: 'pipe',
  });
  return { WORKFLOW_TARGET_WORLD: '@workflow/world-postgres', WORKFLOW_POSTGRES_URL: url };
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};

async function bench(name) {
  let weir, store, env;
  if (name.startsWith('weir-')) {
    store = newStore(name.slice(5));
    weir = await startWeir(store.spec);
    env = weirEnv(weir);
  } else {
    env = await worldPostgresEnv();
  }
  const app = await startApp(env);
  const c = client(app);
  const latencies = [];
  let chunks = 0;
  const one = async () => {
    const { runId } = await c.invoke('workflows/bench.ts', 'benchRun', [M, K, SIZE]);
    const res = await fetch(`${app.url}/runs/${runId}/readable`);
    const dec = new TextDecoder();
    let buf = '';
    for await (const b of res.body) {
      const now = Date.now();
      buf += dec.decode(b, { stream: true });
      const lines = buf.split('\n');
      buf = lines.pop();
      for (const l of lines) {
        latencies.push(now - Number(l.split(' ')[0]));
        chunks++;
      }
    }
    await c.waitStatus(runId, 'completed', 300_000);
  };
  const t0 = Date.now();
  let next = 0;
  await Promise.all(Array.from({ length: C }, async () => {
    while (next < N) {
      next++;
      await one();
    }
  }));
  const secs = (Date.now() - t0) / 1000;
  await app.stop();
  await weir?.stop();
  await store?.drop();
  if (chunks !== N * M * K) throw new Error(`${name}: read ${chunks} chunks, want ${N * M * K}`);
  return { name, secs, runsPerSec: N / secs, chunksPerSec: chunks / secs, p50: pct(latencies, 50), p99: pct(latencies, 99) };
}

console.log(`weir bench world: ${N} runs × ${M} steps × ${K} chunks of ${SIZE} B, ${C} runs at a time, Node ${process.version}`);
const results = [];
for (const w of worlds) {
  const r = await bench(w);
  results.push(r);
  console.log(`${r.name.padEnd(15)} ${r.secs.toFixed(1).padStart(6)} s  ${r.runsPerSec.toFixed(2).padStart(7)} runs/s  ${r.chunksPerSec.toFixed(0).padStart(6)} chunks/s  writer→reader p50 ${r.p50} ms  p99 ${r.p99} ms`);
}
const base = results.find((r) => r.name === 'world-postgres');
if (base) {
  for (const r of results) {
    if (r === base) continue;
    console.log(`${r.name} vs world-postgres: ${(r.runsPerSec / base.runsPerSec).toFixed(2)}× runs/s, ${(r.chunksPerSec / base.chunksPerSec).toFixed(2)}× chunks/s, p99 ${(r.p99 / base.p99).toFixed(2)}× (lower is better)`);
  }
}
process.exit(0);
