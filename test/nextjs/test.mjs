// A Next.js app with workflow/next on weir, end to end: weir server on a
// fresh SQLite file, the app built (`next build`) and started (`next
// start`) with the World's settings, a story started through the app's own
// route, and its stream read through the app's worldStreamRoute with
// @weirhq/client's follow, both installed from the release tarballs. The
// story's first attempt fails after three words and its retry tells
// another: the reader must see the first words live, take them back at the
// retry's rewind, and end with the retry's words alone; the committed view
// must hold those alone.
//
//   WEIR_BIN=/path/to/weir node test.mjs      (after next build)
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { follow } from '@weirhq/client';

const here = path.dirname(fileURLToPath(import.meta.url));
const bin = process.env.WEIR_BIN;
if (!bin) throw new Error('WEIR_BIN must name a weir binary');
const secret = 'nextjs-test-secret-0123456789abcdef';
const procs = [];
process.on('exit', () => procs.forEach((p) => p.kill('SIGKILL')));

const freePort = () =>
  new Promise((resolve, reject) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });

/** Spawns cmd and waits (at most ms) for a line of its output to match re. */
function start(cmd, args, { env, re, what, ms = 60_000 }) {
  const p = spawn(cmd, args, { cwd: here, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  procs.push(p);
  let out = '';
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`${what} did not start within ${ms / 1000}s:\n${out}`)), ms);
    const check = (b) => {
      out += b;
      if (re.test(out)) {
        clearTimeout(t);
        resolve({ p, output: () => out });
      }
    };
    p.stdout.on('data', check);
    p.stderr.on('data', check);
    p.on('exit', (code) => {
      clearTimeout(t);
      reject(new Error(`${what} exited (${code}):\n${out}`));
    });
  });
}

async function until(what, cond, ms = 60_000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await cond().catch(() => undefined);
    if (v) return v;
    if (Date.now() > end) throw new Error(`waited ${ms / 1000}s for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const check = (ok, what) => {
  if (!ok) throw new Error(`FAIL: ${what}`);
  console.log(`ok   ${what}`);
};

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'weir-nextjs-'));
const weirPort = await freePort();
const appPort = await freePort();
const weirUrl = `http://127.0.0.1:${weirPort}`;
const appUrl = `http://127.0.0.1:${appPort}`;
await start(bin, ['server', '--addr', `127.0.0.1:${weirPort}`, '--store', `sqlite:${path.join(dir, 'weir.db')}`, '--world-secret', secret], {
  re: /listening on/,
  what: 'weir server',
});
const next = path.join(here, 'node_modules/next/dist/bin/next');
const app = await start(process.execPath, [next, 'start', '-p', String(appPort), '-H', '127.0.0.1'], {
  env: { WORKFLOW_TARGET_WORLD: '@weirhq/world', WEIR_URL: weirUrl, WEIR_WORLD_SECRET: secret, WEIR_APP_URL: appUrl },
  re: /Ready in|started server on/,
  what: 'next start',
});

try {
  const topic = 'weir';
  const res = await fetch(`${appUrl}/api/story`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ topic }) });
  check(res.ok, `POST /api/story answers ${res.status}`);
  const { runId } = await res.json();
  check(/^wrun_/.test(runId), `the run ${runId} started`);

  // The live view with weir's rewinds applied, through the app's route.
  const seen = [];
  const live = follow({
    url: `${appUrl}/api/story/${runId}/stream`,
    waitForStreamMs: 60_000,
    onEvent(ev, snap) {
      seen.push({ type: ev.type, text: snap.chunks.map((c) => c.data).join('') });
    },
  });
  const final = await Promise.race([live.done, new Promise((_, rej) => setTimeout(() => rej(new Error('the live follower did not end within 60s')), 60_000))]);
  const text = final.chunks.map((c) => c.data).join('');
  check(text === `A story of ${topic}.`, `the live view ends with the retry's story alone: ${JSON.stringify(text)}`);
  check(seen.some((s) => s.type === 'rewind'), `the retry's rewind arrived (${seen.map((s) => s.type).join(', ')})`);
  const afterRewind = seen.slice(seen.findIndex((s) => s.type === 'rewind'));
  check(afterRewind.every((s) => !/Once|upon/.test(s.text)), 'no word of the failed attempt is shown once the rewind arrived');

  const committed = await follow({ url: `${appUrl}/api/story/${runId}/stream`, view: 'committed', waitForStreamMs: 10_000 }).done;
  const ctext = committed.chunks.map((c) => c.data).join('');
  check(ctext === `A story of ${topic}.`, `the committed view holds the retry's words alone: ${JSON.stringify(ctext)}`);

  const run = await until('the run to complete', async () => {
    const r = await (await fetch(`${appUrl}/api/story/${runId}`)).json();
    return r.status === 'completed' ? r : undefined;
  });
  check(run.story === `A story of ${topic}.`, `the run completed with its story: ${JSON.stringify(run.story)}`);
  // weir's own view of the run: a World run, in the runs API.
  const wr = await (await fetch(`${weirUrl}/v1/runs/${runId}`)).json();
  check(wr.status === 'completed', `weir's runs API shows the run completed (${wr.status})`);
  console.log('PASS: a Next.js app with workflow/next on weir, from the release tarballs');
} catch (err) {
  console.error(String(err), '\n--- next start said:\n' + app.output().slice(-4000));
  process.exitCode = 1;
} finally {
  procs.forEach((p) => p.kill('SIGTERM'));
  fs.rmSync(dir, { recursive: true, force: true });
}
