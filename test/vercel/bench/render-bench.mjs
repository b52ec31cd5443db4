// Writer → rendered-in-the-page latency for a Vercel Workflow app, in
// headless Chromium: a workflow (workflows/render.ts) streams STEPS steps of
// TOKENS values {text, t} to getWritable(), one every PACE ms, every fourth
// step retried half way with other tokens; one page (the app's
// /bench/render, @weirhq/client's follow) renders them and records
// now − written for each, in the DOM and at the next frame. Read three ways,
// in one sitting:
//
//   - weir, live: the app's worldStreamRoute, the live view with rewinds applied;
//   - weir, committed: the same route, view=committed;
//   - world-postgres: run.getReadable() piped to the same page as records
//     (the app's /chat/:runId/readable; world-postgres 4.3.7 on the same PostgreSQL).
//
//   WEIR_BIN=/tmp/weir node bench/render-bench.mjs [--steps 20] [--tokens 40] [--pace-ms 15] [--store sqlite|postgres]
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import pg from 'pg';
import { chromium } from 'playwright-core';
import { appDir, newStore, PG_BASE, startApp, startWeir, weirEnv } from '../test/procs.mjs';

const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const STEPS = Number(arg('steps', 20)), TOKENS = Number(arg('tokens', 40)), PACE = Number(arg('pace-ms', 15));
const STORE = arg('store', 'sqlite');

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};
const fmt = (xs) => `p50 ${pct(xs, 50).toFixed(1).padStart(6)} ms  p99 ${pct(xs, 99).toFixed(1).padStart(6)} ms  (n=${xs.length})`;

async function worldPostgresEnv() {
  const db = 'weir_bench_render_world_postgres';
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

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
});

// One run read through the given followers; returns each one's latencies.
async function measure(app, readers) {
  const tab = await browser.newPage();
  await tab.goto(`${app.url}/bench/render`);
  const res = await fetch(`${app.url}/bench/render`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ steps: STEPS, tokens: TOKENS, paceMs: PACE }),
  });
  const { runId } = await res.json();
  for (const r of readers) await tab.evaluate(([k, u, v]) => window.start(k, u, v), [r.key, `${app.url}${r.path(runId)}`, r.view]);
  await tab.waitForFunction((keys) => keys.every((k) => window.done[k]), readers.map((r) => r.key), { timeout: 300_000 });
  const { lat, done } = await tab.evaluate(() => ({ lat: window.lat, done: window.done }));
  await tab.close();
  for (const r of readers) if (done[r.key] !== true) throw new Error(`${r.key}: ${done[r.key]}`);
  return lat;
}

console.log(`render latency, a Vercel Workflow app: ${STEPS} steps × ${TOKENS} tokens every ${PACE} ms, every 4th step retried with other tokens, Node ${process.version}`);
const rows = [];
{
  const store = newStore(STORE);
  const weir = await startWeir(store.spec);
  const app = await startApp(weirEnv(weir));
  try {
    const lat = await measure(app, [
      { key: 'live', view: 'live', path: (id) => `/chat/${id}/stream` },
      { key: 'committed', view: 'committed', path: (id) => `/chat/${id}/stream` },
    ]);
    rows.push([`weir (${STORE}), live, rewinds applied`, lat.live], [`weir (${STORE}), committed`, lat.committed]);
  } finally {
    await app.stop();
    await weir.stop();
    await store.drop();
  }
}
{
  const app = await startApp(await worldPostgresEnv());
  try {
    const lat = await measure(app, [{ key: 'readable', view: 'live', path: (id) => `/chat/${id}/readable` }]);
    rows.push(['world-postgres 4.3.7, getReadable()', lat.readable]);
  } finally {
    await app.stop();
  }
}
await browser.close();
for (const [name, l] of rows) {
  console.log(`${name.padEnd(38)} in the DOM: ${fmt(l.dom)}`);
  console.log(`${''.padEnd(38)} painted:    ${fmt(l.frame)}`);
}
process.exit(0);
