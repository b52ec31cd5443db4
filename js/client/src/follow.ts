// follow: a stream read live, with weir's rewinds applied, so that a UI
// shows exactly what a reader of the committed view will end up with, at
// the live view's latency. The rule is Go's stream.Voids (stream/view.go);
// the API is the one the packages agreed on (spec/client-api.md).

import { NotFoundError, ProtocolError, WeirConnectionError, WeirError, errorFromReply, pathOf } from './errors.js';
import { Deadline, fetchOf, networkError, positive, sleep, type Fetch } from './http.js';
import { Lines, SSE, dataEncoding, parseOffset, parseRecord, type DataEncoding, type SSEEvent, type WireRecord } from './ndjson.js';

/** One chunk of data a follower shows. */
export interface Chunk {
  /** The record's offset. */
  offset: number;
  /** "" for anonymous/producer data. */
  writer: string;
  attempt: number;
  seq: number;
  /** The decoded value: a JSON value, a string, or a Uint8Array (base64 decoded). */
  data: unknown;
  /** Committed or anonymous: never voided from now on. */
  final: boolean;
}

/** What a follower reports, in stream order. */
export type FollowEvent =
  /** New visible chunks, in offset order. */
  | { type: 'append'; chunks: Chunk[] }
  /** Those chunks are void: gone from the snapshot. */
  | { type: 'rewind'; writer: string; fromSeq: number; removed: Chunk[] }
  | { type: 'commit'; writer: string; attempt: number; count: number }
  /** After the close's own rewinds. */
  | { type: 'close' }
  /**
   * A resumed run's stream went on past a close this follower read but
   * had not stopped at (both were in the log when it read them): the
   * close voided what was open, the chunks after the reopen follow.
   */
  | { type: 'reopen' }
  /** A dropped connection; it resumes. */
  | { type: 'reconnect'; error: Error; attempt: number };

/** What a follower shows now. */
export interface Snapshot {
  /** The visible chunks in offset order. */
  chunks: readonly Chunk[];
  /** Where a resume starts. */
  nextOffset: string;
  upToDate: boolean;
  closed: boolean;
}

/** How to follow a stream. */
export interface FollowOptions {
  /** A full URL of an ndjson endpoint: weir's `${base}/v1/stream/${path}` or an app's route that proxies one. */
  url: string;
  /** Sent as Authorization: Bearer (never needed for an app route). */
  token?: string;
  /** Default live (with rewinds); committed never rewinds. */
  view?: 'live' | 'committed';
  /** An offset to resume from (default: the start, -1); `now` starts at the tail. */
  from?: string;
  signal?: AbortSignal;
  fetch?: typeof globalThis.fetch;
  /** Each wait bounded: no byte for this long on a live connection (the server sends a comment at least every 20 s) is a dropped connection. Default 45 s. */
  idleTimeoutMs?: number;
  /** Reconnects with a backoff (50 ms doubling to 2 s) until this many fail in a row; then the follower fails. Default 10. */
  maxReconnects?: number;
  onEvent?: (ev: FollowEvent, snapshot: Snapshot) => void;
  /**
   * How long a 404 before the first reply is taken for a stream that does
   * not exist yet and polled for (50 ms doubling to 500 ms), rather than a
   * failure: a run's stream exists once its first step writes to it, and a
   * UI follows it as soon as it started the run. Default 0: a 404 fails.
   */
  waitForStreamMs?: number;
}

/** A stream being followed. */
export interface Follower extends AsyncIterable<FollowEvent> {
  /**
   * What the follower shows now. The same object until something changes,
   * so it can back React's useSyncExternalStore as it is.
   */
  snapshot(): Snapshot;
  /** Resolves with the final snapshot once the stream closed; rejects with a WeirError if it failed for good. */
  readonly done: Promise<Snapshot>;
  /**
   * Stops following (so does options.signal, and leaving a for-await loop
   * early, as with a Node stream): done resolves with the snapshot as it is
   * (closed false), and iterations end.
   */
  cancel(): void;
}

/** A run's stream: `${baseUrl}/v1/stream/runs/${run}/${name}` */
export function runStreamUrl(baseUrl: string, run: string, name: string): string {
  if (!run || !name) throw new TypeError('runStreamUrl: a run id and a stream name, please');
  return `${baseUrl.replace(/\/+$/, '')}/v1/stream/runs/${encodeURIComponent(run)}/${encodeURIComponent(name)}`;
}

