// examples/agent-chat in headless Chromium: what a person watching a
// retried LLM step sees. The example's binary serves its page and the
// agent on a fresh SQLite file; the page (React, @weirhq/client's
// useChat) asks a question; the agent's first model call streams a few
// tokens, fails, and is retried. A MutationObserver installed before the
// page loads records every state of the rendered answer with its time, and
// the page logs each follower event (window.weirEvents).
//
//   AGENT_CHAT_BIN=/path/to/agent-chat node --test chat.test.mjs
//
// Needs Debian's chromium at /usr/bin/chromium (or CHROMIUM=...).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import net from "node:net";
import { chromium } from "playwright-core";

const bin = process.env.AGENT_CHAT_BIN || "agent-chat";
const chromePath = process.env.CHROMIUM || "/usr/bin/chromium";

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
    s.on("error", reject);
  });
}

async function waitUp(url, ms = 15000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try { if ((await fetch(url + "/")).ok) return; } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("agent-chat did not answer at " + url);
}

// Installed before the page's own script: every change under #messages
// records the assistant's last message's text parts (what the person reads)
// and its tool lines.
const observer = () => {
  window.states = [];
  const record = () => {
    const msgs = document.querySelectorAll(".msg.assistant");
    const last = msgs[msgs.length - 1];
    const text = last ? [...last.querySelectorAll(".text")].map((e) => e.textContent).join("") : "";
    const prev = window.states[window.states.length - 1];
    if (!prev || prev.text !== text) window.states.push({ at: performance.now(), text });
  };
  new MutationObserver(record).observe(document, { subtree: true, childList: true, characterData: true });
};

