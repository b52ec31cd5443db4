// The HTTP layer over fetch: one place that adds the token, bounds every
// request with a timeout, retries what may be sent again and turns error
// replies into WeirError classes. fetch only, so it runs in browsers, Node
// >= 20, Deno, Bun and edge runtimes alike.

import { WeirConnectionError, WeirError, errorFromReply, pathOf } from './errors.js';

/** Where `weir server` listens by default. */
export const DEFAULT_URL = 'http://127.0.0.1:4437';

/** The fetch this package calls: the global one, or the caller's. */
export type Fetch = typeof globalThis.fetch;

/** How to reach one weir server. */
export interface TransportOptions {
  /** The server's base URL. Default $WEIR_URL where there is a process environment, else http://127.0.0.1:4437. */
  baseUrl?: string;
  /** The bearer token (weir server --token). Default $WEIR_TOKEN where there is a process environment. */
  token?: string;
  /** A fetch to use instead of the global one (a proxy agent, a test double, a framework's patched fetch). */
  fetch?: Fetch;
  /** How long one try of a request may take, reply body included. Default 30 s. */
  timeoutMs?: number;
  /** How long a request that may be sent again keeps retrying network failures and retryable replies, in all. Default 30 s. */
  retryForMs?: number;
}

/** One request. */
export interface Request {
  method: 'GET' | 'HEAD' | 'POST' | 'PUT' | 'DELETE';
  /** The path from the server's root (`/v1/...`), already escaped. */
  path: string;
  query?: Record<string, string | number | undefined | null>;
  headers?: Record<string, string>;
  body?: string | ArrayBuffer;
  /**
   * Sending it again is harmless (a read, or a write weir de-duplicates):
   * network failures and retryable replies are retried. Anything else is
   * sent once, since a lost reply may hide a request that landed.
   */
  idempotent: boolean;
  /** This request's timeout instead of the transport's (a long wait). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** A reply read whole. */
export interface Reply {
  status: number;
  headers: Headers;
  body: Uint8Array;
  text(): string;
  json<T>(): T;
}

/** Reads an environment variable where there is one (Node, Bun, Deno with --allow-env); undefined in browsers. */
export function env(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  try {
    return p?.env?.[name] || undefined;
  } catch {
    return undefined;
  }
}

/** Resolves when ms passed, or rejects when signal aborts, so no wait outlives a cancel. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(abortReason(signal));
      return;
    }
    const onAbort = () => {
      clearTimeout(t);
      reject(abortReason(signal!));
    };
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** The reason a signal aborted, as an Error. */
export function abortReason(signal: AbortSignal): Error {
  const r: unknown = signal.reason;
  if (r instanceof Error) return r;
  const e = new Error(r === undefined ? 'aborted' : String(r));
  e.name = 'AbortError';
  return e;
}

/**
 * A controller that aborts when the parent signal does, or when its timer
 * (reset with touch) runs out: the bound on every wait. The timer's abort
 * reason is a WeirConnectionError saying what was waited for.
 */
export class Deadline {
  readonly controller = new AbortController();
  private timer: ReturnType<typeof setTimeout> | undefined;
  private readonly onParent = () => this.controller.abort(abortReason(this.parent!));

  constructor(
    private readonly ms: number,
    private readonly what: () => string,
    private readonly parent?: AbortSignal,
  ) {
    if (parent?.aborted) this.controller.abort(abortReason(parent));
    else parent?.addEventListener('abort', this.onParent, { once: true });
    this.touch();
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Starts the timer anew: something arrived. */
  touch(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    if (this.controller.signal.aborted) return;
    this.timer = setTimeout(() => this.controller.abort(new WeirConnectionError(this.what())), this.ms);
  }

  /** Stops the timer and lets go of the parent. */
  done(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.parent?.removeEventListener('abort', this.onParent);
  }
}

/** The fetch of opts, or the global one called as a plain function (some browsers refuse fetch detached from window). */
export function fetchOf(f: Fetch | undefined): Fetch {
  if (f) return f;
  if (typeof globalThis.fetch !== 'function') throw new TypeError('@weirhq/client: no global fetch: pass options.fetch');
  return (input, init) => globalThis.fetch(input, init);
}

/** Wraps what fetch threw into a WeirConnectionError, unless it is the caller's own abort. */
export function networkError(err: unknown, method: string, url: string, signal: AbortSignal): Error {
  const reason: unknown = signal.aborted ? signal.reason : undefined;
  if (reason instanceof WeirError) return reason; // our timeout
  if (signal.aborted) return abortReason(signal);
  if (err instanceof WeirError) return err;
  const cause = (err as { cause?: { message?: unknown } } | undefined)?.cause?.message;
  const msg = err instanceof Error ? err.message + (typeof cause === 'string' ? `: ${cause}` : '') : String(err);
  return new WeirConnectionError(`${method} ${pathOf(url)}: ${msg}`, { method, url, cause: err });
}

const utf8 = new TextDecoder();

/**
 * Transport sends requests to one weir server. Requests that may be sent
 * again are retried on network failures and retryable replies, backing off
 * from 50 ms to 2 s with jitter (a Retry-After is a floor), for up to
 * retryForMs in all.
 */
export class Transport {
  readonly baseUrl: string;
  readonly token: string | undefined;
  readonly timeoutMs: number;
  readonly retryForMs: number;
  readonly fetch: Fetch;
  /** Requests sent again after a failure (for tests and metrics). */
  retries = 0;