/**
 * Follows a stream over fetch: SSE (live=sse&format=ndjson), or long-poll
 * when the server does not answer text/event-stream; resumes from the last
 * next_offset after any drop, with no gap and no repeat; keeps the writers'
 * open records across reconnects, so a rewind that arrives later still
 * removes what was shown. See FollowOptions for the bounds of every wait.
 */
export function follow(opts: FollowOptions): Follower {
  return new Follow(opts);
}

interface Sub {
  push(ev: FollowEvent): void;
  wake(): void;
}

type State = 'running' | 'closed' | 'failed' | 'cancelled';

const backoff = (n: number, cap: number) => Math.min(50 * 2 ** Math.min(n - 1, 20), cap);

function mediaType(ct: string | null): string {
  return (ct ?? '').split(';', 1)[0]!.trim().toLowerCase();
}

class Follow implements Follower {
  readonly done: Promise<Snapshot>;
  private resolve!: (s: Snapshot) => void;
  private reject!: (e: unknown) => void;

  private readonly base: URL;
  private readonly fetch: Fetch;
  private readonly view: 'live' | 'committed';
  private readonly idleMs: number;
  private readonly maxReconnects: number;
  private readonly waitForStreamMs: number;
  private readonly stop = new AbortController();

  private state: State = 'running';
  private error: unknown;
  private chunks: Chunk[] = [];
  /** writer -> its visible records whose fate is open, in offset order. */
  private readonly open = new Map<string, Chunk[]>();
  private nextOffset: string;
  /** The offset the next record must have (live), or at least have (committed); undefined at `now`. */
  private expected: number | undefined;
  private upToDate = false;
  private closed = false;
  /** The last close or reopen record read was a close. */
  private closeRead = false;
  private cursor: string | undefined;
  private mode: 'sse' | 'long-poll' = 'sse';
  private snap: Snapshot | undefined;
  private appended: Chunk[] = [];
  private progressed = false;
  private replied = false;
  private readonly subs = new Set<Sub>();

  constructor(private readonly opts: FollowOptions) {
    let base: URL;
    try {
      const loc = (globalThis as { location?: { href?: string } }).location?.href;
      base = new URL(opts.url, loc);
    } catch {
      throw new TypeError(`follow: url ${JSON.stringify(opts.url)} is not a URL`);
    }
    this.base = base;
    this.fetch = fetchOf(opts.fetch);
    const view = opts.view ?? 'live';
    if (view !== 'live' && view !== 'committed') throw new TypeError(`follow: view ${JSON.stringify(view)}: want live or committed`);
    this.view = view;
    this.idleMs = positive(opts.idleTimeoutMs ?? 45_000, 'follow: idleTimeoutMs');
    const max = opts.maxReconnects ?? 10;
    if (!Number.isInteger(max) || max < 0) throw new RangeError(`follow: maxReconnects ${max}: want an integer >= 0`);
    this.maxReconnects = max;
    this.waitForStreamMs = Math.max(0, opts.waitForStreamMs ?? 0);
    const from = opts.from ?? '-1';
    if (from === '-1') this.expected = 0;
    else if (from !== 'now') {
      this.expected = parseOffset(from);
      if (this.expected === undefined) throw new TypeError(`follow: from ${JSON.stringify(from)}: want -1, now or an offset (0000000000000000_…)`);
    }
    this.nextOffset = from;
    this.done = new Promise<Snapshot>((res, rej) => {
      this.resolve = res;
      this.reject = rej;
    });
    // A follower used through onEvent or iteration alone must not crash a
    // process with an unhandled rejection when it fails.
    this.done.catch(() => undefined);
    const signal = opts.signal;
    if (signal?.aborted) {
      this.cancel();
      return;
    }
    signal?.addEventListener('abort', () => this.cancel(), { once: true });
    this.run().catch((err: unknown) => this.fail(err)); // an onEvent that threw while told of a reconnect
  }

  snapshot(): Snapshot {
    this.snap ??= Object.freeze({
      chunks: Object.freeze(this.chunks.slice()),
      nextOffset: this.nextOffset,
      upToDate: this.upToDate,
      closed: this.closed,
    });
    return this.snap;
  }

  cancel(): void {
    if (this.state !== 'running') return;
    this.state = 'cancelled';
    this.stop.abort(new Error('follow: cancelled'));
    this.resolve(this.snapshot());
    for (const s of this.subs) s.wake();
  }

