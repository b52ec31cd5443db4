// The client of one weir server over fetch: the runs API, hooks, messages,
// run events and the streams' writer and follower, bound to one base URL
// and token, so an app configures weir once.

import { TooLargeError, WeirError } from './errors.js';
import { Transport, seg, sleep, streamPath, type Request, type TransportOptions } from './http.js';
import { follow, runStreamUrl, type FollowOptions, type Follower } from './follow.js';
import { StreamWriter, type StreamWriterOptions } from './writer.js';

/** A run's status: pending (no worker yet), running, or one of the three ends. */
export type RunStatus = 'pending' | 'running' | 'completed' | 'failed' | 'cancelled';

/** A run, as the runs API shows it (docs/protocol.md, "Runs API"; the wire's field names). */
export interface Run {
  id: string;
  workflow: string;
  status: RunStatus;
  input?: unknown;
  /** Once completed. */
  output?: unknown;
  /** The error of a failed or cancelled run. */
  error?: string;
  created_at: string;
  updated_at: string;
  /** A running run parked until then (a durable sleep, a retry backoff). */
  wake_at?: string;
  cancel_requested?: boolean;
  /** "world" for a Vercel Workflow run. */
  kind?: string;
  /** The run that started this one as its child. */
  parent?: string;
}

/** What start returns: the run, and whether this call created it (false: a retry, or an existing id). */
export interface Started {
  run: Run;
  created: boolean;
}

/** One page of runs, newest first; pass next_cursor as before for the next. */
export interface RunPage {
  runs: Run[];
  next_cursor?: string;
}

/** One event of a run's log (not a DOM Event: hence the name). */
export interface LogEvent {
  /** Dense from 1: poll with after = the last one you got. */
  seq: number;
  /** run_started, step_started, step_completed, step_failed, sleep_scheduled, … */
  type: string;
  /** The durable operation's position; a step's stream writer is step/{op}. */
  op?: number;
  name?: string;
  attempt?: number;
  data?: unknown;
  error?: string;
  /** No more attempts. */
  final?: boolean;
  at: string;
  wake_at?: string;
}

/** A stream of a run. */
export interface RunStream {
  name: string;
  /** Read it at /v1/stream/{path}. */
  path: string;
  content_type: string;
  /** Its record count. */
  next_offset: number;
  closed: boolean;
  created_at: string;
}

/** The reply to a hook delivery. */
export interface HookDelivery {
  run_id: string;
  op: number;
  /** The hook_received event's seq in the run's log. */
  seq: number;
  /** Payloads the hook has received, this one included. */
  count: number;
  /** Sent again with its idempotency key: it added nothing. */
  duplicate?: boolean;
  /** The delivery closed the hook. */
  closed?: boolean;
}

/** A hook of a run. */
export interface Hook {
  token: string;
  op: number;
  received: number;
  /** Closed, or its run ended. */
  disposed: boolean;
  created_at: string;
}

/** The reply to a message sent to a run. */
export interface MessageSent {
  run_id: string;
  topic: string;
  /** The message_received event's seq in the run's log. */
  seq: number;
  duplicate?: boolean;
}

/** A run event: the latest value a run published under a key. */
export interface RunEvent {
  key: string;
  /** Undefined when elided. */
  value: unknown;
  /** The event_set event that set it: wait for a newer one with after = seq. */
  seq: number;
  at: string;
  /** The value's bytes. */
  size?: number;
  /** In a run's state: a value over 4 KiB left out; getEvent(runId, key) has it. */
  elided?: boolean;
}

/** What a run published and was sent. */
export interface RunState {
  /** By key, 1,000 at most; values over 4 KiB elided. */
  events: RunEvent[];
  /** By topic: how many came and, once it ended, how many it took and left (-1 before). */
  messages: { topic: string; received: number; taken: number; left: number }[];
  /** More keys follow the page's last (next_after). */
  more?: boolean;
  next_after?: string;
}

/** How to reach the server. */
export type ClientOptions = TransportOptions;

/** The largest hook payload or message the server takes, in bytes of JSON (1 MiB). */
export const MAX_PAYLOAD_BYTES = 1 << 20;
/** The longest a getEvent may wait, in ms. */
export const MAX_EVENT_WAIT_MS = 60_000;

const terminal = new Set<RunStatus>(['completed', 'failed', 'cancelled']);

/** n random bytes in hex (a fork's id). */
function randomHex(n: number): string {
  const b = new Uint8Array(n);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

/**
 * JSON with every object's keys sorted: the same value always makes the
 * same body, which is what the server compares a request sent again with
 * its idempotency key by.
 */
function canonicalJSON(value: unknown, what: string): string {
  const s = JSON.stringify(value, (_k, v: unknown) =>
    v !== null && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, (v as Record<string, unknown>)[k]]))
      : v,
  );
  if (s === undefined) throw new TypeError(`${what}: a value JSON cannot encode`);
  return s;
}

