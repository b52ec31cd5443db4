// streamRoute: one run's stream served at an app's own route, the
// Node/Next.js/edge twin of Go's runstream.Handler. A browser follows the
// route with follow() or WeirChat and gets weir's records intact (data,
// abort, commit, close: what it needs to apply rewinds), under the app's own
// authorization, with no weir token in the page. Web-standard only (Request,
// Response, fetch, streams), so it runs as a Next.js App Router GET handler,
// in Hono, or in any fetch server.
//
// With decode, each data record's bytes are turned into a JSON value on the
// way (a Vercel Workflow run's frames, which a browser cannot read), and
// every other record is passed on as it is.

import { ProtocolError } from './errors.js';
import { DEFAULT_URL, env, fetchOf, type Fetch } from './http.js';
import { Lines, dataEncoding, parseRecord, type DataEncoding } from './ndjson.js';

/** The run stream a request reads: the run's id and the stream's name. */
export interface RunStreamChoice {
  run: string;
  name: string;
}

/** How to serve a run's stream. */
export interface StreamRouteOptions {
  /** weir server's URL. Default $WEIR_URL where there is a process environment, else http://127.0.0.1:4437. */
  baseUrl?: string;
  /** Sent to weir as Authorization: Bearer; never to the browser. Default $WEIR_TOKEN where there is a process environment. */
  token?: string;
  /** A fetch to reach weir with instead of the global one. */
  fetch?: Fetch;
  /**
   * Picks the run stream a request reads, after the app's own checks of
   * who may read it (never a path the browser names). A Response answers
   * the request instead (a 403, a 404, a redirect to sign in).
   */
  stream: (req: Request) => RunStreamChoice | Response | Promise<RunStreamChoice | Response>;
  /**
   * Turns a data record's bytes into the JSON value the reader gets as its
   * `data` (the reply then says Weir-Data-Encoding: json). The bytes are
   * the chunk as written for a binary stream, the UTF-8 of the text for a
   * text stream, and the record's JSON text for a JSON stream. A decode
   * that throws (or returns what JSON cannot hold) ends the reply with an
   * error naming the record: never a record with other data. Without
   * decode the reply's body passes through untouched.
   */
  decode?: (bytes: Uint8Array) => unknown | Promise<unknown>;
}

/** The query parameters a reader sends: anything else is refused, so a page cannot make the route more than a read of records. */
const READ_PARAMS = new Set(['offset', 'live', 'view', 'cursor', 'format']);

/** The reply headers a reader of a stream uses; the rest (cookies among them) stay here. */
function keepHeader(name: string, decoding: boolean): boolean {
  const k = name.toLowerCase();
  if (k.startsWith('stream-') || k.startsWith('weir-')) return true;
  switch (k) {
    case 'content-type':
    case 'retry-after':
    case 'allow':
    case 'x-accel-buffering': // a proxy in front of the app must not buffer SSE either
      return true;
    case 'etag':
      // With decode the body is not weir's bytes: weir's ETag does not name it.
      return !decoding;
  }
  return false;
}

const utf8 = new TextEncoder();

/**
 * Returns a handler that serves the run stream opts.stream picks, read from
 * weir server: `export const GET = streamRoute({...})` in a Next.js route,
 * `app.get('/chat/:run/stream', (c) => route(c.req.raw))` in Hono.
 *
 * It answers GET and HEAD (405 otherwise); takes the query parameters a
 * reader sends (offset, live=sse|long-poll, view=live|committed, cursor,
 * format=ndjson) and refuses any other with a one-line 400; checks the
 * run id (one path segment) and the name (segments neither empty, . nor
 * ..); forwards nothing of the browser's but Accept (and If-None-Match
 * without decode): no cookie, no credential; and answers weir's status,
 * Content-Type, Stream-* and Weir-* headers with Cache-Control: private,
 * no-store and X-Content-Type-Options: nosniff, the body streamed as it
 * comes (SSE event by event).
 */