  [Symbol.asyncIterator](): AsyncIterator<FollowEvent> {
    const queue: FollowEvent[] = [];
    let head = 0;
    let wake: (() => void) | undefined;
    const sub: Sub = {
      push: (ev) => {
        queue.push(ev);
        wake?.();
      },
      wake: () => wake?.(),
    };
    this.subs.add(sub);
    return {
      next: async (): Promise<IteratorResult<FollowEvent>> => {
        for (;;) {
          if (head < queue.length) {
            const value = queue[head++]!;
            if (head > 1024 && head * 2 > queue.length) {
              queue.splice(0, head);
              head = 0;
            }
            return { value, done: false };
          }
          if (this.state !== 'running') {
            this.subs.delete(sub);
            if (this.state === 'failed') throw this.error;
            return { value: undefined, done: true };
          }
          await new Promise<void>((r) => (wake = r));
          wake = undefined;
        }
      },
      return: async (): Promise<IteratorResult<FollowEvent>> => {
        this.subs.delete(sub);
        this.cancel();
        return { value: undefined, done: true };
      },
    };
  }

  // The loop: connect, read, and on a drop wait and connect again.

  private async run(): Promise<void> {
    let failures = 0;
    let waits = 0;
    const waitUntil = Date.now() + this.waitForStreamMs;
    while (this.state === 'running') {
      this.progressed = false;
      try {
        await this.connect();
        if (this.state !== 'running') return;
        if (!this.progressed) throw new WeirConnectionError(`GET ${pathOf(this.base.href)}: the reply ended without an event`);
        failures = 0; // a live response the server ended (its SSE duration): go on at once
        continue;
      } catch (err) {
        if (this.state !== 'running') return;
        if (!(err instanceof WeirError)) return this.fail(err); // the caller's onEvent threw, or a bug
        if (err instanceof NotFoundError && !this.replied && Date.now() < waitUntil) {
          try {
            await sleep(Math.min(backoff(++waits, 500), Math.max(1, waitUntil - Date.now())), this.stop.signal);
          } catch {
            return;
          }
          continue;
        }
        if (err instanceof NotFoundError && !this.replied && this.waitForStreamMs > 0) {
          err.message += ` (waited ${this.waitForStreamMs} ms for the stream to be created)`;
        }
        if (!err.retryable) return this.fail(err);
        if (this.progressed) failures = 0;
        failures++;
        if (failures > this.maxReconnects) {
          err.message += ` (gave up after ${this.maxReconnects} reconnects in a row failed)`;
          return this.fail(err);
        }
        this.emit({ type: 'reconnect', error: err, attempt: failures });
        if (this.state !== 'running') return;
        try {
          await sleep(backoff(failures, 2000), this.stop.signal);
        } catch {
          return;
        }
      }
    }
  }

  private url(): string {
    const u = new URL(this.base.href);
    const q = u.searchParams;
    q.set('offset', this.nextOffset);
    q.set('live', this.mode);
    q.set('format', 'ndjson');
    q.set('view', this.view);
    if (this.cursor !== undefined) q.set('cursor', this.cursor);
    else q.delete('cursor');
    return u.href;
  }

  /** One request and its reply, read to the end; throws what ended it otherwise. */
  private async connect(): Promise<void> {
    const url = this.url();
    const dl = new Deadline(this.idleMs, () => `GET ${pathOf(url)}: no byte for ${this.idleMs} ms: taken for a dropped connection`, this.stop.signal);
    try {
      const headers: Record<string, string> = { accept: this.mode === 'sse' ? 'text/event-stream' : 'application/x-ndjson' };
      if (this.opts.token) headers['authorization'] = `Bearer ${this.opts.token}`;
      let res: Response;
      try {
        res = await this.fetch(url, { headers, signal: dl.signal });
      } catch (err) {
        throw networkError(err, 'GET', url, dl.signal);
      }
      dl.touch();
      if (!res.ok) {
        let text = '';
        try {
          text = await res.text();
        } catch (err) {
          throw networkError(err, 'GET', url, dl.signal);
        }
        throw errorFromReply(res.status, res.headers, text, 'GET', url);
      }
      this.replied = true;
      const ct = mediaType(res.headers.get('content-type'));
      if (this.mode === 'sse' && ct === 'text/event-stream') return await this.readSSE(res, url, dl);
      if (ct === 'application/x-ndjson' || (this.mode === 'long-poll' && res.status === 204)) {
        // No SSE here (an app route, a proxy that buffers): long-poll from now on.
        this.mode = 'long-poll';
        return await this.readNDJSON(res, url, dl);
      }
      void res.body?.cancel().catch(() => undefined);
      throw new ProtocolError(
        `GET ${pathOf(url)}: the reply is ${ct ? JSON.stringify(ct) : 'without a Content-Type'} (HTTP ${res.status}), ` +
          `not text/event-stream or application/x-ndjson: is the URL weir's /v1/stream/… or an app route that proxies it?`,
        { status: res.status, headers: res.headers, method: 'GET', url },
      );
    } finally {
      dl.done();
    }
  }