/**
 * Client talks to one weir server. Reads and requests weir de-duplicates
 * (an idempotency key, an id, a writer's seqs) are retried on network
 * failures and retryable replies; anything else is sent once, since a lost
 * reply may hide a request that landed.
 */
export class Client {
  private readonly t: Transport;
  private readonly opts: ClientOptions;

  constructor(opts: ClientOptions = {}) {
    this.t = new Transport(opts);
    this.opts = { ...opts, baseUrl: this.t.baseUrl };
  }

  /** The server's base URL. */
  get baseUrl(): string {
    return this.t.baseUrl;
  }

  private async json<T>(req: Request, value?: unknown, what = ''): Promise<{ status: number; body: T }> {
    if (value !== undefined) {
      req.body = canonicalJSON(value, what || `${req.method} ${req.path}`);
      req.headers = { ...req.headers, 'content-type': 'application/json' };
    }
    const r = await this.t.request(req);
    return { status: r.status, body: r.status === 204 ? (null as T) : r.json<T>() };
  }

  // Runs.

  /**
   * Starts a run of workflow with input (any JSON value). With an
   * idempotencyKey (or an id) a retry of this start returns the same run,
   * never a second one, so it is retried on failures; without either it is
   * sent once.
   */
  async start(workflow: string, input?: unknown, opts: { idempotencyKey?: string; id?: string; signal?: AbortSignal } = {}): Promise<Started> {
    if (opts.idempotencyKey !== undefined && opts.id !== undefined) throw new TypeError('start: an idempotency key or an id, not both');
    const body: Record<string, unknown> = { workflow };
    if (input !== undefined) body.input = input;
    if (opts.id !== undefined) body.id = opts.id;
    const req: Request = { method: 'POST', path: '/v1/runs', idempotent: opts.idempotencyKey !== undefined || opts.id !== undefined };
    if (opts.idempotencyKey !== undefined) req.headers = { 'idempotency-key': opts.idempotencyKey };
    if (opts.signal) req.signal = opts.signal;
    const { status, body: run } = await this.json<Run>(req, body, 'start');
    return { run, created: status === 201 };
  }

  /** A run; NotFoundError for an unknown one. */
  async getRun(id: string): Promise<Run> {
    return (await this.json<Run>({ method: 'GET', path: `/v1/runs/${seg(id, 'run id')}`, idempotent: true })).body;
  }

  /** One page of runs, newest first (limit 1 to 1000, the server's default 50). */
  async listRuns(opts: { workflow?: string; status?: RunStatus; limit?: number; before?: string } = {}): Promise<RunPage> {
    const query = { workflow: opts.workflow, status: opts.status, limit: opts.limit, before: opts.before };
    return (await this.json<RunPage>({ method: 'GET', path: '/v1/runs', query, idempotent: true })).body;
  }

  /** A run's event log, in order; after: only the events after that seq (poll with the last one you got). */
  async events(id: string, opts: { after?: number } = {}): Promise<LogEvent[]> {
    const out: LogEvent[] = [];
    let after = opts.after && opts.after > 0 ? opts.after : 0;
    // The server answers a page at a time (more, next_after).
    for (;;) {
      const query = { after: after > 0 ? after : undefined };
      const r = await this.json<{ events?: LogEvent[]; more?: boolean; next_after?: number }>({ method: 'GET', path: `/v1/runs/${seg(id, 'run id')}/events`, query, idempotent: true });
      out.push(...(r.body.events ?? []));
      const next = r.body.next_after ?? 0;
      if (!r.body.more || next <= after) return out;
      after = next;
    }
  }

  /** Asks for a run to be cancelled; returns it as it is now (cancelled once the engine stopped it). An ended run is unchanged. */
  async cancel(id: string): Promise<Run> {
    return (await this.json<Run>({ method: 'POST', path: `/v1/runs/${seg(id, 'run id')}/cancel`, idempotent: true })).body;
  }

  /**
   * Starts a new run from run id's operation op (1-based, as its event log
   * numbers them) or its first step named step: the operations before it
   * replay, and the new run's streams begin with their committed output.
   * The same id and point again return the same fork, so it is retried on
   * failures (a random id is made if none is given).
   */
  async fork(
    id: string,
    point: { op: number; step?: undefined } | { step: string; op?: undefined },
    opts: { id?: string; input?: unknown; version?: string } = {},
  ): Promise<Run> {
    const body: Record<string, unknown> = { id: opts.id ?? `run_${randomHex(12)}` };
    if (point.op !== undefined) body.op = point.op;
    else body.step = point.step;
    if (opts.input !== undefined) body.input = opts.input;
    if (opts.version !== undefined) body.version = opts.version;
    return (await this.json<Run>({ method: 'POST', path: `/v1/runs/${seg(id, 'run id')}/fork`, idempotent: true }, body, 'fork')).body;
  }