export function streamRoute(opts: StreamRouteOptions): (req: Request) => Promise<Response> {
  if (typeof opts?.stream !== 'function') throw new TypeError('streamRoute: options.stream, a function that picks the run stream, is required');
  const decode = opts.decode;
  if (decode !== undefined && typeof decode !== 'function') throw new TypeError('streamRoute: options.decode must be a function');
  const base = baseUrlOf(opts.baseUrl ?? env('WEIR_URL') ?? DEFAULT_URL);
  const token = opts.token ?? env('WEIR_TOKEN');
  const fetchFn = fetchOf(opts.fetch);

  return async (req: Request): Promise<Response> => {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      return refuse(405, `${req.method}: a run's stream is read here, with GET`, { allow: 'GET, HEAD' });
    }
    let query: URLSearchParams;
    try {
      query = readQuery(new URL(req.url).searchParams);
    } catch (err) {
      return refuse(400, messageOf(err));
    }
    const choice = await opts.stream(req);
    if (choice instanceof Response) return choice;
    let path: string;
    try {
      path = runStreamPath(choice.run, choice.name);
    } catch (err) {
      return refuse(400, messageOf(err));
    }
    // A new request, not the browser's: its cookies, credentials and
    // Origin stay here; weir sees a reader with the app's token.
    const headers: Record<string, string> = {};
    const accept = req.headers.get('accept');
    if (accept) headers['accept'] = accept;
    const inm = req.headers.get('if-none-match');
    if (inm && !decode) headers['if-none-match'] = inm;
    if (token) headers['authorization'] = `Bearer ${token}`;
    const url = `${base}/v1/stream/${path}?${query.toString()}`;
    let up: Response;
    try {
      up = await fetchFn(url, { method: req.method, headers, signal: req.signal });
    } catch (err) {
      // The reader left (nobody reads this), or weir is down.
      return refuse(502, `weir server unreachable: ${messageOf(err)}`);
    }

    const ct = mediaType(up.headers.get('content-type'));
    // Only a reply of records is decoded: an error reply, a 204 (a
    // long-poll that timed out) and the like pass as they came.
    const decoding = decode !== undefined && up.status === 200 && (ct === 'text/event-stream' || ct === 'application/x-ndjson');
    const out = new Headers();
    up.headers.forEach((v, k) => {
      if (keepHeader(k, decoding)) out.set(k, v);
    });
    if (decoding) out.set('weir-data-encoding', 'json');
    out.set('cache-control', 'private, no-store');
    out.set('x-content-type-options', 'nosniff');

    if (!decoding || decode === undefined || req.method === 'HEAD') {
      const nullBody = req.method === 'HEAD' || up.status === 204 || up.status === 205 || up.status === 304;
      if (nullBody) void up.body?.cancel().catch(() => undefined);
      return new Response(nullBody ? null : up.body, { status: up.status, statusText: up.statusText, headers: out });
    }
    let enc: DataEncoding;
    try {
      enc = dataEncoding(up.headers.get('weir-data-encoding'));
    } catch (err) {
      void up.body?.cancel().catch(() => undefined);
      return refuse(502, `streamRoute: weir's reply: ${messageOf(err)}`);
    }
    if (ct === 'text/event-stream') {
      return new Response(up.body ? decodeSSE(up.body, enc, decode) : null, { status: 200, headers: out });
    }
    // A catch-up or long-poll reply is one page of records, which weir
    // bounds: it is decoded whole, so a record that cannot be decoded makes
    // a clean error reply rather than a body cut short.
    let text: string;
    try {
      text = await up.text();
    } catch (err) {
      return refuse(502, `weir server: the reply was cut: ${messageOf(err)}`);
    }
    const lines: string[] = [];
    try {
      for (const line of text.split('\n')) {
        const l = line.endsWith('\r') ? line.slice(0, -1) : line;
        if (l !== '') lines.push(await decodeRecord(l, enc, decode));
      }
    } catch (err) {
      return refuse(500, messageOf(err));
    }
    return new Response(lines.length > 0 ? lines.join('\n') + '\n' : '', { status: 200, headers: out });
  };
}

/**
 * Returns the stream path of a run's stream, `runs/<run>/<name>`, each
 * segment escaped: a run id is one path segment, a name one or more, none
 * empty, "." or "..", and neither has control characters. It is how the
 * app's choice is checked, so that no value reaches another stream.
 */