  /** Reads body chunks as text until the body ends (false) or the follower stops (true). */
  private async readBody(res: Response, url: string, dl: Deadline, onText: (text: string) => void): Promise<void> {
    if (!res.body) return;
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    try {
      for (;;) {
        let r: ReadableStreamReadResult<Uint8Array>;
        try {
          r = await reader.read();
        } catch (err) {
          throw networkError(err, 'GET', url, dl.signal);
        }
        if (r.done) return;
        dl.touch();
        onText(dec.decode(r.value, { stream: true }));
        if (this.state !== 'running') return;
      }
    } finally {
      reader.cancel().catch(() => undefined);
    }
  }

  private async readSSE(res: Response, url: string, dl: Deadline): Promise<void> {
    const enc = dataEncoding(res.headers.get('weir-data-encoding'));
    const sse = new SSE();
    await this.readBody(res, url, dl, (text) => {
      for (const ev of sse.push(text)) {
        this.onSSE(ev, enc);
        if (this.state !== 'running') return;
      }
    });
    if (this.state === 'running' && sse.pending) throw new WeirConnectionError(`GET ${pathOf(url)}: the reply ended in the middle of an event`);
  }

  private onSSE(ev: SSEEvent, enc: DataEncoding): void {
    switch (ev.event) {
      case 'data':
        this.progressed = true;
        try {
          for (const line of ev.data) {
            if (line !== '') this.apply(parseRecord(line, enc));
            if (this.state !== 'running') return;
          }
        } finally {
          this.flush(); // what came before a bad record is shown, and told
        }
        return;
      case 'control': {
        this.progressed = true;
        let c: unknown;
        try {
          c = JSON.parse(ev.data.join('\n'));
        } catch {
          throw new ProtocolError(`a control event that is not JSON: ${JSON.stringify(ev.data.join('\n').slice(0, 200))}`);
        }
        const o = (typeof c === 'object' && c !== null ? c : {}) as Record<string, unknown>;
        if (typeof o.streamNextOffset !== 'string') throw new ProtocolError(`a control event without streamNextOffset: ${JSON.stringify(c)}`);
        this.control(o.streamNextOffset, typeof o.streamCursor === 'string' ? o.streamCursor : undefined, o.upToDate === true, o.streamClosed === true);
        return;
      }
      case 'error': {
        // The server ended the read (a store failure, the stream deleted):
        // what the next request answers decides.
        let msg = ev.data.join('\n');
        try {
          const e = JSON.parse(msg) as { error?: unknown };
          if (typeof e.error === 'string') msg = e.error;
        } catch {
          // keep the text as it is
        }
        throw new WeirConnectionError(`the server ended the read: ${msg}`);
      }
    }
  }

  private async readNDJSON(res: Response, url: string, dl: Deadline): Promise<void> {
    const enc = dataEncoding(res.headers.get('weir-data-encoding'));
    const lines = new Lines();
    let any = false;
    await this.readBody(res, url, dl, (text) => {
      try {
        for (const line of lines.push(text)) {
          if (line === '') continue;
          any = true;
          this.apply(parseRecord(line, enc));
          if (this.state !== 'running') return;
        }
      } finally {
        this.flush();
      }
    });
    if (this.state !== 'running') return;
    if (lines.pending > 0) throw new ProtocolError(`GET ${pathOf(url)}: the reply ends in the middle of a record`);
    const next = res.headers.get('stream-next-offset');
    if (next !== null) {
      const h = (name: string) => res.headers.get(name)?.toLowerCase() === 'true';
      this.control(next, res.headers.get('stream-cursor') ?? undefined, h('stream-up-to-date'), h('stream-closed'));
    } else {
      if (any) this.progressed = true;
      // A reply without its head (an app route that strips headers): the
      // close record read last is the end.
      if (this.closeRead && !this.closed) this.close();
    }
  }

  // The rules.

  private check(offset: number): void {
    const want = this.expected;
    if (want === undefined || (this.view === 'live' ? offset === want : offset >= want)) return;
    throw new ProtocolError(
      `a record at offset ${offset} where ${this.view === 'live' ? '' : 'at least '}${want} was due: ` +
        `${offset < want ? 'offsets went backwards' : 'records were skipped'} (a record of another stream?)`,
    );
  }

