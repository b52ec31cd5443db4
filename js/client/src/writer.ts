// The exactly-once writer: weir's Weir-Writer extension (docs/protocol.md,
// "Exactly-once writers") over fetch, so a browser, a Node service or an
// edge function writes a stream that a retry can never duplicate.

import { ConflictError, NotFoundError, ProtocolError, TooLargeError, UnknownWriterError, WriterFinishedError } from './errors.js';
import { Transport, streamPath, type TransportOptions } from './http.js';

/** The largest chunk the server takes: 4 MiB. */
export const MAX_CHUNK_BYTES = 4 << 20;
/** The most chunks one append may carry. */
export const MAX_REQUEST_CHUNKS = 10_000;
/** The server's body limit (16 MiB by default), framing included. */
export const MAX_BODY_BYTES = 16 << 20;

/** An acknowledged chunk: where it is, and what weir did with it. */
export interface Ack {
  /** The chunk's seq in its attempt (0, 1, 2 … in write order). */
  seq: number;
  /** Its record offset. */
  offset: number;
  /** appended: a new record; adopted: an earlier attempt's identical record stands for it; retransmit: acknowledged before. */
  outcome: 'appended' | 'adopted' | 'retransmit';
}

/** How a StreamWriter writes. */
export interface StreamWriterOptions extends TransportOptions {
  /** The stream's path under /v1/stream/ (a standalone stream; created if missing). */
  path: string;
  /** The writer's id: the same across attempts (a job id, say), 1 to 1024 bytes. */
  writer: string;
  /** The attempt, from 1: a retry of the same work writes with a higher one. */
  attempt: number;
  /** The stream's content type. Default application/octet-stream. For application/json each chunk is one JSON value. */
  contentType?: string;
  /** The same as baseUrl: the name @weirhq/world's writer took. */
  url?: string;
  /** The most chunks one request carries. Default 1000. */
  maxBatchChunks?: number;
  /** The most bytes one request carries, framing included. Default 8 MiB. */
  maxBatchBytes?: number;
  /** Create the stream (PUT) before the first append if it is missing. Default true. */
  create?: boolean;
}

interface Call {
  acks: Ack[];
  left: number;
  resolve: (acks: Ack[]) => void;
  reject: (err: unknown) => void;
}

interface Pending {
  bytes: Uint8Array;
  seq: number;
  call: Call;
  index: number;
}

const OUTCOMES = new Set(['appended', 'adopted', 'retransmit']);
const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder();

/** Frames chunks as weir's Weir-Framing: u32be: each a 4-byte big-endian length, then its bytes (a body fetch takes everywhere). */
export function frame(chunks: readonly Uint8Array[]): ArrayBuffer {
  let n = 0;
  for (const c of chunks) n += 4 + c.byteLength;
  const out = new Uint8Array(n);
  const view = new DataView(out.buffer);
  let off = 0;
  for (const c of chunks) {
    view.setUint32(off, c.byteLength);
    out.set(c, off + 4);
    off += 4 + c.byteLength;
  }
  return out.buffer;
}

/** A JSON stream's append body: the chunks (each one JSON text) as one array. */
function jsonArray(chunks: readonly Uint8Array[]): ArrayBuffer {
  let n = 2 + Math.max(chunks.length - 1, 0);
  for (const c of chunks) n += c.byteLength;
  const out = new Uint8Array(n);
  out[0] = 0x5b; // [
  let off = 1;
  chunks.forEach((c, i) => {
    if (i > 0) out[off++] = 0x2c; // ,
    out.set(c, off);
    off += c.byteLength;
  });
  out[off] = 0x5d; // ]
  return out.buffer;
}

function isJSONType(ct: string): boolean {
  return ct.split(';', 1)[0]!.trim().toLowerCase() === 'application/json';
}

