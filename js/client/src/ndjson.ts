// weir's ndjson records and the two framings they arrive in (an SSE body
// whose data events hold one record a line, a long-poll body of lines),
// parsed by hand from the bytes so that it runs wherever fetch does: no
// EventSource (which cannot send a token, nor resume from our offset).

import { ProtocolError } from './errors.js';

/** Spells weir's record offset n as a Durable Streams offset (`0000000000000000_` and 16 digits): to resume from a record you know. */
export function formatOffset(n: number): string {
  if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`offset ${n}: record offsets are integers >= 0`);
  return '0000000000000000_' + String(n).padStart(16, '0');
}

/** The record offset an offset string stands before, or undefined: offsets of another server are not weir's and compare as nothing. */
export function parseOffset(s: string): number | undefined {
  const m = /^0{16}_(\d{16})$/.exec(s);
  if (!m) return undefined;
  const n = Number(m[1]);
  return Number.isSafeInteger(n) ? n : undefined;
}

/** How a reply carries data: Weir-Data-Encoding. */
export type DataEncoding = 'json' | 'text' | 'base64';

/** One record of format=ndjson, checked and decoded. */
export type WireRecord =
  | { kind: 'data'; offset: number; nextOffset: string; writer: string; attempt: number; seq: number; data: unknown }
  | { kind: 'abort'; offset: number; nextOffset: string; writer: string; attempt: number; from: number }
  | { kind: 'commit'; offset: number; nextOffset: string; writer: string; attempt: number; count: number }
  | { kind: 'close'; offset: number; nextOffset: string }
  /** A resumed run's stream goes on after its close. */
  | { kind: 'reopen'; offset: number; nextOffset: string };

/** The reply's Weir-Data-Encoding; absent is base64, as weir's Go client takes it. */
export function dataEncoding(h: string | null): DataEncoding {
  const e = (h ?? 'base64').trim().toLowerCase();
  if (e === 'json' || e === 'text' || e === 'base64') return e;
  throw new ProtocolError(`Weir-Data-Encoding: ${JSON.stringify(h)}: want json, text or base64`);
}

/** Decodes standard base64 (what Go's encoding/base64.StdEncoding writes). */
export function fromBase64(s: string): Uint8Array {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(s) || s.length % 4 !== 0) throw new Error('not base64');
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

const nonNeg = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** Parses and checks one ndjson line; throws a ProtocolError naming what is wrong. */
export function parseRecord(line: string, enc: DataEncoding): WireRecord {
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    throw new ProtocolError(`a record that is not JSON: ${clip(line)}`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new ProtocolError(`a record that is not a JSON object: ${clip(line)}`);
  const r = v as Record<string, unknown>;
  const bad = (why: string) => new ProtocolError(`a malformed record (${why}): ${clip(line)}`);
  if (!nonNeg(r.offset)) throw bad('offset');
  if (typeof r.next_offset !== 'string' || parseOffset(r.next_offset) !== r.offset + 1) throw bad('next_offset is not the offset after it');
  const base = { offset: r.offset, nextOffset: r.next_offset };
  if (r.kind === 'close') return { kind: 'close', ...base };
  if (r.kind === 'reopen') return { kind: 'reopen', ...base };
  if (typeof r.writer !== 'string' || !nonNeg(r.attempt)) throw bad('writer, attempt');
  const w = { ...base, writer: r.writer, attempt: r.attempt };
  switch (r.kind) {
    case 'data': {
      if (!nonNeg(r.seq) || !('data' in r)) throw bad('seq, data');
      let data: unknown = r.data;
      const e = r.encoding === 'base64' ? 'base64' : enc;
      if (r.encoding !== undefined && r.encoding !== 'base64') throw bad('encoding');
      if (e === 'text' && typeof data !== 'string') throw bad('text data that is not a string');
      if (e === 'base64') {
        if (typeof data !== 'string') throw bad('base64 data that is not a string');
        try {
          data = fromBase64(data);
        } catch {
          throw bad('data that is not base64');
        }
      }
      return { kind: 'data', ...w, seq: r.seq, data };
    }
    case 'abort':
      if (!nonNeg(r.from)) throw bad('from');
      return { kind: 'abort', ...w, from: r.from };
    case 'commit':
      if (!nonNeg(r.count)) throw bad('count');
      return { kind: 'commit', ...w, count: r.count };
  }
  throw bad(`kind ${JSON.stringify(r.kind)}`);
}

function clip(s: string): string {
  return s.length > 200 ? JSON.stringify(s.slice(0, 200)) + '…' : JSON.stringify(s);
}

/**
 * Lines cuts text into lines at CR, LF or CRLF however the text arrives,
 * a CRLF split across two pieces included.
 */
export class Lines {
  private buf = '';
  private skipLF = false;

  /** Pushes text; returns the whole lines it completes. */
  push(text: string): string[] {
    const out: string[] = [];
    let s = text;
    if (this.skipLF && s.startsWith('\n')) s = s.slice(1);
    this.skipLF = false;
    let start = 0;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      out.push(this.buf + s.slice(start, i));
      this.buf = '';
      if (c === 13) {
        if (i + 1 < s.length) {
          if (s.charCodeAt(i + 1) === 10) i++;
        } else this.skipLF = true;
      }
      start = i + 1;
    }
    this.buf += s.slice(start);
    return out;
  }

  /** Bytes of a line begun and not ended (a cut body holds one). */
  get pending(): number {
    return this.buf.length;
  }
}

/** One Server-Sent Event: its type and its data lines. */
export interface SSEEvent {
  event: string;
  data: string[];
}

/**
 * SSE parses text/event-stream (the WHATWG rules weir needs: event, data,
 * comments; id and retry are ignored) into events; each data line is kept
 * apart, since with format=ndjson each is one record.
 */
export class SSE {
  private readonly lines = new Lines();
  private event = '';
  private data: string[] = [];
  private started = false;

  /** Pushes text; returns the events it completes. */
  push(text: string): SSEEvent[] {
    const out: SSEEvent[] = [];
    for (const line of this.lines.push(text)) {
      if (line === '') {
        if (this.started) out.push({ event: this.event || 'message', data: this.data });
        this.event = '';
        this.data = [];
        this.started = false;
        continue;
      }
      if (line.startsWith(':')) continue;
      const i = line.indexOf(':');
      const field = i < 0 ? line : line.slice(0, i);
      let value = i < 0 ? '' : line.slice(i + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') {
        this.event = value;
        this.started = true;
      } else if (field === 'data') {
        this.data.push(value);
        this.started = true;
      }
    }
    return out;
  }

  /** Reports an event begun and not ended: a body cut in the middle of one. */
  get pending(): boolean {
    return this.started || this.lines.pending > 0;
  }
}
