import {
  EntityConflictError,
  HookNotFoundError,
  RunExpiredError,
  RunNotSupportedError,
  TooEarlyError,
  WorkflowRunNotFoundError,
  WorkflowWorldError,
} from '@workflow/errors';
import http from 'node:http';
import https from 'node:https';
import type { Config } from './config';

/** A request to weir server. */
export interface Call {
  method: 'GET' | 'POST' | 'PUT';
  /** The path from /v1/ on, already escaped. */
  path: string;
  query?: Record<string, string | number | undefined | null>;
  /** A JSON body, already encoded. */
  json?: string;
  body?: Uint8Array;
  headers?: Record<string, string>;
  /**
   * Sending it again is harmless (a read, or a write weir de-duplicates):
   * network failures and retryable replies are retried.
   */
  idempotent: boolean;
  /** For the error a 404 maps to: the run id or hook token asked for. */
  subject?: string;
  signal?: AbortSignal;
  /** The response's body is read as it arrives (WeirResponse.stream). */
  streaming?: boolean;
}

/**
 * A response of weir server, read by node:http: a keep-alive agent and no
 * WHATWG streams cost the app's process a fraction of fetch's CPU per call
 * (the app is what bounds a World's throughput: it replays every run).
 */
export interface WeirResponse {
  status: number;
  ok: boolean;
  headers: { get(name: string): string | null };
  /** The body, as it arrives (a streaming call's). */
  stream: http.IncomingMessage;
  text(): Promise<string>;
  json<T = unknown>(): Promise<T>;
  arrayBuffer(): Promise<ArrayBuffer>;
}

/** The result of a call: the response, and how many tries it took. */
export interface Reply {
  res: WeirResponse;
  tries: number;
}

const agents = {
  'http:': new http.Agent({ keepAlive: true, maxSockets: 256 }),
  'https:': new https.Agent({ keepAlive: true, maxSockets: 256 }),
};

function request(
  url: URL,
  method: string,
  headers: Record<string, string>,
  body: string | Uint8Array | undefined,
  signal: AbortSignal | undefined,
  streaming: boolean,
): Promise<WeirResponse> {
  return new Promise((resolve, reject) => {
    const mod = url.protocol === 'https:' ? https : http;
    const agent = agents[url.protocol as 'http:' | 'https:'];
    if (!agent) {
      reject(new Error(`unsupported URL scheme ${url.protocol}`));
      return;
    }
    const h: Record<string, string | number> = { ...headers };
    if (body !== undefined) h['content-length'] = typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength;
    const req = mod.request(url, { method, headers: h, agent, ...(signal && { signal }) }, (msg) => {
      // A body cut by an abort or a lost connection errors here; readers
      // see it through their own iterator, never as an uncaught error.
      msg.on('error', () => undefined);
      const status = msg.statusCode ?? 0;
      const reply = (read: () => Promise<Buffer>): WeirResponse => ({
        status,
        ok: status >= 200 && status < 300,
        headers: {
          get: (name) => {
            const v = msg.headers[name.toLowerCase()];
            return v === undefined ? null : Array.isArray(v) ? v.join(', ') : v;
          },
        },
        stream: msg,
        text: async () => (await read()).toString('utf8'),
        json: async <T>() => JSON.parse((await read()).toString('utf8')) as T,
        arrayBuffer: async () => {
          const b = await read();
          return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) as ArrayBuffer;
        },
      });
      if (streaming && status >= 200 && status < 300) {
        resolve(reply(() => Promise.reject(new Error('a streamed response is read from its stream'))));
        return;
      }
      // Read whole, at once: a keep-alive socket is free again only once
      // its response was read, and most callers want no body.
      const parts: Buffer[] = [];
      msg.on('data', (c: Buffer) => parts.push(c));
      msg.on('end', () => {
        const all = Buffer.concat(parts);
        resolve(reply(async () => all));
      });
      msg.on('error', reject);
    });
    req.on('error', reject);
    if (body !== undefined) req.end(body);
    else req.end();
  });
}