  /** Forks run id from the step whose failure ended it, or from its first step named step. Sent once. */
  async retry(id: string, step?: string): Promise<Run> {
    const body = step === undefined ? {} : { step };
    return (await this.json<Run>({ method: 'POST', path: `/v1/runs/${seg(id, 'run id')}/retry`, idempotent: false }, body, 'retry')).body;
  }

  /**
   * Runs a failed or cancelled run again, with its id and history; its
   * streams reopen. NotResumableError (409) for a run that is running,
   * pending or completed.
   */
  async resume(id: string): Promise<Run> {
    return (await this.json<Run>({ method: 'POST', path: `/v1/runs/${seg(id, 'run id')}/resume`, idempotent: true })).body;
  }

  /** A run's streams, by name. */
  async streams(id: string): Promise<RunStream[]> {
    const r = await this.json<{ streams: RunStream[] }>({ method: 'GET', path: `/v1/runs/${seg(id, 'run id')}/streams`, idempotent: true });
    return r.body.streams ?? [];
  }

  /** The workflows the server can start. */
  async workflows(): Promise<string[]> {
    return (await this.json<{ workflows: string[] }>({ method: 'GET', path: '/v1/workflows', idempotent: true })).body.workflows ?? [];
  }

  /** Polls a run until it ends; a WeirError if it has not within timeoutMs, so no wait is unbounded. */
  async wait(id: string, opts: { timeoutMs: number; signal?: AbortSignal }): Promise<Run> {
    const end = Date.now() + opts.timeoutMs;
    for (let delay = 10; ; delay = Math.min(delay * 2, 500)) {
      const run = await this.getRun(id);
      if (terminal.has(run.status)) return run;
      const left = end - Date.now();
      if (left <= 0) throw new WeirError(`run ${id} is still ${run.status} after ${opts.timeoutMs} ms`);
      await sleep(Math.min(delay, left), opts.signal);
    }
  }

  // Hooks.

  /**
   * Delivers payload (any JSON value) to the hook holding token: the run
   * waiting on it goes on. With an idempotencyKey (the id of the event
   * delivered: a webhook's delivery id) a delivery sent again gets the first
   * reply (duplicate) and adds nothing, so it is retried on failures; without
   * one it is sent once. close makes it the hook's last payload.
   */
  async deliverHook(token: string, payload: unknown, opts: { idempotencyKey?: string; close?: boolean } = {}): Promise<HookDelivery> {
    const body = canonicalJSON(payload, `deliverHook(${token})`);
    tooLarge(body, 'a hook payload');
    return this.postHook(token, body, opts.idempotencyKey, opts.close ?? false);
  }

  /** Closes the hook holding token without a payload: the run takes what was delivered, then learns the hook is closed. */
  async closeHook(token: string, opts: { idempotencyKey?: string } = {}): Promise<HookDelivery> {
    return this.postHook(token, undefined, opts.idempotencyKey, true);
  }

  private async postHook(token: string, body: string | undefined, key: string | undefined, close: boolean): Promise<HookDelivery> {
    const headers: Record<string, string> = {};
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (key !== undefined) headers['idempotency-key'] = key;
    const req: Request = { method: 'POST', path: `/v1/hooks/${seg(token, 'hook token')}`, headers, idempotent: key !== undefined };
    if (close) req.query = { close: 'true' };
    if (body !== undefined) req.body = body;
    return (await this.t.request(req)).json<HookDelivery>();
  }

  /** A run's hooks, by op: poll it (with a deadline) to learn a minted token, or that a hook is there to deliver to. */
  async hooks(runId: string): Promise<Hook[]> {
    const r = await this.json<{ hooks: Hook[] | null }>({ method: 'GET', path: `/v1/runs/${seg(runId, 'run id')}/hooks`, idempotent: true });
    return r.body.hooks ?? [];
  }

  // Messages and run events.