/**
 * StreamWriter writes one attempt of a writer to a weir stream, exactly
 * once. Chunks are numbered from 0 in call order; one request is in flight
 * at a time, and the writes made meanwhile go together in the next (up to
 * maxBatchChunks and maxBatchBytes). A request that fails on the network or
 * with a retryable reply is sent again with the same seqs, which weir
 * acknowledges as retransmits rather than appending twice. A later attempt
 * that writes the same chunks adopts them; one that writes others aborts
 * the earlier attempt's from the first difference. commit() makes the
 * attempt's chunks part of the committed view, which Durable Streams readers
 * get by default; abort() voids them.
 *
 * A failure that outlasts the retries (or a refusal: fenced, finished,
 * conflict, closed) breaks the writer for good: that write's promise and
 * every later one reject with it, and the attempt stays open. Recover the
 * way weir's steps do: a new writer with a higher attempt writes it all
 * again, and identical chunks are adopted, not duplicated.
 */
export class StreamWriter {
  readonly path: string;
  readonly writer: string;
  readonly attempt: number;
  readonly contentType: string;
  /** The stream's next offset after the last append. */
  nextOffset: string | undefined;
  /** Chunks acknowledged, by outcome. */
  readonly outcomes = { appended: 0, adopted: 0, retransmit: 0 };

  private readonly t: Transport;
  private readonly url: string;
  private readonly json: boolean;
  private readonly maxChunks: number;
  private readonly maxBytes: number;
  private readonly create: boolean;
  private created: Promise<void> | undefined;
  private queue: Pending[] = [];
  private seq = 0;
  private pumping = false;
  private sentAny = false;
  private broken: unknown;
  private finished: '' | 'committed' | 'aborted' = '';
  private idle: Array<() => void> = [];

  constructor(opts: StreamWriterOptions) {
    if (typeof opts.writer !== 'string' || opts.writer === '' || utf8.encode(opts.writer).byteLength > 1024) {
      throw new TypeError('StreamWriter: writer is an id of 1 to 1024 bytes, the same on every attempt');
    }
    if (!Number.isSafeInteger(opts.attempt) || opts.attempt < 1) throw new RangeError('StreamWriter: attempt is an integer >= 1');
    this.maxChunks = opts.maxBatchChunks ?? 1000;
    this.maxBytes = opts.maxBatchBytes ?? 8 << 20;
    if (!Number.isInteger(this.maxChunks) || this.maxChunks < 1 || this.maxChunks > MAX_REQUEST_CHUNKS) {
      throw new RangeError(`StreamWriter: maxBatchChunks is 1 to ${MAX_REQUEST_CHUNKS}`);
    }
    if (!(this.maxBytes >= 5 && this.maxBytes <= MAX_BODY_BYTES)) throw new RangeError(`StreamWriter: maxBatchBytes is 5 to ${MAX_BODY_BYTES}`);
    this.path = opts.path;
    this.url = streamPath(opts.path);
    this.writer = opts.writer;
    this.attempt = opts.attempt;
    this.contentType = opts.contentType ?? 'application/octet-stream';
    this.json = isJSONType(this.contentType);
    this.create = opts.create ?? true;
    const t: TransportOptions = { ...opts };
    if (opts.baseUrl === undefined && opts.url !== undefined) t.baseUrl = opts.url;
    this.t = new Transport(t);
  }

  /** The seq the next chunk written gets. */
  get nextSeq(): number {
    return this.seq;
  }

