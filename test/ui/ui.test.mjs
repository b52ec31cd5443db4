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
import net from "node:net";
import { chromium } from "playwright-core";

const bin = process.env.WEIR_BIN || "weir";
const chromePath = process.env.CHROMIUM || "/usr/bin/chromium";
const shots = process.env.SCREENSHOT_DIR || new URL(".", import.meta.url).pathname;
const token = process.env.WEIR_UI_TOKEN || "";

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
    s.on("error", reject);
  });
}

async function waitHealthy(url, ms = 15000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try { if ((await fetch(url + "/healthz")).ok) return; } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("weir server did not become healthy at " + url);
}

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
