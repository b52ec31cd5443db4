// The Next.js example on weir, end to end. First the story: weir server on a
// fresh SQLite file, the app built (`next build`) and started (`next
// start`) with the World's settings, a story started through the app's own
// route, and its stream read through the app's worldStreamRoute with
// @weirhq/client's follow, both installed from the release tarballs. The
// story's first attempt fails after three words and its retry tells
// another: the reader must see the first words live, take them back at the
// retry's rewind, and end with the retry's words alone; the committed view
// must hold those alone.
//
// Then the chat, in headless Chromium (Debian's chromium, or $CHROMIUM): the
// page (app/page.tsx, useChat from @weirhq/client/react) asks Vercel's
// DurableAgent, as it ships, on a scripted model whose first attempt fails
// after 3 tokens. A MutationObserver installed before the page loads
// records every text the answer shows. A retry that says the same: every
// state extends the one before, no rewind. A retry that says other words:
// no voided token once the rewind arrived. With the workflow's own start
// chunk (sendStart: false): adopted too. Each ends with the committed view.
//
//   WEIR_BIN=/path/to/weir node test.mjs      (after next build)
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { follow } from '@weirhq/client';
import { chromium } from 'playwright-core';

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
  await chatInChromium();
  console.log('PASS: a Next.js app with workflow/next on weir, from the release tarballs');
} catch (err) {
  console.error(String(err), '\n--- next start said:\n' + app.output().slice(-4000));
  process.exitCode = 1;
} finally {
  procs.forEach((p) => p.kill('SIGTERM'));
  fs.rmSync(dir, { recursive: true, force: true });
}

// Every change under the document records the answer the person reads: the
// text of the last message if it is the assistant's.
function observer() {
  window.states = [];
  const record = () => {
    const msgs = document.querySelectorAll('.msg');
    const last = msgs[msgs.length - 1];
    const text = last?.classList.contains('assistant') ? [...last.querySelectorAll('.text')].map((e) => e.textContent).join('') : '';
    const prev = window.states[window.states.length - 1];
    if (!prev || prev.text !== text) window.states.push({ at: performance.now(), text });
  };
  new MutationObserver(record).observe(document, { subtree: true, childList: true, characterData: true });
}

async function chatInChromium() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  try {
    const page = await browser.newPage();
    const pageErrors = [];
    page.on('pageerror', (e) => pageErrors.push(e.message));
    await page.addInitScript(observer);
    await page.goto(`${appUrl}/`, { timeout: 60_000 });
    await page.locator('main[data-hydrated="yes"]').waitFor({ timeout: 60_000 });

    /** Asks with the page's checkboxes set so, and waits (a deadline) for the turn to end. */
    const ask = async (prompt, flags) => {
      const turns = await page.evaluate(() => {
        window.states = [];
        window.weirEvents.length = 0;
        return window.weirTurns;
      });
      for (const id of ['fail', 'same', 'ownStart']) {
        if ((await page.locator(`#${id}`).isChecked()) !== (flags[id] === true)) await page.locator(`#${id}`).click();
      }
      await page.locator('#input').fill(prompt);
      await page.locator('#send').click();
      await page.waitForFunction((n) => window.weirTurns > n, turns, { timeout: 60_000 });
      return page.evaluate(() => ({
        states: window.states,
        events: window.weirEvents,
        stream: document.querySelector('main').dataset.stream,
        status: document.querySelector('#status').dataset.status,
      }));
    };
    const committedText = async (stream) => {
      const res = await fetch(new URL(`${stream}?offset=-1&view=committed`, appUrl));
      let text = '';
      for (const line of (await res.text()).split('\n')) {
        if (!line) continue;
        const r = JSON.parse(line);
        if (r.kind === 'data' && r.data.type === 'text-delta') text += r.data.delta;
      }
      return text;
    };
    // The records as weir keeps them, every attempt's (view=live): which
    // attempts wrote the deltas, so a case of a retry shows one happened.
    const deltaAttempts = async (stream) => {
      const res = await fetch(new URL(`${stream}?offset=-1&view=live`, appUrl));
      const attempts = [];
      for (const line of (await res.text()).split('\n')) {
        if (!line) continue;
        const r = JSON.parse(line);
        if (r.kind === 'data' && r.data.type === 'text-delta') attempts.push(r.attempt);
      }
      return attempts;
    };
    const grows = (states) => states.every((s, i) => i === 0 || s.text.startsWith(states[i - 1].text));
    const texts = (states) => JSON.stringify(states.map((s) => s.text));

    // DurableAgent as it ships, a retry that says the same.
    let t = await ask('Say hello', { fail: true, same: true });
    check(t.status === 'ready', `the turn ended ready (${t.status})`);
    check(t.stream.startsWith('/api/chat/wrun_'), `useChat took the run's stream from x-workflow-run-id: ${t.stream}`);
    check(t.states.some((s) => s.text === 'Hello, wor'), `the failed attempt's tokens were shown live: ${texts(t.states)}`);
    check(t.events.every((e) => e.type !== 'rewind'), 'DurableAgent as it ships, an identical retry: no rewind');
    check(grows(t.states), `every state extends the one before: ${texts(t.states)}`);
    let attempts = await deltaAttempts(t.stream);
    check(JSON.stringify(attempts) === '[1,1,1,2,2]', `attempt 1 wrote three deltas, its retry (adopting them) the last two: ${JSON.stringify(attempts)}`);
    const sameFinal = t.states.at(-1)?.text;
    check(sameFinal === 'Hello, world!' && sameFinal === (await committedText(t.stream)), `it ends with the committed text: ${JSON.stringify(sameFinal)}`);

    // A retry that says other words.
    t = await ask('Say hi', { fail: true });
    const rewinds = t.events.filter((e) => e.type === 'rewind');
    check(rewinds.length === 1, `a divergent retry: one rewind (${rewinds.length})`);
    check(t.states.some((s) => s.at < rewinds[0].at && s.text === 'Hello, wor'), 'the failed attempt was shown live before it');
    const after = t.states.filter((s) => s.at >= rewinds[0].at);
    check(after.every((s) => !/Hel|lo|wor/.test(s.text)), `no voided token once the rewind arrived: ${texts(after)}`);
    check(grows(after), `from the rewind on, the text only grows: ${texts(after)}`);
    const otherFinal = t.states.at(-1)?.text;
    check(otherFinal === 'Hi there!' && otherFinal === (await committedText(t.stream)), `it ends with the committed text: ${JSON.stringify(otherFinal)}`);

    // The workflow's own start chunk (sendStart: false), an identical retry.
    t = await ask('Say hello once more', { fail: true, same: true, ownStart: true });
    check(t.events.every((e) => e.type !== 'rewind') && grows(t.states), `sendStart: false, an identical retry: no rewind, every state extends the one before: ${texts(t.states)}`);
    attempts = await deltaAttempts(t.stream);
    check(JSON.stringify(attempts) === '[1,1,1,2,2]', `sendStart: false: attempt 1 wrote three deltas, its retry the last two: ${JSON.stringify(attempts)}`);
    const ownFinal = t.states.at(-1)?.text;
    check(ownFinal === 'Hello, world!' && ownFinal === (await committedText(t.stream)), `it ends with the committed text: ${JSON.stringify(ownFinal)}`);
    check(pageErrors.length === 0, `no error in the page: ${JSON.stringify(pageErrors)}`);
  } finally {
    await browser.close();
  }
}