  constructor(opts: TransportOptions = {}) {
    const base = opts.baseUrl ?? env('WEIR_URL') ?? DEFAULT_URL;
    let u: URL;
    try {
      u = new URL(base);
    } catch {
      throw new TypeError(`@weirhq/client: base URL ${JSON.stringify(base)}: want http(s)://host[:port][/prefix]`);
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new TypeError(`@weirhq/client: base URL ${base}: want http or https`);
    if (u.search || u.hash) throw new TypeError(`@weirhq/client: base URL ${base}: no query or fragment, please`);
    this.baseUrl = base.replace(/\/+$/, '');
    this.token = opts.token ?? env('WEIR_TOKEN');
    this.timeoutMs = positive(opts.timeoutMs ?? 30_000, 'timeoutMs');
    this.retryForMs = Math.max(0, opts.retryForMs ?? 30_000);
    this.fetch = fetchOf(opts.fetch);
  }

  /** The full URL of a path and query. */
  url(path: string, query?: Request['query']): string {
    let url = this.baseUrl + path;
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined && v !== null) q.set(k, String(v));
    const qs = q.toString();
    if (qs) url += '?' + qs;
    return url;
  }

  /** The headers every request carries, and extra. */
  headers(extra?: Record<string, string>): Record<string, string> {
    const h: Record<string, string> = { ...extra };
    if (this.token) h['authorization'] = `Bearer ${this.token}`;
    return h;
  }

  /** Sends req; returns its 2xx (or 304) reply read whole, or throws its WeirError. */
  async request(req: Request): Promise<Reply> {
    const url = this.url(req.path, req.query);
    const start = Date.now();
    let delay = 50;
    for (let tries = 1; ; tries++) {
      try {
        return await this.once(req, url);
      } catch (err) {
        if (!(err instanceof WeirError) || !err.retryable || !req.idempotent || req.signal?.aborted) throw err;
        const left = start + this.retryForMs - Date.now();
        if (left <= 0) {
          if (tries > 1) err.message += ` (tried ${tries} times in ${((Date.now() - start) / 1000).toFixed(1)} s)`;
          throw err;
        }
        let wait = delay * (0.5 + Math.random() / 2);
        const after = Number(err.headers['retry-after']);
        if (Number.isFinite(after) && after > 0) wait = Math.max(wait, after * 1000);
        await sleep(Math.min(wait, left), req.signal);
        delay = Math.min(delay * 2, 2000);
        this.retries++;
      }
    }
  }

  private async once(req: Request, url: string): Promise<Reply> {
    const ms = req.timeoutMs ?? this.timeoutMs;
    const dl = new Deadline(ms, () => `${req.method} ${pathOf(url)}: no reply within ${ms} ms`, req.signal);
    try {
      let res: Response;
      let body: Uint8Array;
      try {
        const init: RequestInit = { method: req.method, headers: this.headers(req.headers), signal: dl.signal };
        if (req.body !== undefined) init.body = req.body;
        res = await this.fetch(url, init);
        body = new Uint8Array(await res.arrayBuffer());
      } catch (err) {
        throw networkError(err, req.method, url, dl.signal);
      }
      const reply: Reply = {
        status: res.status,
        headers: res.headers,
        body,
        text: () => utf8.decode(body),
        json: <T>() => JSON.parse(utf8.decode(body)) as T,
      };
      if ((res.status >= 200 && res.status < 300) || res.status === 304) return reply;
      throw errorFromReply(res.status, res.headers, reply.text(), req.method, url);
    } finally {
      dl.done();
    }
  }
}

/** Checks a duration option. */
export function positive(v: number, what: string): number {
  if (!(typeof v === 'number' && v > 0 && Number.isFinite(v))) throw new RangeError(`@weirhq/client: ${what}: want a number > 0, got ${String(v)}`);
  return v;
}

/** `/v1/stream/` and a stream's path, escaped segment by segment. */
export function streamPath(path: string): string {
  if (!path || path.startsWith('/')) throw new TypeError(`@weirhq/client: stream path ${JSON.stringify(path)}: want segments like "chat/42" (no leading /)`);
  return '/v1/stream/' + path.split('/').map((s) => seg(s, 'stream path segment')).join('/');
}

/** One path segment, escaped; dots too, which a router would take for a directory. */
export function seg(s: string, what = 'path segment'): string {
  if (!s) throw new TypeError(`@weirhq/client: empty ${what}`);
  return s === '.' || s === '..' ? s.replace(/\./g, '%2E') : encodeURIComponent(s);
}
