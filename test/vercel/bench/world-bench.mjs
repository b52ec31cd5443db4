// weir bench world: N runs of M steps, each step writing K chunks to the
// run's stream, through the real test app, on weir's World (SQLite and
// PostgreSQL) and on world-postgres 4.3.7 against the same PostgreSQL, in one
// sitting. Each run has a reader following its stream from the start; each
// chunk carries the time it was written, so the reader measures
// writer→reader latency. It reports what a step costs: the CPU of the app,
// of weir and of PostgreSQL's backends (from /proc), and the requests weir
// served and the statements its store sent (weir's /metrics), or the
// statements world-postgres sent (pg_stat_statements, where PostgreSQL
// preloads it), per step.
//
//   WEIR_BIN=/tmp/weir node bench/world-bench.mjs [--runs 50] [--steps 5] [--chunks 20] [--size 100] [--concurrency 8] [--worlds weir-sqlite,weir-postgres,world-postgres]
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
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

// cpuOf returns the CPU seconds (user + system) of pid, 0 if it is gone.
function cpuOf(pid) {
  try {
    const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
    return (Number(rest[11]) + Number(rest[12])) / 100;
  } catch {
    return 0;
  }
}

// postgresCPU returns the CPU seconds of every postgres process now, by pid.
function postgresCPU() {
  const out = new Map();
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (fs.readFileSync(`/proc/${d}/comm`, 'utf8').trim() === 'postgres') out.set(d, cpuOf(d));
    } catch {}
  }
  return out;
}

const cpuGrowth = (a, b) => [...b].reduce((s, [pid, t]) => s + t - (a.get(pid) ?? 0), 0);

// weirCounts sums weir's /metrics counters of interest.
async function weirCounts(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const c = { requests: 0, statements: 0, roundTrips: 0 };
  for (const l of text.split('\n')) {
    const [k, v] = l.split(' ');
    if (k.startsWith('weir_http_requests_total{')) c.requests += Number(v);
    if (k === 'weir_store_statements_total') c.statements = Number(v);
    if (k === 'weir_store_round_trips_total') c.roundTrips = Number(v);
  }
  return c;
}

// pgStatements is the statements run in database db (pg_stat_statements),
// undefined where PostgreSQL does not preload it.
async function pgStatements(db) {
  const c = new pg.Client({ connectionString: PG_BASE.replace(/\/[^/?]+(\?|$)/, `/${db}$1`) });
  await c.connect();
  try {
    await c.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    const r = await c.query('SELECT sum(calls)::bigint AS n FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())');
    return Number(r.rows[0].n ?? 0);
  } catch {
    return undefined;
  } finally {
    await c.end();
  }
}

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
  const pgDB = name === 'world-postgres' ? 'weir_bench_world_postgres' : null;
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
  const w0 = weir ? await weirCounts(weir.url) : null;
  const s0 = pgDB ? await pgStatements(pgDB) : undefined;
  const cpu0 = { app: cpuOf(app.pid), weir: weir ? cpuOf(weir.pid) : 0, pg: postgresCPU() };
  const t0 = Date.now();
  let next = 0;
  await Promise.all(Array.from({ length: C }, async () => {
    while (next < N) {
      next++;
      await one();
    }
  }));
  const secs = (Date.now() - t0) / 1000;
  const steps = N * M;
  const cost = {
    appCPU: (cpuOf(app.pid) - cpu0.app) / steps * 1000,
    weirCPU: weir ? (cpuOf(weir.pid) - cpu0.weir) / steps * 1000 : 0,
    pgCPU: cpuGrowth(cpu0.pg, postgresCPU()) / steps * 1000,
  };
  if (weir) {
    const w1 = await weirCounts(weir.url);
    cost.requests = (w1.requests - w0.requests) / steps;
    cost.statements = (w1.statements - w0.statements) / steps;
    cost.roundTrips = (w1.roundTrips - w0.roundTrips) / steps;
  } else if (s0 !== undefined) {
    const s1 = await pgStatements(pgDB);
    if (s1 !== undefined) cost.statements = (s1 - s0 - 2) / steps; // less the two reads of the count
  }
  await app.stop();
  await weir?.stop();
  await store?.drop();
  if (chunks !== N * M * K) throw new Error(`${name}: read ${chunks} chunks, want ${N * M * K}`);
  return { name, secs, runsPerSec: N / secs, chunksPerSec: chunks / secs, p50: pct(latencies, 50), p99: pct(latencies, 99), cost };
}

console.log(`weir bench world: ${N} runs × ${M} steps × ${K} chunks of ${SIZE} B, ${C} runs at a time, Node ${process.version}`);
const results = [];
for (const w of worlds) {
  const r = await bench(w);
  results.push(r);
  console.log(`${r.name.padEnd(15)} ${r.secs.toFixed(1).padStart(6)} s  ${r.runsPerSec.toFixed(2).padStart(7)} runs/s  ${r.chunksPerSec.toFixed(0).padStart(6)} chunks/s  writer→reader p50 ${r.p50} ms  p99 ${r.p99} ms`);
  const k = r.cost;
  const counts = [k.requests !== undefined ? `${k.requests.toFixed(1)} requests to weir` : '', k.statements !== undefined ? `${k.statements.toFixed(1)} SQL statements` : '', k.roundTrips !== undefined ? `in ${k.roundTrips.toFixed(1)} round trips` : ''].filter(Boolean).join(', ');
  console.log(`${''.padEnd(15)} a step: CPU app ${k.appCPU.toFixed(1)} ms, weir ${k.weirCPU.toFixed(1)} ms, PostgreSQL ${k.pgCPU.toFixed(1)} ms${counts ? `; ${counts}` : ''}`);
}
const base = results.find((r) => r.name === 'world-postgres');
if (base) {
  for (const r of results) {
    if (r === base) continue;
    console.log(`${r.name} vs world-postgres: ${(r.runsPerSec / base.runsPerSec).toFixed(2)}× runs/s, ${(r.chunksPerSec / base.chunksPerSec).toFixed(2)}× chunks/s, p99 ${(r.p99 / base.p99).toFixed(2)}× (lower is better)`);
  }
}
process.exit(0);