/** Weir-Error codes a retry of the same request may cure. */
const RETRYABLE = new Set(['in_flight', 'store_closed', 'engine_closed', 'internal']);

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** How long retries of one idempotent call may go on. */
const RETRY_FOR_MS = 30_000;

/**
 * Sends call to weir server. A reply that is not 2xx becomes the
 * @workflow/errors class the runtime tests for (mapError); an idempotent
 * call is retried on network failures and retryable replies for up to
 * 30 s, backing off from 50 ms to 2 s.
 */
export async function send(cfg: Config, call: Call): Promise<Reply> {
  const url = new URL(cfg.url + '/v1/' + call.path);
  for (const [k, v] of Object.entries(call.query ?? {})) {
    if (v !== undefined && v !== null) url.searchParams.set(k, String(v));
  }
  const headers: Record<string, string> = { ...call.headers };
  if (cfg.token) headers.authorization = `Bearer ${cfg.token}`;
  let body: string | Uint8Array | undefined = call.json ?? call.body;
  if (call.json !== undefined) headers['content-type'] = 'application/json';
  const start = Date.now();
  let backoff = 50;
  for (let tries = 1; ; tries++) {
    let res: WeirResponse | undefined;
    let netErr: unknown;
    try {
      res = await request(url, call.method, headers, body, call.signal, call.streaming ?? false);
    } catch (err) {
      netErr = err;
    }
    if (res && res.ok) return { res, tries };
    const code = res?.headers.get('weir-error') ?? '';
    const again =
      call.idempotent &&
      !call.signal?.aborted &&
      Date.now() - start + backoff < RETRY_FOR_MS &&
      (netErr !== undefined || (res !== undefined && (RETRYABLE.has(code) || res.status === 502 || res.status === 503 || res.status === 504)));
    if (!again) {
      if (netErr !== undefined) {
        throw new WorkflowWorldError(`weir server at ${cfg.url} unreachable: ${String((netErr as Error)?.message ?? netErr)}`, {
          url: url.toString(),
          cause: netErr,
        });
      }
      throw await mapError(res!, url.toString(), call.subject);
    }
    await sleep(backoff);
    backoff = Math.min(backoff * 2, 2000);
    body = call.json ?? call.body;
  }
}

/** Sends call and decodes its JSON reply with decode. */
export async function sendJSON<T>(cfg: Config, call: Call, decode: (text: string) => T): Promise<T> {
  const { res } = await send(cfg, call);
  return decode(await res.text());
}

/**
 * Returns the error class the runtime tests for, for a reply of weir's
 * World API: 409 EntityConflictError, 410 RunExpiredError, 425
 * TooEarlyError (with Retry-After), 404 WorkflowRunNotFoundError or
 * HookNotFoundError, 422 RunNotSupportedError, any other WorkflowWorldError
 * with the status and weir's code.
 */
export async function mapError(res: WeirResponse, url: string, subject = ''): Promise<Error> {
  const code = res.headers.get('weir-error') ?? '';
  const msg = (await res.text().catch(() => '')).trim() || `HTTP ${res.status}`;
  switch (code) {
    case 'world_conflict':
      return new EntityConflictError(msg);
    case 'run_expired':
      return new RunExpiredError(msg);
    case 'too_early': {
      const ra = Number(res.headers.get('retry-after') ?? '1');
      return new TooEarlyError(msg, { retryAfter: Number.isFinite(ra) ? ra : 1 });
    }
    case 'run_not_found':
      return new WorkflowRunNotFoundError(subject || msg);
    case 'hook_not_found':
      return new HookNotFoundError(subject || msg);
    case 'run_not_supported': {
      const m = /spec (\d+)/.exec(msg);
      return new RunNotSupportedError(m ? Number(m[1]) : 0, 3);
    }
  }
  return new WorkflowWorldError(`weir: ${msg}`, { status: res.status, code, url });
}

/** Escapes one path segment. */
export const seg = (s: string) => encodeURIComponent(s);