  /**
   * Writes chunks after every earlier write (a string is UTF-8; on a JSON
   * stream each chunk is the text of one JSON value); resolves with their
   * acks once the server has them. Empty chunks are skipped: the server has
   * none, and every attempt skips them alike. Awaiting each write is not
   * needed: an unawaited write that fails rejects commit() and flush().
   */
  write(...chunks: (string | Uint8Array)[]): Promise<Ack[]> {
    try {
      this.check();
      const bytes: Uint8Array[] = [];
      for (const c of chunks) {
        if (typeof c !== 'string' && !(c instanceof Uint8Array)) throw new TypeError('StreamWriter.write: chunks are strings or Uint8Arrays');
        // A copy: a caller that reuses its buffer must not change what a retry re-sends.
        const b = typeof c === 'string' ? utf8.encode(c) : c.slice();
        if (b.byteLength === 0) continue;
        if (b.byteLength > MAX_CHUNK_BYTES) {
          throw new TooLargeError(`StreamWriter.write: a chunk of ${b.byteLength} bytes: the limit is ${MAX_CHUNK_BYTES} (nothing of this write was sent)`);
        }
        if (this.json) {
          try {
            JSON.parse(utf8Decoder.decode(b));
          } catch {
            throw new TypeError(`StreamWriter.write: stream ${this.path} is JSON and a chunk is not one JSON value (writeJSON encodes values)`);
          }
        }
        bytes.push(b);
      }
      if (bytes.length === 0) return Promise.resolve([]);
      const p = new Promise<Ack[]>((resolve, reject) => {
        const call: Call = { acks: new Array<Ack>(bytes.length), left: bytes.length, resolve, reject };
        bytes.forEach((b, index) => this.queue.push({ bytes: b, seq: this.seq++, call, index }));
        this.pump();
      });
      // Writes may go unawaited (a token at a time, then commit): their
      // failure is commit's and flush's to report, not a process crash.
      p.catch(() => undefined);
      return p;
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** Writes each value as one JSON chunk, on a JSON stream. */
  writeJSON(...values: unknown[]): Promise<Ack[]> {
    if (!this.json) return Promise.reject(new TypeError(`StreamWriter.writeJSON: stream ${this.path} is ${this.contentType}, not application/json`));
    const texts: string[] = [];
    for (const v of values) {
      const s = JSON.stringify(v);
      if (s === undefined) return Promise.reject(new TypeError('StreamWriter.writeJSON: a value JSON cannot encode'));
      texts.push(s);
    }
    return this.write(...texts);
  }

  /** Resolves once every chunk written so far is acknowledged; rejects with what broke the writer. */
  flush(): Promise<void> {
    if (this.broken !== undefined) return Promise.reject(this.broken);
    if (!this.pumping && this.queue.length === 0) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      this.idle.push(() => (this.broken === undefined ? resolve() : reject(this.broken)));
    });
  }

  /**
   * Commits the attempt after every write: its chunks join the committed
   * view, and chunks of earlier attempts past what this one wrote are
   * aborted. Resolves with done, already (committed before), or empty (this
   * writer never wrote on the stream: nothing to commit).
   */
  async commit(): Promise<'done' | 'already' | 'empty'> {
    this.check();
    await this.flush();
    this.check();
    const r = await this.finish('weir-commit');
    this.finished = 'committed';
    return r;
  }

  /**
   * Aborts the writer for good: none of its chunks, of any attempt, will
   * join the committed view, and it takes no more writes on the stream.
   * Chunks not yet sent are dropped (their writes reject); a request in
   * flight is waited for. Works on a broken writer too.
   */
  async abort(): Promise<'done' | 'already' | 'empty'> {
    if (this.finished) throw new WriterFinishedError(`StreamWriter ${this.writer} attempt ${this.attempt}: this writer ${this.finished}`);
    this.finished = 'aborted';
    const dropped = this.queue;
    this.queue = [];
    const why = new WriterFinishedError(`StreamWriter ${this.writer} attempt ${this.attempt}: aborted before these chunks were sent`);
    for (const p of dropped) p.call.reject(why);
    await new Promise<void>((r) => (this.pumping ? this.idle.push(r) : r()));
    return this.finish('weir-abort');
  }

  private check(): void {
    if (this.broken !== undefined) throw this.broken;
    if (this.finished) {
      throw new WriterFinishedError(`StreamWriter ${this.writer} attempt ${this.attempt}: this writer ${this.finished} (nothing sent)`);
    }
  }