  private apply(r: WireRecord): void {
    this.check(r.offset);
    this.expected = r.offset + 1;
    this.nextOffset = r.nextOffset;
    this.snap = undefined;
    switch (r.kind) {
      case 'data': {
        const final = this.view === 'committed' || r.writer === '' || r.attempt === 0;
        const c: Chunk = Object.freeze({ offset: r.offset, writer: r.writer, attempt: r.attempt, seq: r.seq, data: r.data, final });
        this.chunks.push(c);
        if (!final) {
          const l = this.open.get(r.writer);
          if (l) l.push(c);
          else this.open.set(r.writer, [c]);
        }
        this.appended.push(c);
        return;
      }
      case 'abort': {
        this.flush();
        const l = this.open.get(r.writer);
        if (!l) return; // a writer never seen here (or settled before): nothing to remove
        const removed = l.filter((c) => c.seq >= r.from);
        if (removed.length === 0) return;
        const keep = l.filter((c) => c.seq < r.from);
        if (keep.length > 0) this.open.set(r.writer, keep);
        else this.open.delete(r.writer);
        this.remove(removed);
        this.emit({ type: 'rewind', writer: r.writer, fromSeq: r.from, removed });
        return;
      }
      case 'commit': {
        this.flush();
        const l = this.open.get(r.writer);
        if (l) {
          this.open.delete(r.writer);
          for (const c of l) {
            const i = this.indexOf(c.offset);
            if (i >= 0) this.chunks[i] = Object.freeze({ ...c, final: true });
          }
        }
        this.emit({ type: 'commit', writer: r.writer, attempt: r.attempt, count: r.count });
        return;
      }
      case 'close':
        // The close voids what is open at once; the follower stops when
        // the server says the stream is closed (control), for a resumed
        // run's stream goes on past it with a reopen record.
        this.flush();
        this.voidOpen();
        this.closeRead = true;
        return;
      case 'reopen':
        this.flush();
        this.closeRead = false;
        this.emit({ type: 'reopen' });
        return;
    }
  }

  private control(next: string, cursor: string | undefined, upToDate: boolean, closed: boolean): void {
    const n = parseOffset(next);
    if (n === undefined) throw new ProtocolError(`a next offset that is not weir's: ${JSON.stringify(next)}`);
    const want = this.expected;
    if (want !== undefined && (this.view === 'live' ? n !== want : n < want)) {
      throw new ProtocolError(
        `the reply's next offset ${next} does not follow the records read (${want} was due): ` +
          `${n < want ? 'it goes backwards' : 'records were skipped'} (an offset of another stream?)`,
      );
    }
    this.progressed = true;
    this.expected = n;
    if (this.upToDate !== upToDate || this.nextOffset !== next) this.snap = undefined;
    this.nextOffset = next;
    this.upToDate = upToDate;
    if (cursor !== undefined) this.cursor = cursor;
    if (closed && !this.closed) this.close();
  }

  /** Voids every writer's open chunks: a close never commits them. */
  private voidOpen(): void {
    for (const [writer, l] of this.open) {
      this.open.delete(writer);
      this.remove(l);
      this.emit({ type: 'rewind', writer, fromSeq: 0, removed: l });
    }
  }

  private close(): void {
    this.voidOpen();
    this.closed = true;
    this.upToDate = true;
    this.snap = undefined;
    this.emit({ type: 'close' });
    if (this.state !== 'running') return;
    this.state = 'closed';
    this.stop.abort(new Error('follow: the stream closed'));
    this.resolve(this.snapshot());
    for (const s of this.subs) s.wake();
  }

  private indexOf(offset: number): number {
    let lo = 0;
    let hi = this.chunks.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const o = this.chunks[mid]!.offset;
      if (o === offset) return mid;
      if (o < offset) lo = mid + 1;
      else hi = mid - 1;
    }
    return -1;
  }

  private remove(gone: readonly Chunk[]): void {
    const offsets = new Set(gone.map((c) => c.offset));
    this.chunks = this.chunks.filter((c) => !offsets.has(c.offset));
    this.snap = undefined;
  }

  /** Emits the chunks appended since the last event. */
  private flush(): void {
    if (this.appended.length === 0) return;
    const chunks = this.appended;
    this.appended = [];
    this.emit({ type: 'append', chunks });
  }

  private emit(ev: FollowEvent): void {
    if (this.state !== 'running') return;
    this.snap = undefined;
    if (this.opts.onEvent) this.opts.onEvent(ev, this.snapshot());
    for (const s of this.subs) s.push(ev);
  }

  private fail(err: unknown): void {
    if (this.state !== 'running') return;
    this.state = 'failed';
    this.error = err;
    this.stop.abort(err);
    this.reject(err);
    for (const s of this.subs) s.wake();
  }
}
