// The processes the tests run: weir servers (the Go binary $WEIR_BIN) and
// the test app (app/server.mjs), each on a free loopback port, each waited
// for with a deadline, each stopped when the test file ends.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

export const appDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const SECRET = 'vercel-tests-secret-0123456789abcdef';
export const PG_BASE = process.env.WEIR_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable';

const live = new Set();
process.on('exit', () => {
  for (const p of live) p.kill('SIGKILL');
});

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

/** Spawns cmd and resolves once a line of its output matches re. */
function spawnUntil(cmd, args, { env, cwd, re, what, ms = 30_000 }) {
  const proc = spawn(cmd, args, { env: { ...process.env, ...env }, cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(proc);
  let out = '';
  const ready = new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`${what} did not start within ${ms / 1000}s:\n${out}`)), ms);
    const check = (b) => {
      out += b.toString();
      const m = re.exec(out);
      if (m) {
        clearTimeout(t);
        resolve(m);
      }
    };
    proc.stdout.on('data', check);
    proc.stderr.on('data', (b) => (out += b.toString()));
    proc.on('exit', (code, sig) => {
      clearTimeout(t);
      reject(new Error(`${what} exited (${code ?? sig}):\n${out}`));
    });
  });
  const exited = new Promise((r) => proc.on('exit', () => (live.delete(proc), r())));
  return { proc, ready, exited, output: () => out };
}

async function stopProc(p, exited) {
  if (p.exitCode !== null || p.signalCode !== null) return;
  p.kill('SIGTERM');
  const t = setTimeout(() => p.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(t);
}

/** A fresh store: a SQLite file, or a new schema on the test database. */
export function newStore(kind) {
  if (kind === 'sqlite') {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'weir-vercel-'));
    return { spec: `sqlite:${path.join(dir, 'weir.db')}`, drop: async () => fs.rmSync(dir, { recursive: true, force: true }) };
  }
  const schema = 'weir_vercel_' + randomBytes(6).toString('hex');
  return {
    spec: `${PG_BASE}&schema=${schema}`,
    drop: async () => {
      const c = new pg.Client({ connectionString: PG_BASE.replace(/\?.*$/, '') });
      await c.connect();
      await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await c.end();
    },
  };
}

/** Starts weir server on store (newStore's spec), at port if given. */
export async function startWeir(store, { port, args = [] } = {}) {
  const bin = process.env.WEIR_BIN;
  if (!bin) throw new Error('WEIR_BIN must name a weir binary (go build -o /tmp/weir ./cmd/weir)');
  const addr = `127.0.0.1:${port ?? 0}`;
  const p = spawnUntil(bin, ['server', '--addr', addr, '--store', store, '--world-secret', SECRET, ...args], {
    re: /listening on (http:\/\/[0-9.:]+)/,
    what: 'weir server',
  });
  const [, url] = await p.ready;
  return {
    url,
    port: Number(new URL(url).port),
    secret: SECRET,
    pid: p.proc.pid,
    output: p.output,
    kill: () => p.proc.kill('SIGKILL'),
    exited: p.exited,
    stop: () => stopProc(p.proc, p.exited),
  };
}

/** Starts the test app with the World env names. */
export async function startApp(env, { port, nodeArgs = [] } = {}) {
  const p = spawnUntil(process.execPath, [...nodeArgs, path.join(appDir, 'app/server.mjs')], {
    env: { PORT: String(port ?? 0), ...env },
    cwd: appDir,
    re: /"state":"listening","info":\{"port":(\d+)\}/,
    what: 'the app',
  });
  const [, portStr] = await p.ready;
  const url = `http://127.0.0.1:${portStr}`;
  return { url, port: Number(portStr), pid: p.proc.pid, output: p.output, kill: () => p.proc.kill('SIGKILL'), exited: p.exited, stop: () => stopProc(p.proc, p.exited) };
}

/** The env that points an app at weir. */
export function weirEnv(weir, extra = {}) {
  return { WORKFLOW_TARGET_WORLD: '@weirhq/world', WEIR_URL: weir.url, WEIR_WORLD_SECRET: weir.secret, ...extra };
}

/** Waits for cond (a value, not undefined/false), failing after ms with what. */
export async function until(what, cond, ms = 60_000) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    try {
      const v = await cond();
      if (v !== undefined && v !== false && v !== null) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > end) throw new Error(`waited ${ms / 1000}s for ${what}${last ? `: ${last}` : ''}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const untag = (_k, v) =>
  v && typeof v === 'object' && v.__type === 'Uint8Array' && typeof v.data === 'string' ? new Uint8Array(Buffer.from(v.data, 'base64')) : v;

/** The app's API, as the tests drive it. */
export function client(app) {
  const j = async (res) => {
    const text = await res.text();
    if (!res.ok) throw new Error(`${res.status} ${text}`);
    return JSON.parse(text, untag);
  };
  return {
    invoke: (file, workflow, args = []) =>
      fetch(`${app.url}/invoke`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ file, workflow, args }) }).then(j),
    run: (id) => fetch(`${app.url}/runs/${id}`).then(j),
    events: (id) => fetch(`${app.url}/runs/${id}/events`).then(j),
    cancel: (id) => fetch(`${app.url}/runs/${id}/cancel`, { method: 'POST' }).then(j),
    hook: (token) => fetch(`${app.url}/hooks/${token}`),
    resume: (token, payload) =>
      fetch(`${app.url}/hooks/${token}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(payload) }).then(j),
    readable: async (id) => {
      const res = await fetch(`${app.url}/runs/${id}/readable`);
      if (!res.ok) throw new Error(`readable: ${res.status}`);
      return new Uint8Array(await res.arrayBuffer());
    },
    async waitStatus(id, status, ms = 60_000) {
      return until(`run ${id} to be ${status}`, async () => {
        const r = await this.run(id);
        if (r.status === status) return r;
        if (['completed', 'failed', 'cancelled'].includes(r.status) && r.status !== status) {
          throw new Error(`run ${id} ended ${r.status}, want ${status}: ${JSON.stringify(r.error)}`);
        }
        return undefined;
      }, ms);
    },
  };
}