export function runStreamPath(run: string, name: string): string {
  if (typeof run !== 'string' || run === '' || run.includes('/') || run === '.' || run === '..') {
    throw new TypeError(`run id ${clip(run)}: one path segment, not empty, "." or ".."`);
  }
  if (typeof name !== 'string' || name === '') throw new TypeError('empty stream name');
  const segs = name.split('/');
  if (segs.some((s) => s === '' || s === '.' || s === '..')) throw new TypeError(`stream name ${clip(name)} has an empty, . or .. segment`);
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(run + name)) throw new TypeError('control character in a run id or stream name');
  return `runs/${encodeURIComponent(run)}/${segs.map(encodeURIComponent).join('/')}`;
}

/** Checks a reader's query and returns the one forwarded, format=ndjson always (raw bytes would lose the records a reader needs). */
function readQuery(inq: URLSearchParams): URLSearchParams {
  const out = new URLSearchParams();
  const keys = new Set<string>();
  inq.forEach((_v, k) => keys.add(k)); // lib DOM without DOM.Iterable: no keys()
  for (const k of keys) {
    if (!READ_PARAMS.has(k)) throw new TypeError(`query parameter ${clip(k)}: a run's stream takes offset, live, view, cursor and format=ndjson`);
    const vs = inq.getAll(k);
    if (vs.length !== 1) throw new TypeError(`query parameter ${clip(k)} given ${vs.length} times`);
    const v = vs[0]!;
    if (k === 'format' && v !== 'ndjson') throw new TypeError(`format=${clip(v)}: this route serves format=ndjson only (the records a reader needs to apply rewinds)`);
    if (k === 'view' && v !== 'live' && v !== 'committed') throw new TypeError(`view=${clip(v)}: live or committed`);
    if (k === 'live' && v !== 'sse' && v !== 'long-poll') throw new TypeError(`live=${clip(v)}: sse or long-poll`);
    if (k !== 'format') out.set(k, v);
  }
  out.set('format', 'ndjson');
  return out;
}

/**
 * Decodes one ndjson line: a data record's data becomes decode(bytes),
 * its encoding field goes (the data is JSON now), every other field stays;
 * any other record is returned as it came.
 */
async function decodeRecord(line: string, enc: DataEncoding, decode: (bytes: Uint8Array) => unknown): Promise<string> {
  let rec;
  try {
    rec = parseRecord(line, enc);
  } catch (err) {
    throw new ProtocolError(`streamRoute: weir's reply: ${messageOf(err)}`);
  }
  if (rec.kind !== 'data') return line;
  // parseRecord accepted the line: it is a JSON object.
  const raw = JSON.parse(line) as Record<string, unknown>;
  const where = `the data record at offset ${rec.offset} (writer ${JSON.stringify(rec.writer)}, attempt ${rec.attempt}, seq ${rec.seq})`;
  let bytes: Uint8Array;
  if (rec.data instanceof Uint8Array) bytes = rec.data; // base64: a binary stream's (a World run's) data, or bytes a text or JSON stream could not carry
  else if (typeof rec.data === 'string' && enc === 'text') bytes = utf8.encode(rec.data);
  else bytes = utf8.encode(JSON.stringify(rec.data)); // a JSON stream's value, as weir compacted it
  let value: unknown;
  try {
    value = await decode(bytes);
  } catch (err) {
    throw new Error(`streamRoute: ${where} could not be decoded: ${messageOf(err)}`);
  }
  // JSON.stringify would drop the field, and the reader would fail on a
  // record without data, far from the cause.
  if (value === undefined || typeof value === 'function' || typeof value === 'symbol') {
    throw new Error(`streamRoute: ${where}: decode returned ${value === undefined ? 'undefined' : `a ${typeof value}`}, not a JSON value`);
  }
  const out: Record<string, unknown> = { ...raw, data: value }; // data keeps its place among the fields
  delete out.encoding;
  try {
    return JSON.stringify(out);
  } catch (err) {
    throw new Error(`streamRoute: ${where}: decode returned what JSON cannot hold: ${messageOf(err)}`);
  }
}

/**
 * Decodes an SSE body of weir (format=ndjson) event by event: a data
 * event's records through decodeRecord, control events and comments (the
 * keep-alives a reader's idle timeout counts on) as they came. A record that
 * cannot be decoded ends the reply: the records before it in its event,
 * then an error event with a JSON message, as weir ends a read it cannot
 * go on with.
 */
