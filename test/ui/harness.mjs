// What the UI tests share: a weir server process on a fresh store, headless
// Chromium, the API with the test's token, and waits with deadlines.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import net from "node:net";
import { chromium } from "playwright-core";

export const bin = process.env.WEIR_BIN || "weir";
export const chromePath = process.env.CHROMIUM || "/usr/bin/chromium";
export const shots = process.env.SCREENSHOT_DIR || new URL(".", import.meta.url).pathname;
export const token = process.env.WEIR_UI_TOKEN || "";
export const tag = token ? "-token" : "";

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
    s.on("error", reject);
  });
}

// waitHealthy waits for the server at url to answer /healthz.
export async function waitHealthy(url, ms = 15000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try { if ((await fetch(url + "/healthz")).ok) return; } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("weir server did not become healthy at " + url);
}

// startServer runs `weir server` on WEIR_STORE (default: a fresh SQLite
// file; sqlite: true forces one) with the test's token and extra args,
// stopped when the test ends. It returns the server's URL and `call`, the
// API with the token.
export async function startServer(t, { args = [], sqlite = false } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "weir-ui-"));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const store = !sqlite && process.env.WEIR_STORE ? process.env.WEIR_STORE : `sqlite:${join(dir, "weir.db")}`;
  const all = ["server", "--addr", `127.0.0.1:${port}`, "--store", store, ...args];
  if (token) all.push("--token", token);
  const server = spawn(bin, all, { stdio: ["ignore", "inherit", "inherit"] });
  t.after(() => { server.kill("SIGTERM"); rmSync(dir, { recursive: true, force: true }); });
  await waitHealthy(url);
  const auth = token ? { Authorization: `Bearer ${token}` } : {};
  const call = async (method, path, body) => {
    const res = await fetch(url + path, {
      method, headers: { ...auth, ...(body === undefined ? {} : { "Content-Type": "application/json" }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
    return res.json();
  };
  return { url, port, call };
}

// openPage launches Chromium and opens the UI with the test's token typed
// in, as a person would; page errors are collected in errors.
export async function openPage(t, url) {
  const browser = await chromium.launch({
    executablePath: chromePath,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  t.after(() => browser.close());
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(url + "/ui/");
  if (token) await page.locator("#token").fill(token);
  return { page, errors };
}

// until polls f until it returns a truthy value, or fails with what.
export async function until(what, f, ms = 20_000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try { last = await f(); if (last) return last; } catch (e) { last = e; }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`waited ${ms} ms for ${what}; last: ${last}`);
}

export const unique = (what) => `${what}-${process.pid}-${Date.now().toString(36)}`;
