// Writer → rendered-in-the-page latency, in headless Chromium (a benchmark,
// not a test: it prints figures and asserts nothing).
//
// A Node writer (@weirhq/client's StreamWriter) writes LLM-like "steps" to a
// JSON stream of a real `weir server`: each step is a writer that streams
// TOKENS chunks at a token's pace and commits; every fourth step's first
// attempt fails half way and its retry writes other tokens (so the live
// view has rewinds). Each chunk carries the time it was written
// (performance.timeOrigin + performance.now(), comparable across processes
// on one machine). The page follows the stream twice at once, with
// @weirhq/client's follow served as ES modules (js/client/dist/esm): the
// live view with rewinds applied, and the committed view. Each follower
// renders what it shows into the DOM (text nodes added and, on a rewind,
// removed) and, for every chunk it appends, records now − written, once in
// the DOM (synchronously after the change) and once painted (the next
// animation frame).
//
//   WEIR_BIN=/tmp/weir node test/ui/render-bench.mjs [--steps 40] [--tokens 40] [--pace-ms 15] [--store sqlite|postgres]
//
// Needs js/client built (cd js/client && npm run build) and Debian's
// chromium at /usr/bin/chromium (or CHROMIUM=...).
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import { mkdtempSync, readFileSync, rmSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, normalize } from "node:path";
import net from "node:net";
import { chromium } from "playwright-core";

const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const STEPS = Number(arg("steps", 40));
const TOKENS = Number(arg("tokens", 40));
const PACE = Number(arg("pace-ms", 15));
const STORE = arg("store", "sqlite");
const bin = process.env.WEIR_BIN || "weir";
const chromePath = process.env.CHROMIUM || "/usr/bin/chromium";
const clientDist = new URL("../../js/client/dist/esm/", import.meta.url).pathname;
if (!existsSync(join(clientDist, "index.js"))) throw new Error("build js/client first: cd js/client && npm run build");
const { StreamWriter } = await import(join(clientDist, "index.js"));

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
    s.on("error", reject);
  });
}

const page = `<!doctype html><meta charset="utf-8"><title>render bench</title>
<pre id="live"></pre><pre id="committed"></pre>
<script type="module">
import { follow } from "/client/index.js";
const now = () => performance.timeOrigin + performance.now();
window.lat = { live: { dom: [], frame: [] }, committed: { dom: [], frame: [] } };
window.done = {};
window.start = (url) => {
  for (const view of ["live", "committed"]) {
    const el = document.getElementById(view);
    const nodes = new Map(); // offset -> text node
    const f = follow({ url, view, onEvent(ev) {
      if (ev.type === "append") {
        const ts = [];
        for (const c of ev.chunks) {
          const n = document.createTextNode(c.data.text);
          el.appendChild(n);
          nodes.set(c.offset, n);
          ts.push(c.data.t);
        }
        const t = now();
        for (const w of ts) window.lat[view].dom.push(t - w);
        requestAnimationFrame(() => { const t2 = now(); for (const w of ts) window.lat[view].frame.push(t2 - w); });
      } else if (ev.type === "rewind") {
        for (const c of ev.removed) { nodes.get(c.offset)?.remove(); nodes.delete(c.offset); }
      }
    } });
    f.done.then(() => { window.done[view] = true; }, (e) => { window.done[view] = "error: " + e.message; });
  }
};
</script>`;

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};
const fmt = (xs) => `p50 ${pct(xs, 50).toFixed(1)} ms  p99 ${pct(xs, 99).toFixed(1)} ms  max ${Math.max(...xs).toFixed(1)} ms  (n=${xs.length})`;

const dir = mkdtempSync(join(tmpdir(), "weir-render-"));
const pagePort = await freePort();
const weirPort = await freePort();
const origin = `http://127.0.0.1:${pagePort}`;
const weirURL = `http://127.0.0.1:${weirPort}`;
const storeArg = STORE === "postgres"
  ? (process.env.WEIR_TEST_DATABASE_URL || "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
  : `sqlite:${join(dir, "weir.db")}`;
const weir = spawn(bin, ["server", "--addr", `127.0.0.1:${weirPort}`, "--store", storeArg, "--cors-origin", origin],
  { stdio: ["ignore", "ignore", "inherit"] });
const http = createServer((req, res) => {
  if (req.url === "/") { res.setHeader("content-type", "text/html"); res.end(page); return; }
  if (req.url.startsWith("/client/")) {
    const file = normalize(join(clientDist, req.url.slice("/client/".length)));
    if (file.startsWith(clientDist) && existsSync(file)) {
      res.setHeader("content-type", "text/javascript");
      res.end(readFileSync(file));
      return;
    }
  }
  res.statusCode = 404;
  res.end();
}).listen(pagePort, "127.0.0.1");
const browser = await chromium.launch({ executablePath: chromePath, args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"] });
try {
  for (let i = 0; i < 200; i++) {
    try { if ((await fetch(weirURL + "/healthz")).ok) break; } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 50));
  }
  const path = `bench/render-${Date.now()}`;
  const tab = await browser.newPage();
  await tab.goto(origin + "/");
  // The stream exists before the page follows it.
  await new StreamWriter({ baseUrl: weirURL, path, writer: "setup", attempt: 1, contentType: "application/json" }).commit();
  await tab.evaluate((url) => window.start(url), `${weirURL}/v1/stream/${path}`);
  const now = () => performance.timeOrigin + performance.now();
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const token = (s, i, a) => ({ text: ` s${s}t${i}a${a}`, t: now() });
  for (let s = 0; s < STEPS; s++) {
    const failing = s % 4 === 3;
    let w = new StreamWriter({ baseUrl: weirURL, path, writer: `step/${s}`, attempt: 1, contentType: "application/json" });
    for (let i = 0; i < (failing ? TOKENS / 2 : TOKENS); i++) {
      await w.writeJSON(token(s, i, 1));
      await sleep(PACE);
    }
    if (failing) {
      // The attempt dies; its retry says other things (a sampled model).
      w = new StreamWriter({ baseUrl: weirURL, path, writer: `step/${s}`, attempt: 2, contentType: "application/json" });
      for (let i = 0; i < TOKENS; i++) {
        await w.writeJSON(token(s, i, 2));
        await sleep(PACE);
      }
    }
    await w.commit();
  }
  const closer = await fetch(`${weirURL}/v1/stream/${path}`, { method: "POST", headers: { "Stream-Closed": "true" } });
  if (!closer.ok) throw new Error(`close: ${closer.status}`);
  await tab.waitForFunction(() => window.done.live && window.done.committed, null, { timeout: 60_000 });
  const { lat, done } = await tab.evaluate(() => ({ lat: window.lat, done: window.done }));
  if (done.live !== true || done.committed !== true) throw new Error(`followers: ${JSON.stringify(done)}`);
  console.log(`render latency, weir server on ${STORE}, ${STEPS} steps × ${TOKENS} tokens every ${PACE} ms, every 4th step retried with other tokens`);
  console.log(`live view, rewinds applied   in the DOM: ${fmt(lat.live.dom)}`);
  console.log(`                             painted:    ${fmt(lat.live.frame)}`);
  console.log(`committed view               in the DOM: ${fmt(lat.committed.dom)}`);
  console.log(`                             painted:    ${fmt(lat.committed.frame)}`);
} finally {
  await browser.close();
  http.close();
  weir.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
}
