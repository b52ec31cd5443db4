import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { Chunk, Snapshot } from '../src/index.js';

const NO_BIN = 'WEIR_BIN must name a weir binary (cd /work/main && go build -o /tmp/weir-js ./cmd/weir)';

// Without a server binary the suites against one cannot run: say so as a
// failing test of each file, not as suites cancelled.
if (!process.env.WEIR_BIN) {
  test('$WEIR_BIN names a weir binary', () => {
    throw new Error(NO_BIN);
  });
}

/** A real weir server for the tests: $WEIR_BIN on a store. */
export interface WeirServer {
  url: string;
  store: string;
  stop(): Promise<void>;
}

/** The stores the suite runs on: SQLite, and PostgreSQL when $WEIR_TEST_POSTGRES names one. */
export function stores(): { name: string; store: () => string }[] {
  const out = [{ name: 'sqlite', store: () => '' }];
  const pg = process.env.WEIR_TEST_POSTGRES;
  if (pg) out.push({ name: 'postgres', store: () => pg });
  return out;
}

/** Starts weir server on a free port; fails loudly without $WEIR_BIN. */
export async function startWeir(store = '', extra: string[] = []): Promise<WeirServer> {
  const bin = process.env.WEIR_BIN;
  if (!bin) throw new Error(NO_BIN);
  const dir = mkdtempSync(join(tmpdir(), 'weir-client-'));
  const st = store || `sqlite:${join(dir, 'weir.db')}`;
  const proc: ChildProcess = spawn(bin, ['server', '--addr', '127.0.0.1:0', '--store', st, '--long-poll-timeout', '2s', ...extra], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
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
    proc.stderr!.on('data', onData);
    proc.on('exit', (code) => {
      clearTimeout(t);
      reject(new Error(`weir server exited (${code}):\n${out}`));
    });
  });
  const exited = new Promise<void>((r) => proc.on('exit', () => r()));
  return {
    url,
    store: st,
    async stop() {
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(t);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A path no other test (nor run of the suite on a shared database) uses. */
export function uniquePath(name = 's'): string {
  return `clienttest/${randomBytes(6).toString('hex')}/${name}`;
}

/** Waits for cond, polling every 10 ms up to ms, failing with what it waited for. */
export async function until<T>(what: string, cond: () => Promise<T | undefined | false> | T | undefined | false, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > end) throw new Error(`waited ${ms / 1000}s for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** p, or a failure naming what did not happen within ms. */
export function within<T>(p: Promise<T>, what: string, ms = 10_000): Promise<T> {
  let t: ReturnType<typeof setTimeout>;
  return Promise.race([
    p.finally(() => clearTimeout(t)),
    new Promise<never>((_, reject) => {
      t = setTimeout(() => reject(new Error(`waited ${ms / 1000}s for ${what}`)), ms);
    }),
  ]);
}

const dec = new TextDecoder();

/** A chunk's data as text (a string, or UTF-8 bytes). */
export function text(c: Chunk): string {
  return typeof c.data === 'string' ? c.data : c.data instanceof Uint8Array ? dec.decode(c.data) : JSON.stringify(c.data);
}

/** The snapshot's chunks as texts. */
export function texts(s: Snapshot): string[] {
  return s.chunks.map(text);
}

/**
 * A TCP proxy between a client and weir server that cuts connections on
 * demand: all at once (cut), after some more bytes towards the client
 * (cutAfter), at the next reply (dropNextReply), or refuses them (down).
 */
export class Proxy {
  readonly url: string;
  private readonly conns = new Set<{ client: net.Socket; upstream: net.Socket }>();
  private refuse = false;
  private budget: number | undefined;
  private dropReplies = 0;
  /** Connections accepted (and not refused). */
  connections = 0;
  /** Connections cut by the proxy. */
  cuts = 0;

  private constructor(
    private readonly server: net.Server,
    port: number,
  ) {
    this.url = `http://127.0.0.1:${port}`;
  }

  static async start(target: string): Promise<Proxy> {
    const t = new URL(target);
    let self: Proxy | undefined;
    const server = net.createServer((client) => self!.accept(client, t.hostname, Number(t.port)));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    self = new Proxy(server, (server.address() as net.AddressInfo).port);
    return self;
  }

  private accept(client: net.Socket, host: string, port: number): void {
    client.on('error', () => undefined);
    if (this.refuse) {
      client.destroy();
      return;
    }
    this.connections++;
    const upstream = net.connect(port, host);
    upstream.on('error', () => undefined);
    const c = { client, upstream };
    this.conns.add(c);
    const end = () => {
      client.destroy();
      upstream.destroy();
      this.conns.delete(c);
    };
    client.on('close', end);
    upstream.on('close', end);
    client.on('data', (d: Buffer) => upstream.write(d));
    upstream.on('data', (d: Buffer) => {
      if (this.dropReplies > 0) {
        this.dropReplies--;
        this.cuts++;
        end();
        return;
      }
      if (this.budget !== undefined) {
        if (d.length >= this.budget) {
          client.write(d.subarray(0, this.budget));
          this.budget = undefined;
          this.cuts++;
          client.end(); // what was let through arrives, then the connection is gone
          upstream.destroy();
          setImmediate(end);
          return;
        }
        this.budget -= d.length;
      }
      client.write(d);
    });
  }

  /** Cuts every connection now. */
  cut(): void {
    for (const c of this.conns) {
      this.cuts++;
      c.client.destroy();
      c.upstream.destroy();
    }
  }

  /** Lets n more bytes through towards the client, then cuts the connection that carries them. */
  cutAfter(n: number): void {
    this.budget = n;
  }

  /** Cuts the connection of the next reply before a byte of it goes through: the server did the work, the client never hears. */
  dropNextReply(): void {
    this.dropReplies++;
  }

  /** Cuts every connection and refuses new ones until up(). */
  down(): void {
    this.refuse = true;
    this.cut();
  }

  up(): void {
    this.refuse = false;
  }

  async close(): Promise<void> {
    this.down();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}