function decodeSSE(body: ReadableStream<Uint8Array>, enc: DataEncoding, decode: (bytes: Uint8Array) => unknown): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  const text = new TextDecoder();
  const lines = new Lines();
  let event = '';
  let data: string[] = [];
  let started = false;
  let comment = false;
  let ended = false;
  const end = () => {
    ended = true;
    reader.cancel().catch(() => undefined);
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      while (!ended) {
        let r: ReadableStreamReadResult<Uint8Array>;
        try {
          r = await reader.read();
        } catch (err) {
          ended = true;
          controller.error(err); // weir's connection dropped: so does the reader's, which resumes
          return;
        }
        if (r.done) {
          // An event cut in the middle is not passed on: the reader resumes
          // after the last whole event it got.
          ended = true;
          controller.close();
          return;
        }
        let sent = false;
        for (const line of lines.push(text.decode(r.value, { stream: true }))) {
          if (line !== '') {
            if (line.startsWith(':')) comment = true;
            else {
              const i = line.indexOf(':');
              const field = i < 0 ? line : line.slice(0, i);
              let value = i < 0 ? '' : line.slice(i + 1);
              if (value.startsWith(' ')) value = value.slice(1);
              if (field === 'event') event = value;
              else if (field === 'data') data.push(value);
              else continue; // id, retry: weir sends none
              started = true;
            }
            continue;
          }
          const ev = { event, data };
          const wasComment = comment && !started;
          const wasEvent = started;
          event = '';
          data = [];
          started = false;
          comment = false;
          if (wasComment) {
            controller.enqueue(utf8.encode(':\n\n'));
            sent = true;
            continue;
          }
          if (!wasEvent) continue;
          if (ev.event !== 'data') {
            controller.enqueue(utf8.encode(sseEvent(ev.event, ev.data)));
            sent = true;
            if (ev.event === 'error') {
              end();
              controller.close();
              return;
            }
            continue;
          }
          const decoded: string[] = [];
          let failure: string | undefined;
          for (const l of ev.data) {
            if (l === '') continue;
            try {
              decoded.push(await decodeRecord(l, enc, decode));
            } catch (err) {
              failure = messageOf(err);
              break;
            }
          }
          if (decoded.length > 0) controller.enqueue(utf8.encode(sseEvent('data', decoded)));
          sent = true;
          if (failure !== undefined) {
            controller.enqueue(utf8.encode(sseEvent('error', [JSON.stringify({ error: failure })])));
            end();
            controller.close();
            return;
          }
        }
        if (sent) return;
      }
    },
    cancel(reason) {
      ended = true;
      return reader.cancel(reason);
    },
  });
}

/** One SSE event; no line of data holds CR or LF (JSON text never does), so none can forge an event. */
function sseEvent(event: string, data: string[]): string {
  return (event ? `event: ${event}\n` : '') + data.map((d) => `data:${d}\n`).join('') + '\n';
}

/** A one-line plain-text refusal. */
function refuse(status: number, msg: string, extra: Record<string, string> = {}): Response {
  return new Response(msg.replace(/[\r\n]+/g, ' ') + '\n', {
    status,
    headers: {
      'content-type': 'text/plain; charset=utf-8',
      'x-content-type-options': 'nosniff',
      'cache-control': 'private, no-store',
      ...extra,
    },
  });
}

function baseUrlOf(base: string): string {
  let u: URL;
  try {
    u = new URL(base);
  } catch {
    throw new TypeError(`streamRoute: base URL ${JSON.stringify(base)}: want http(s)://host[:port][/prefix]`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new TypeError(`streamRoute: base URL ${base}: want http or https`);
  if (u.search || u.hash) throw new TypeError(`streamRoute: base URL ${base}: no query or fragment, please`);
  return base.replace(/\/+$/, '');
}

function mediaType(ct: string | null): string {
  return (ct ?? '').split(';', 1)[0]!.trim().toLowerCase();
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function clip(v: unknown): string {
  const s = String(v);
  return JSON.stringify(s.length > 64 ? s.slice(0, 64) + '…' : s);
}
