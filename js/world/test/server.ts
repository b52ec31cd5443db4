import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A real weir server for the tests: $WEIR_BIN on a fresh SQLite file. */
export interface WeirServer {
  url: string;
  secret: string;
  stop(): Promise<void>;
  kill(): void;
}

export const SECRET = 'js-world-tests-secret-0123456789';

/** Starts weir server; fails loudly without $WEIR_BIN. */
export async function startWeir(extra: string[] = [], store?: string): Promise<WeirServer> {
  const bin = process.env.WEIR_BIN;
  if (!bin) throw new Error('WEIR_BIN must name a weir binary (go build -o /tmp/weir ./cmd/weir)');
  const dir = mkdtempSync(join(tmpdir(), 'weir-js-'));
  const proc: ChildProcess = spawn(
    bin,
    ['server', '--addr', '127.0.0.1:0', '--store', store ?? `sqlite:${join(dir, 'weir.db')}`, '--world-secret', SECRET, ...extra],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  const url = await new Promise<string>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`weir server did not start within 15s:\n${out}`)), 15_000);
    const onData = (b: Buffer) => {
      out += b.toString();
      const m = /listening on (http:\/\/[0-9.:]+)/.exec(out);
      if (m) {
        clearTimeout(t);
        resolve(m[1]!);
      }
    };
    proc.stdout!.on('data', onData);
    proc.stderr!.on('data', (b: Buffer) => (out += b.toString()));
    proc.on('exit', (code) => {
      clearTimeout(t);
      reject(new Error(`weir server exited (${code}):\n${out}`));
    });
  });
  const exited = new Promise<void>((r) => proc.on('exit', () => r()));
  return {
    url,
    secret: SECRET,
    async stop() {
      proc.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
      rmSync(dir, { recursive: true, force: true });
    },
    kill() {
      proc.kill('SIGKILL');
    },
  };
}

/** Waits for cond, up to 15 s, failing with what it waited for. */
export async function until<T>(what: string, cond: () => Promise<T | undefined> | T | undefined, ms = 15_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > end) throw new Error(`waited ${ms / 1000}s for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
