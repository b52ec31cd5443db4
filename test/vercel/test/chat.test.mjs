import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { newStore, startApp, startWeir, weirEnv } from './procs.mjs';

// A DurableAgent chat on a Vercel Workflow v4 app on weir, in headless
// Chromium: what a person watching a retried model step sees. The app
// (app/server.mjs) starts workflows/agent.ts on POST /chat and serves the
// run's stream at GET /chat/:runId/stream with @weirhq/world's
// worldStreamRoute (each record decoded by the runtime's own deserializer,
// rewinds intact); the page (chat-page/main.ts, bundled by the app) follows
// it with @weirhq/client's WeirChat. The model streams "Hel", "lo", ", wor",
// "ld", "!" and its first attempt drops after 3 tokens.
//
// A MutationObserver installed before the page loads records every state
// of the assistant's text with its time; the page logs each follower event
// (window.weirEvents). Needs Debian's chromium at /usr/bin/chromium (or
// CHROMIUM=...).

const chromePath = process.env.CHROMIUM || '/usr/bin/chromium';

// Every change under the document records the current turn's answer, what
// the person reads: the text parts of the assistant message after the
// last user message ("" before it shows). test/ui's observer, for a page
// that keeps its earlier turns.
const observer = () => {
  window.states = [];
  const record = () => {
    const msgs = document.querySelectorAll('.msg');
    const last = msgs[msgs.length - 1];
    const text = last?.classList.contains('assistant') ? [...last.querySelectorAll('.text')].map((e) => e.textContent).join('') : '';
    const prev = window.states[window.states.length - 1];
    if (!prev || prev.text !== text) window.states.push({ at: performance.now(), text });
  };
  new MutationObserver(record).observe(document, { subtree: true, childList: true, characterData: true });
};

let browser, app, page;
let errors = [];

