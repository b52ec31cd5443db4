import { createHmac } from "node:crypto";
// End-to-end test of weir's web UI: start `weir server` on a fresh SQLite
// file, open /ui/ in headless Chromium, start the demo workflow from the page,
// and check what a person would see: the run's retry in the timeline, its
// stream updating live with the aborted chunks struck through, and the
// committed view holding only the final attempt's output.
//
//   WEIR_BIN=/path/to/weir node --test ui.test.mjs
//
// WEIR_STORE picks the server's store (default: a fresh SQLite file);
// WEIR_UI_TOKEN runs the server with a bearer token, which the test types
// into the page as a user would.
//
// Needs Debian's chromium at /usr/bin/chromium (or CHROMIUM=...). Writes a
// screenshot to $SCREENSHOT_DIR (default: this folder).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { bin, chromePath, shots, token, freePort, waitHealthy } from "./harness.mjs";

test("the UI shows a retried step's stream live, with the abort struck through", { timeout: 90_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "weir-ui-"));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const storeArg = process.env.WEIR_STORE || `sqlite:${join(dir, "weir.db")}`;
  const args = ["server", "--addr", `127.0.0.1:${port}`, "--store", storeArg];
  if (token) args.push("--token", token);
  const server = spawn(bin, args, { stdio: ["ignore", "inherit", "inherit"] });
  t.after(() => { server.kill("SIGTERM"); rmSync(dir, { recursive: true, force: true }); });
  await waitHealthy(url);

  const browser = await chromium.launch({
    executablePath: chromePath,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  t.after(() => browser.close());
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const consoleErrors = [];
  page.on("pageerror", (e) => consoleErrors.push(e.message));

  await page.goto(url + "/ui/");
  if (token) {
    // Without the token the server refuses the start; with it, it goes on.
    await page.getByRole("button", { name: "Start demo run" }).click();
    await page.locator("#runs-error", { hasText: "401" }).waitFor({ timeout: 10_000 });
    await page.locator("#token").fill(token);
  }
  await page.getByRole("button", { name: "Start demo run" }).click();
  await page.waitForURL(/#\/runs\//);

  // The stream fills in live while the run is still running.
  const stream = page.locator('.stream[data-stream="tokens"]');
  await stream.locator(".chunk").first().waitFor({ timeout: 20_000 });
  const status = await page.locator("#run-status").textContent();
  assert.ok(["pending", "running", "completed"].includes(status), `status ${status}`);

  // The retry appears in the timeline, and the run completes.
  await page.locator('#timeline li[data-type="step_failed"]').first().waitFor({ timeout: 20_000 });
  await page.locator("#run-status.completed").waitFor({ timeout: 30_000 });
  const timeline = await page.locator("#timeline").innerText();
  assert.match(timeline, /attempt 1 failed/);
  assert.match(timeline, /retry in \d+ ms/);
  assert.match(timeline, /attempt 2 completed/);

  // Attempt 2 diverged: an abort marker, and attempt 1's suffix struck through.
  await stream.locator(".marker.abort").waitFor({ timeout: 10_000 });
  const voided = await stream.locator(".chunk.void").count();
  assert.ok(voided > 0, "no struck-through chunk");
  const strike = await stream.locator(".chunk.void").first().evaluate((e) => getComputedStyle(e).textDecorationLine);
  assert.equal(strike, "line-through");
  const tag = token ? "-token" : "";
  await page.screenshot({ path: join(shots, `ui-live${tag}.png`), fullPage: true });

  // The committed view holds exactly the final attempt's output.
  await page.getByLabel("committed").check();
  const committed = await stream.locator(".body").innerText();
  assert.equal(committed, "Exactly once means every chunk reaches the reader once, even when the retry writes something else.");
  assert.equal(await stream.locator(".chunk.void").count(), 0);
  await page.screenshot({ path: join(shots, `ui-committed${tag}.png`), fullPage: true });

  // The runs list shows the run as completed.
  await page.goto(url + "/ui/#/");
  await page.locator("table.runs .status.completed").first().waitFor({ timeout: 10_000 });
  assert.deepEqual(consoleErrors, []);
});

// A Vercel Workflow run on weir's World, made over the World API as the
// World package makes it: its timeline shows each step's attempts, the hook
// and the sleep, its stream the retried attempt's aborted chunk struck
// through; the runs list marks it world; a dead letter can be redelivered.
test("the UI shows a World run: attempts, hooks, sleeps, and its stream", { timeout: 90_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "weir-ui-world-"));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const storeArg = process.env.WEIR_STORE || `sqlite:${join(dir, "weir.db")}`;
  const args = ["server", "--addr", `127.0.0.1:${port}`, "--store", storeArg, "--world-secret", "ui-test-secret-0123456789",
    "--world-max-failures", "1"];
  if (token) args.push("--token", token);
  const server = spawn(bin, args, { stdio: ["ignore", "inherit", "inherit"] });
  t.after(() => { server.kill("SIGTERM"); rmSync(dir, { recursive: true, force: true }); });
  await waitHealthy(url);
  const auth = token ? { Authorization: `Bearer ${token}` } : {};
  const call = async (method, path, body, hdrs = {}) => {
    const res = await fetch(url + path, { method, headers: { ...auth, ...hdrs }, body });
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
    return res.headers.get("content-type")?.includes("json") ? res.json() : res.text();
  };
  const ev = (run, eventType, correlationId, eventData) =>
    call("POST", `/v1/world/runs/${run}/events`, JSON.stringify({ eventType, correlationId, eventData }), { "Content-Type": "application/json" });
  const frame = (...chunks) => Buffer.concat(chunks.flatMap((c) => { const b = Buffer.from(c); const n = Buffer.alloc(4); n.writeUInt32BE(b.length); return [n, b]; }));
  // World stream names are unique across runs, and a PostgreSQL database
  // outlives one test run: the name is this run's.
  const strm = `strm_ui_${port}_${Date.now()}`;
  const write = (run, step, attempt, seq, ...chunks) => call("POST", `/v1/world/runs/${run}/streams/${strm}`, frame(...chunks), {
    "Content-Type": "application/octet-stream", "Weir-Framing": "u32be", "Weir-Writer": `step/${step}`, "Weir-Attempt": String(attempt), "Weir-Seq": String(seq) });

  const { run } = await ev("-", "run_created", undefined, { deploymentId: "dpl_ui", workflowName: "workflow//./app//agent", input: [] });
  const id = run.runId;
  await ev(id, "run_started");
  await ev(id, "step_created", "step_1", { stepName: "step//./app//think" });
  await ev(id, "step_started", "step_1");
  await write(id, "step_1", 1, 0, "Hello ", "wrld");
  await ev(id, "step_retrying", "step_1", { error: "model timed out" });
  await ev(id, "step_started", "step_1");
  await write(id, "step_1", 2, 0, "Hello ", "world");
  await ev(id, "step_completed", "step_1", { result: 1 });
  await ev(id, "hook_created", "hook_1", { token: `ui-world-${strm}` });
  await ev(id, "hook_received", "hook_1", { payload: 1 });
  await ev(id, "wait_created", "wait_1", { resumeAt: new Date(Date.now() + 1000).toISOString() });
  await ev(id, "wait_completed", "wait_1");
  await ev(id, "run_completed", undefined, { output: 1 });
  // A message for an app that is not there: dead after one failure.
  // Its target signed with the World secret, as @weirhq/world signs its own.
  const target = "http://127.0.0.1:9";
  const targetSignature = "v1=" + createHmac("sha256", "ui-test-secret-0123456789").update("target." + target).digest("hex");
  await call("POST", "/v1/world/queue", JSON.stringify({ queueName: "__wkf_workflow_agent", payload: { runId: id }, target, targetSignature }),
    { "Content-Type": "application/json" });
  // A run that waits for an app weir cannot reach: its page says so, and why.
  const { run: waiting } = await ev("-", "run_created", undefined, { deploymentId: "dpl_ui", workflowName: "workflow//./app//agent", input: [] });
  await call("POST", "/v1/world/queue", JSON.stringify({ queueName: "__wkf_workflow_agent", payload: { runId: waiting.runId }, target, targetSignature }),
    { "Content-Type": "application/json" });

  const browser = await chromium.launch({
    executablePath: chromePath,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  t.after(() => browser.close());
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(url + "/ui/");
  if (token) await page.locator("#token").fill(token);
  const row = page.locator(`tr[data-run="${id}"]`);
  await row.waitFor({ timeout: 10_000 });
  assert.equal(await row.locator(".kind").textContent(), "world");
  // The dead letter, and its redelivery.
  const dead = page.locator("#dead-letters li").first();
  await dead.waitFor({ timeout: 20_000 });
  await dead.getByRole("button", { name: "Deliver again" }).click();

  await page.goto(`${url}/ui/#/runs/${encodeURIComponent(waiting.runId)}`);
  const why = page.locator("#run-waiting");
  await why.getByText("Waiting for the app").waitFor({ timeout: 20_000 });
  const whyText = await why.textContent();
  assert.ok(whyText.includes(target) && whyText.includes("connection refused") && whyText.includes("is the app running"), `the waiting run says: ${whyText}`);
  await page.screenshot({ path: join(shots, "ui-world-waiting.png"), fullPage: true });

  await page.goto(`${url}/ui/#/runs/${encodeURIComponent(id)}`);
  const tl = page.locator("#timeline");
  await tl.locator('li[data-type="run_completed"]').waitFor({ timeout: 10_000 });
  const text = await tl.textContent();
  for (const want of ["step “think” · attempt 1 started", "attempt 1 failed, will retry", "step “think” · attempt 2 started",
    "attempt 2 completed", "hook hook_1 created", "sleep ended", "run completed"]) {
    assert.ok(text.includes(want), `timeline lacks "${want}": ${text}`);
  }
  assert.ok(text.includes("model timed out"));
  const stream = page.locator(`.stream[data-stream="${strm}"]`);
  await stream.locator(".chunk.void").first().waitFor({ timeout: 10_000 });
  assert.equal(await stream.locator(".chunk.void").first().textContent(), "wrld");
  await page.getByLabel("committed").check();
  await page.waitForFunction((name) => document.querySelectorAll(`.stream[data-stream="${name}"] .chunk.void`).length === 0, strm);
  assert.equal((await stream.locator(".body").textContent()).trim(), "Hello world");
  await page.screenshot({ path: join(shots, "ui-world-run.png"), fullPage: true });
  assert.deepEqual(errors, []);
});

// A run that fans out and waits for a person (demo.approval): its parallel
// steps sit side by side in the Steps chart, the timeline shows the hook
// waiting, and a delivery to the hook lets the run finish.
test("parallel steps and a hook, as a person sees them", { timeout: 90_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "weir-ui-hook-"));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const storeArg = process.env.WEIR_STORE || `sqlite:${join(dir, "weir.db")}`;
  const args = ["server", "--addr", `127.0.0.1:${port}`, "--store", storeArg];
  if (token) args.push("--token", token);
  const server = spawn(bin, args, { stdio: ["ignore", "inherit", "inherit"] });
  t.after(() => { server.kill("SIGTERM"); rmSync(dir, { recursive: true, force: true }); });
  await waitHealthy(url);
  const browser = await chromium.launch({
    executablePath: chromePath,
    args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--disable-extensions",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  t.after(() => browser.close());
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const consoleErrors = [];
  page.on("pageerror", (e) => consoleErrors.push(e.message));
  // The run page asks for the log after what it has, not the whole log
  // at every refresh (red team, round fifteen).
  const eventReads = [];
  page.on("request", (r) => { if (/\/v1\/runs\/[^/]+\/events(\?|$)/.test(r.url())) eventReads.push(new URL(r.url()).search); });
  const auth = token ? { Authorization: `Bearer ${token}` } : {};
  // Hook tokens are unique among live hooks, and a PostgreSQL database
  // outlives one test run: the token is this run's.
  const hookToken = `ui-approval-${port}-${Date.now()}`;
  const res = await fetch(url + "/v1/runs", {
    method: "POST", headers: { "Content-Type": "application/json", ...auth },
    body: JSON.stringify({ workflow: "demo.approval", input: { token: hookToken } }),
  });
  assert.equal(res.status, 201);
  const run = await res.json();
  await page.goto(url + "/ui/");
  if (token) await page.locator("#token").fill(token);
  await page.goto(url + `/ui/#/runs/${run.id}`);
  await page.locator('#timeline li[data-type="hook_created"]', { hasText: hookToken }).waitFor({ timeout: 20_000 });
  await page.locator("#gantt .gantt-row").nth(1).waitFor({ timeout: 20_000 });
  // The two notices ran at once: their bars overlap on the time axis.
  const boxes = await page.locator("#gantt .bar.attempt").evaluateAll((bars) => bars.map((b) => b.getBoundingClientRect()).map((r) => [r.left, r.right]));
  assert.equal(boxes.length, 2);
  assert.ok(boxes[0][0] < boxes[1][1] && boxes[1][0] < boxes[0][1], `bars do not overlap: ${JSON.stringify(boxes)}`);
  const d = await fetch(url + `/v1/hooks/${hookToken}`, {
    method: "POST", headers: { "Content-Type": "application/json", "Idempotency-Key": "click", ...auth },
    body: JSON.stringify({ approved_by: "ann" }),
  });
  assert.equal(d.status, 200);
  await page.locator("#run-status.completed").waitFor({ timeout: 30_000 });
  await page.locator('#timeline li[data-type="hook_received"]').waitFor({ timeout: 10_000 });
  const stream = page.locator('.stream[data-stream="approval"]');
  await stream.locator(".chunk", { hasText: "approved_by" }).waitFor({ timeout: 10_000 });
  const tag = token ? "-token" : "";
  await page.screenshot({ path: join(shots, `ui-approval${tag}.png`), fullPage: true });
  assert.ok(eventReads.some((q) => /after=[1-9]/.test(q)), `the page read the log whole at every refresh: ${eventReads.slice(0, 5)}`);
  assert.deepEqual(consoleErrors, []);
});