async function startApp(t) {
  const dir = mkdtempSync(join(tmpdir(), "weir-chat-"));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const app = spawn(bin, ["--addr", `127.0.0.1:${port}`, "--weir-addr", "", "--db", join(dir, "chat.db"),
    "--token-delay", "40ms", "--retry-delay", "400ms"], { stdio: ["ignore", "inherit", "inherit"] });
  t.after(() => { app.kill("SIGTERM"); rmSync(dir, { recursive: true, force: true }); });
  await waitUp(url);
  const browser = await chromium.launch({
    executablePath: chromePath,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
  t.after(() => browser.close());
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.addInitScript(observer);
  await page.goto(url + "/");
  return { url, page, errors };
}

// ask sends a question with the failure settings and waits for the turn to end.
async function ask(page, question, { fail, after = 3, same = false }) {
  await page.evaluate(() => { window.states = []; window.weirEvents.length = 0; });
  if ((await page.locator("#fail").isChecked()) !== fail) await page.locator("#fail").click();
  await page.locator("#fail-after").fill(String(after));
  if ((await page.locator("#same").isChecked()) !== same) await page.locator("#same").click();
  await page.locator("#input").fill(question);
  await page.locator("#send").click();
  await page.locator('#status[data-status="streaming"]').waitFor({ timeout: 20_000 });
  await page.locator('#status[data-status="ready"]').waitFor({ timeout: 60_000 });
  return page.evaluate(() => ({
    states: window.states,
    events: window.weirEvents,
    stream: window.weirChat.getSnapshot().stream,
    error: window.weirChat.getSnapshot().error?.message,
  }));
}

// committedText reads the turn's stream in the committed view, through the
// app's route, and joins its text deltas: what the page must end with.
async function committedText(url, stream) {
  return (await committed(url, stream)).text;
}

async function committed(url, stream) {
  const res = await fetch(new URL(stream.stream + "?offset=-1&view=committed", url));
  assert.equal(res.status, 200);
  let text = "";
  let chunks = 0;
  for (const line of (await res.text()).split("\n")) {
    if (!line) continue;
    const r = JSON.parse(line);
    if (r.kind !== "data") continue;
    chunks++;
    if (r.data.type === "text-delta") text += r.data.delta;
  }
  return { text, chunks };
}

// The page's second reader, useFollow, ends closed with the committed
// chunks visible and the rewinds it applied.
async function recordsPanel(page, url, stream, rewinds) {
  const panel = page.locator("#records[data-state='closed']");
  await panel.waitFor({ timeout: 20_000 });
  assert.equal(Number(await panel.getAttribute("data-chunks")), (await committed(url, stream)).chunks);
  assert.equal(Number(await panel.getAttribute("data-rewinds")), rewinds);
}

test("a divergent retry: tokens live, the failed attempt's gone once the rewind arrives, the committed answer at the end", { timeout: 120_000 }, async (t) => {
  const { url, page, errors } = await startApp(t);
  const { states, events, stream, error } = await ask(page, "What is the weather in Paris?", { fail: true, after: 3 });
  assert.equal(error, undefined);
  const rewinds = events.filter((e) => e.type === "rewind");
  assert.equal(rewinds.length, 1, `one rewind: ${JSON.stringify(events)}`);
  const rewindAt = rewinds[0].at;
  const firstCommit = events.find((e) => e.type === "commit");
  assert.ok(firstCommit, "the steps committed");

  // The first token is on the page before the first step ends (live, not
  // at the commit), and the failed attempt's tokens were shown live.
  const firstToken = states.find((s) => s.text !== "");
  assert.ok(firstToken && firstToken.at < firstCommit.at, `first token at ${firstToken?.at}, first commit at ${firstCommit.at}`);
  assert.ok(states.some((s) => s.at < rewindAt && s.text.startsWith("Let me look")), "the failed attempt's tokens were shown live");

  // Once the rewind arrived, no voided token is ever on the page, and the
  // text only grows.
  const after = states.filter((s) => s.at >= rewindAt);
  assert.ok(after.length > 0);
  for (const s of after) assert.ok(!s.text.includes("Let me"), `a voided token after the rewind: ${JSON.stringify(s)}`);
  for (let i = 1; i < after.length; i++) assert.ok(after[i].text.startsWith(after[i - 1].text), `the text went back: ${JSON.stringify(after.slice(i - 1, i + 1))}`);

  // The page ends with exactly the committed view.
  const final = states[states.length - 1].text;
  assert.equal(final, await committedText(url, stream));
  assert.match(final, /^Sure! I will check Paris's weather and local time at once\.You asked: "What is the weather in Paris\?"\. In Paris it is/);
  await recordsPanel(page, url, stream, 1);
  // Both tools, run in parallel by the agent, show their results.
  assert.equal(await page.locator(".msg.assistant .tool[data-state='output-available']").count(), 2);
  assert.deepEqual(errors, []);
});

test("an identical retry: adopted, no rewind, no flicker", { timeout: 120_000 }, async (t) => {
  const { url, page, errors } = await startApp(t);
  const { states, events, stream } = await ask(page, "And in Oslo?", { fail: true, after: 4, same: true });
  assert.deepEqual(events.filter((e) => e.type === "rewind"), []);
  // Every state of the text is a prefix of the next: nothing shown is ever
  // taken back or changed.
  for (let i = 1; i < states.length; i++) assert.ok(states[i].text.startsWith(states[i - 1].text), `flicker: ${JSON.stringify(states.slice(i - 1, i + 1))}`);
  assert.equal(states[states.length - 1].text, await committedText(url, stream));
  await recordsPanel(page, url, stream, 0);
  assert.deepEqual(errors, []);
});

test("a hostile chunk is text: the page renders the model's HTML as characters, never as markup", { timeout: 120_000 }, async (t) => {
  const { url, page, errors } = await startApp(t);
  const evil = `<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>`;
  const { states, stream } = await ask(page, evil, { fail: false });
  const final = states[states.length - 1].text;
  assert.ok(final.includes(`<img src=x onerror=`), final);
  assert.equal(final, await committedText(url, stream));
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  assert.equal(await page.locator("#messages img, #messages script").count(), 0);
  assert.deepEqual(errors, []);
});
