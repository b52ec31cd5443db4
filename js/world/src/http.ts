import {
  EntityConflictError,
  HookNotFoundError,
  RunExpiredError,
  RunNotSupportedError,
  TooEarlyError,
  WorkflowRunNotFoundError,
  WorkflowWorldError,
} from '@workflow/errors';
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
}

/** The result of a call: the response, and how many tries it took. */
export interface Reply {
  res: Response;
  tries: number;
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
    let res: Response | undefined;
    let netErr: unknown;
    try {
      res = await cfg.fetch(url, { method: call.method, headers, body: body as RequestInit['body'], signal: call.signal ?? null });
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
    if (res) await res.arrayBuffer().catch(() => undefined);
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
export async function mapError(res: Response, url: string, subject = ''): Promise<Error> {
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