beforeAll(async () => {
  browser = await chromium.launch({
    executablePath: chromePath,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
});

afterAll(async () => {
  await browser?.close();
});

/** Opens the chat page of the app (the one the tests of the describe ask). */
async function openPage(a) {
  app = a;
  errors = [];
  page = await browser.newPage();
  page.on('pageerror', (e) => errors.push(e.message));
  await page.addInitScript(observer);
  await page.goto(`${app.url}/chat`, { timeout: 30_000 });
  await page.locator('#status[data-status="ready"]').waitFor({ timeout: 30_000 });
}

/** Asks with the page's settings and waits (a deadline) for the turn to end. */
async function ask(prompt, { fail = false, same = false, ownStart = false } = {}) {
  const turns = await page.evaluate(() => {
    window.states = [];
    window.weirEvents.length = 0;
    return window.weirTurns;
  });
  for (const [id, on] of [['#fail', fail], ['#same', same], ['#own-start', ownStart]]) {
    if ((await page.locator(id).isChecked()) !== on) await page.locator(id).click();
  }
  await page.locator('#input').fill(prompt);
  await page.locator('#send').click();
  await page.waitForFunction((n) => window.weirTurns > n, turns, { timeout: 60_000 });
  return page.evaluate(() => ({
    states: window.states,
    events: window.weirEvents,
    stream: window.weirChat.getSnapshot().stream,
    status: window.weirChat.getSnapshot().status,
    error: window.weirChat.getSnapshot().error?.message,
  }));
}

/** The turn's stream in the committed view, through the app's route, its text deltas joined: what the page must end with. */
async function committedText(stream) {
  const res = await fetch(new URL(`${stream.stream}?offset=-1&view=committed`, app.url));
  expect(res.status).toBe(200);
  expect(res.headers.get('weir-data-encoding')).toBe('json');
  let text = '';
  for (const line of (await res.text()).split('\n')) {
    if (!line) continue;
    const r = JSON.parse(line);
    if (r.kind === 'data' && r.data.type === 'text-delta') text += r.data.delta;
  }
  return text;
}

/** The records of the turn's stream, live, as weir keeps them (to say what happened). */
async function records(stream) {
  const res = await fetch(new URL(`${stream.stream}?offset=-1&view=live`, app.url));
  return (await res.text()).split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

const grows = (states) => {
  for (let i = 1; i < states.length; i++) {
    expect(states[i].text.startsWith(states[i - 1].text), `the text went back: ${JSON.stringify(states.slice(i - 1, i + 1))}`).toBe(true);
  }
};

describe('a DurableAgent on @weirhq/world, in Chromium', () => {
  let store, weir, weirApp;
  beforeAll(async () => {
    store = newStore('sqlite');
    weir = await startWeir(store.spec);
    weirApp = await startApp(weirEnv(weir));
    await openPage(weirApp);
  });
  afterAll(async () => {
    await page?.close();
    await weirApp?.stop();
    await weir?.stop();
    await store?.drop();
  });

  test('a divergent retry: tokens live, none of the failed attempt once the rewind arrived, the committed text at the end', async () => {
    const { states, events, stream, status, error } = await ask('Say hello', { fail: true });
    expect(error).toBeUndefined();
    expect(status).toBe('ready');
    const rewinds = events.filter((e) => e.type === 'rewind');
    // DurableAgent's start chunk, as it ships (a messageId made up per
    // attempt), is written by the World with one id for every attempt of
    // the step: the retry's start, start-step and text-start are adopted,
    // and its first delta differs: attempt 1's three deltas are voided.
    expect(rewinds.map((r) => [r.fromSeq, r.removed])).toEqual([[3, 3]]);
    const rewindAt = rewinds[0].at;
    const firstCommit = events.find((e) => e.type === 'commit');
    expect(firstCommit).toBeDefined();

    // The first token is on the page before the model step ends, and the
    // failed attempt's tokens were shown live.
    const firstToken = states.find((s) => s.text !== '');
    expect(firstToken.at).toBeLessThan(firstCommit.at);
    expect(states.some((s) => s.at < rewindAt && s.text === 'Hello, wor')).toBe(true);

    // Once the rewind arrived, no voided token is ever on the page, and
    // the text only grows.
    const after = states.filter((s) => s.at >= rewindAt);
    expect(after.length).toBeGreaterThan(0);
    for (const s of after) for (const voided of ['Hel', 'lo', ', wor']) expect(s.text, `a voided token after the rewind`).not.toContain(voided);
    grows(after);

    const final = states[states.length - 1].text;
    expect(final).toBe('Hi there!');
    expect(final).toBe(await committedText(stream));
    expect(errors).toEqual([]);
  });

  test("the same tokens on the retry, DurableAgent as it ships (its own start chunk): adopted, no rewind, every state extends the one before", async () => {
    const { states, events, stream } = await ask('Say hello again', { fail: true, same: true });
    expect(events.filter((e) => e.type === 'rewind')).toEqual([]);
    const recs = await records(stream);
    expect(recs.filter((r) => r.kind === 'abort')).toEqual([]);
    // Attempt 2 wrote seq 0 to 5 again (start with the World's messageId,
    // start-step, text-start, three deltas), identical: adopted, no record.
    const model = recs.filter((r) => r.kind === 'data' && r.data.type === 'text-delta');
    expect(model.map((r) => [r.attempt, r.seq, r.data.delta])).toEqual([
      [1, 3, 'Hel'],
      [1, 4, 'lo'],
      [1, 5, ', wor'],
      [2, 6, 'ld'],
      [2, 7, '!'],
    ]);
    const starts = recs.filter((r) => r.kind === 'data' && r.data.type === 'start');
    expect(starts.map((r) => [r.attempt, r.seq])).toEqual([[1, 0]]);
    expect(starts[0].data.messageId).toMatch(/^[0-9A-Za-z]{16}$/);
    expect(states.some((s) => s.text === 'Hello, wor')).toBe(true);
    grows(states);
    expect(states[states.length - 1].text).toBe('Hello, world!');
    expect(await committedText(stream)).toBe('Hello, world!');
    expect(errors).toEqual([]);
  });

  test('the same tokens with a start chunk of the workflow (sendStart: false): adopted, no rewind, no flicker', async () => {
    const { states, events, stream } = await ask('Say hello once more', { fail: true, same: true, ownStart: true });
    expect(events.filter((e) => e.type === 'rewind')).toEqual([]);
    const recs = await records(stream);
    expect(recs.filter((r) => r.kind === 'abort')).toEqual([]);
    // Attempt 2 wrote seq 0 to 4 again, identical: adopted, no record;
    // its records start where attempt 1 stopped.
    const model = recs.filter((r) => r.kind === 'data' && r.data.type === 'text-delta');
    expect(model.map((r) => [r.attempt, r.seq, r.data.delta])).toEqual([
      [1, 2, 'Hel'],
      [1, 3, 'lo'],
      [1, 4, ', wor'],
      [2, 5, 'ld'],
      [2, 6, '!'],
    ]);
    expect(states.some((s) => s.text === 'Hello, wor')).toBe(true);
    grows(states);
    expect(states[states.length - 1].text).toBe('Hello, world!');
    expect(await committedText(stream)).toBe('Hello, world!');
    expect(errors).toEqual([]);
  });

  test("a divergent retry with the workflow's start chunk: rewound from the first difference, the committed text at the end", async () => {
    const { states, events, stream } = await ask('Say hi', { fail: true, ownStart: true });
    // The model step's chunks: start-step, text-start, then the deltas; the
    // retry's first two are adopted, its first delta differs.
    const rewinds = events.filter((e) => e.type === 'rewind');
    expect(rewinds.map((r) => [r.fromSeq, r.removed])).toEqual([[2, 3]]);
    const after = states.filter((s) => s.at >= rewinds[0].at);
    for (const s of after) for (const voided of ['Hel', 'lo', ', wor']) expect(s.text, `a voided token after the rewind`).not.toContain(voided);
    grows(after);
    expect(states[states.length - 1].text).toBe('Hi there!');
    expect(await committedText(stream)).toBe('Hi there!');
    expect(errors).toEqual([]);
  });

  test('the route refuses what is not a read of records', async () => {
    const res = await fetch(`${app.url}/chat/wrun_x/stream?format=raw`);
    expect(res.status).toBe(400);
    expect(await res.text()).toMatch(/format=ndjson only/);
    expect((await fetch(`${app.url}/chat/wrun_x/stream?path=runs/other/tokens`)).status).toBe(400);
  });
});

// For the record, not a test of weir: the same page on world-local,
// reading run.getReadable() (every chunk as written, none ever taken back;
// the app serves them as final records). Should world-local's readers stop
// seeing a failed attempt's chunks, this says so.
describe('the same page on world-local 4.4.1, today', () => {
  let localApp, dir;
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'world-local-chat-'));
    localApp = await startApp({ WORKFLOW_TARGET_WORLD: 'local', WORKFLOW_LOCAL_DATA_DIR: dir });
    await openPage(localApp);
  });
  afterAll(async () => {
    await page?.close();
    await localApp?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test("DurableAgent's own start chunk: the retry's new messageId makes the AI SDK's fold start the message again", async () => {
    // The stream holds both attempts, but ai 6's readUIMessageStream (the
    // page's fold) resets the message on a start chunk with another
    // messageId: the page shows what weir's does, by the AI SDK's doing.
    // useChat resets only when it resumes a stream, and shows both.
    const { states, events } = await ask('Say hello', { fail: true });
    expect(events.filter((e) => e.type === 'rewind')).toEqual([]);
    const texts = states.map((s) => s.text);
    const shown = texts.indexOf('Hello, wor');
    expect(shown, JSON.stringify(texts)).toBeGreaterThan(0);
    expect(texts.slice(shown + 1, shown + 2), JSON.stringify(texts)).toEqual(['']);
    expect(texts[texts.length - 1]).toBe('Hi there!');
  });

  test("a start chunk of the workflow's: both attempts' tokens on the page, a divergent retry's and an identical one's", async () => {
    const divergent = await ask('Say hello', { fail: true, ownStart: true });
    expect(divergent.states[divergent.states.length - 1].text).toBe('Hello, worHi there!');
    const same = await ask('Say hello again', { fail: true, same: true, ownStart: true });
    const final = same.states[same.states.length - 1].text;
    console.log(`world-local, an identical retry: the page ends with ${JSON.stringify(final)} (weir: "Hello, world!")`);
    expect(final).toBe('Hello, worHello, world!');
  });
});