  /**
   * Sends message (any JSON value) to a run on topic; it is in the run's
   * log when this resolves, whatever the run is doing. Retried with an
   * idempotencyKey, sent once without, as deliverHook.
   */
  async sendMessage(runId: string, topic: string, message: unknown, opts: { idempotencyKey?: string } = {}): Promise<MessageSent> {
    const body = canonicalJSON(message, `sendMessage(${runId}, ${topic})`);
    tooLarge(body, 'a message');
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (opts.idempotencyKey !== undefined) headers['idempotency-key'] = opts.idempotencyKey;
    const path = `/v1/runs/${seg(runId, 'run id')}/messages/${seg(topic, 'topic')}`;
    return (await this.t.request({ method: 'POST', path, headers, body, idempotent: opts.idempotencyKey !== undefined })).json<MessageSent>();
  }

  /**
   * The latest value a run published under key. With waitMs (0 to 60 s) it
   * waits that long for a value newer than after (a RunEvent.seq; 0: any)
   * and resolves null if none came; following a key is a loop on after.
   * NotFoundError: no such run, or no value (and, waiting, the run ended).
   */
  async getEvent(runId: string, key: string, opts: { waitMs?: number; after?: number } = {}): Promise<RunEvent | null> {
    const path = `/v1/runs/${seg(runId, 'run id')}/events/${seg(key, 'run event key')}`;
    const req: Request = { method: 'GET', path, idempotent: true };
    if (opts.waitMs !== undefined) {
      if (!(opts.waitMs >= 0 && opts.waitMs <= MAX_EVENT_WAIT_MS)) throw new RangeError(`getEvent: waitMs ${opts.waitMs}: 0 to ${MAX_EVENT_WAIT_MS}`);
      req.query = { wait: `${Math.round(opts.waitMs)}ms`, after: opts.after || undefined };
      req.timeoutMs = this.t.timeoutMs + opts.waitMs;
    } else if (opts.after) {
      throw new TypeError('getEvent: after goes with waitMs (a value newer than after, waited for)');
    }
    const r = await this.t.request(req);
    return r.status === 204 ? null : r.json<RunEvent>();
  }

  /** A run's published events (latest value per key) and the messages sent to it, by topic. */
  async state(runId: string): Promise<RunState> {
    return (await this.json<RunState>({ method: 'GET', path: `/v1/runs/${seg(runId, 'run id')}/state`, idempotent: true })).body;
  }

  // Streams.

  /** An exactly-once writer on a standalone stream of this server. */
  writer(opts: Omit<StreamWriterOptions, keyof TransportOptions | 'url'>): StreamWriter {
    return new StreamWriter({ ...this.opts, ...opts });
  }

  /** Follows the stream at /v1/stream/{path} of this server (see follow). */
  follow(path: string, opts: Omit<FollowOptions, 'url'> = {}): Follower {
    return follow(this.followOptions(this.t.baseUrl + streamPath(path), opts));
  }

  /** Follows a run's stream (see follow; waitForStreamMs lets it wait for the run to create it). */
  followRun(runId: string, name: string, opts: Omit<FollowOptions, 'url'> = {}): Follower {
    return follow(this.followOptions(runStreamUrl(this.t.baseUrl, runId, name), opts));
  }

  private followOptions(url: string, opts: Omit<FollowOptions, 'url'>): FollowOptions {
    const o: FollowOptions = { ...opts, url };
    if (o.token === undefined && this.t.token) o.token = this.t.token;
    if (o.fetch === undefined) o.fetch = this.t.fetch;
    return o;
  }

  /** Creates a standalone stream; true if created, false if one of the same configuration was there (ConflictError: another). */
  async createStream(path: string, contentType = 'application/octet-stream', opts: { ttlSeconds?: number; closed?: boolean } = {}): Promise<boolean> {
    const headers: Record<string, string> = { 'content-type': contentType };
    if (opts.ttlSeconds !== undefined) headers['stream-ttl'] = String(opts.ttlSeconds);
    if (opts.closed) headers['stream-closed'] = 'true';
    const r = await this.t.request({ method: 'PUT', path: streamPath(path), headers, idempotent: true });
    return r.status === 201;
  }

  /** Closes a stream (twice is fine); writers still open there never commit. Resolves with its final offset. */
  async closeStream(path: string): Promise<string> {
    const r = await this.t.request({ method: 'POST', path: streamPath(path), headers: { 'stream-closed': 'true' }, idempotent: true });
    return r.headers.get('stream-next-offset') ?? '';
  }

  /** Deletes a stream and all it holds (NotFoundError if there is none). */
  async deleteStream(path: string): Promise<void> {
    await this.t.request({ method: 'DELETE', path: streamPath(path), idempotent: false });
  }
}

function tooLarge(body: string, what: string): void {
  const n = new TextEncoder().encode(body).byteLength;
  if (n > MAX_PAYLOAD_BYTES) throw new TooLargeError(`${what} of ${n} bytes: the limit is ${MAX_PAYLOAD_BYTES} (not sent)`);
}