  private async finish(header: 'weir-commit' | 'weir-abort'): Promise<'done' | 'already' | 'empty'> {
    await this.ensure();
    try {
      const r = await this.t.request({
        method: 'POST',
        path: this.url,
        headers: { 'weir-writer': this.writer, 'weir-attempt': String(this.attempt), [header]: 'true' },
        idempotent: true,
      });
      return r.headers.get('weir-result') === 'already' ? 'already' : 'done';
    } catch (err) {
      if (!this.sentAny && (err instanceof UnknownWriterError || err instanceof NotFoundError)) return 'empty';
      throw err;
    }
  }

  private ensure(): Promise<void> {
    if (!this.create) return Promise.resolve();
    this.created ??= this.t
      .request({ method: 'PUT', path: this.url, headers: { 'content-type': this.contentType }, idempotent: true })
      .then(
        () => undefined,
        (err: unknown) => {
          // There with another configuration (a TTL, say): the appends will tell.
          if (err instanceof ConflictError) return;
          this.created = undefined;
          throw err;
        },
      );
    return this.created;
  }

  private pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    void this.loop();
  }

  private async loop(): Promise<void> {
    try {
      while (this.queue.length > 0 && this.broken === undefined) {
        const batch = this.take();
        let acks: Ack[];
        try {
          acks = await this.send(batch);
        } catch (err) {
          this.broken = err;
          for (const p of [...batch, ...this.queue]) p.call.reject(err);
          this.queue = [];
          break;
        }
        batch.forEach((p, i) => {
          const a = acks[i]!;
          this.outcomes[a.outcome]++;
          p.call.acks[p.index] = a;
          if (--p.call.left === 0) p.call.resolve(p.call.acks);
        });
      }
    } finally {
      this.pumping = false;
      const idle = this.idle;
      this.idle = [];
      for (const f of idle) f();
    }
  }

  /** Takes the next batch off the queue: the writes made while the last request was in flight, within the limits. */
  private take(): Pending[] {
    let n = 0;
    let bytes = this.json ? 2 : 0;
    for (const p of this.queue) {
      const add = p.bytes.byteLength + (this.json ? 1 : 4);
      if (n > 0 && (n === this.maxChunks || bytes + add > this.maxBytes)) break;
      n++;
      bytes += add;
    }
    return this.queue.splice(0, n);
  }

  private async send(batch: Pending[]): Promise<Ack[]> {
    await this.ensure();
    const first = batch[0]!.seq;
    const chunks = batch.map((p) => p.bytes);
    const headers: Record<string, string> = {
      'content-type': this.contentType,
      'weir-writer': this.writer,
      'weir-attempt': String(this.attempt),
      'weir-seq': String(first),
    };
    if (!this.json) headers['weir-framing'] = 'u32be';
    this.sentAny = true;
    const r = await this.t.request({
      method: 'POST',
      path: this.url,
      headers,
      body: this.json ? jsonArray(chunks) : frame(chunks),
      idempotent: true, // the same seqs again: acknowledged, never appended twice
    });
    let rep: { acks?: unknown; next_offset?: unknown };
    try {
      rep = r.json();
    } catch {
      throw new ProtocolError(`POST ${this.url}: the append's reply is not JSON`, { status: r.status, method: 'POST' });
    }
    const acks = rep.acks;
    if (!Array.isArray(acks) || acks.length !== batch.length) {
      throw new ProtocolError(`POST ${this.url}: an append of ${batch.length} chunks got ${Array.isArray(acks) ? acks.length : 'no'} acks`, { status: r.status, method: 'POST' });
    }
    if (typeof rep.next_offset === 'string') this.nextOffset = rep.next_offset;
    return acks.map((a: unknown, i): Ack => {
      const { offset, outcome } = (a ?? {}) as { offset?: unknown; outcome?: unknown };
      if (typeof offset !== 'number' || typeof outcome !== 'string' || !OUTCOMES.has(outcome)) {
        throw new ProtocolError(`POST ${this.url}: a malformed ack ${JSON.stringify(a)}`, { status: r.status, method: 'POST' });
      }
      return { seq: first + i, offset, outcome: outcome as Ack['outcome'] };
    });
  }
}

