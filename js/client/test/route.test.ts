import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { Client, follow, streamRoute, type FollowEvent, type StreamRouteOptions } from '../src/index.js';
import { startWeir, stores, text, texts, within, type WeirServer } from './helpers.js';

// streamRoute: refusals and forwarding with a fake weir (unit), then a
// real weir server's demo.tokens run (a step that streams, fails midway
// and is retried with other tokens: its records hold an abort) read
// through the route, as it is and decoded, over a real HTTP server.

const ms = 1_000_000; // a Go time.Duration's millisecond
const dec = new TextDecoder();
const b64 = (s: string) => Buffer.from(s).toString('base64');

/** A fake weir: records each request, answers with reply(url). */
function fakeWeir(reply: (url: URL, init: RequestInit) => Response) {
  const calls: { url: URL; headers: Headers; method: string }[] = [];
  const fetch = async (input: RequestInfo | URL, init: RequestInit = {}): Promise<Response> => {
    const url = new URL(String(input));
    calls.push({ url, headers: new Headers(init.headers), method: init.method ?? 'GET' });
    return reply(url, init);
  };
  return { calls, fetch };
}

const route = (o: Partial<StreamRouteOptions> & Pick<StreamRouteOptions, 'fetch'>) =>
  streamRoute({ baseUrl: 'http://weir.test', stream: () => ({ run: 'run-1', name: 'tokens' }), ...o });

const get = (path: string, init: RequestInit = {}) => new Request(`http://app.test${path}`, init);

/** Serves a fetch handler over node:http, writing each body chunk as it comes. */
async function serve(handler: (req: Request) => Promise<Response>): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer(async (req, res) => {
    const ac = new AbortController();
    res.on('close', () => ac.abort());
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers.set(k, v);
    try {
      const r = await handler(new Request(`http://${req.headers.host}${req.url}`, { method: req.method, headers, signal: ac.signal }));
      const h: Record<string, string> = {};
      r.headers.forEach((v, k) => (h[k] = v));
      res.writeHead(r.status, h);
      if (r.body) {
        const reader = r.body.getReader();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          res.write(value);
        }
      }
      res.end();
    } catch {
      res.destroy();
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

describe('streamRoute (unit)', () => {
  test('refusals: methods, query parameters, run ids and names; the app answers with its own Response', async () => {
    const weir = fakeWeir(() => new Response('', { status: 200 }));
    const r = route({ fetch: weir.fetch });
    const post = await r(get('/s', { method: 'POST', body: 'x' }));
    assert.equal(post.status, 405);
    assert.equal(post.headers.get('allow'), 'GET, HEAD');
    for (const [q, want] of [
      ['?path=runs/other/tokens', /query parameter "path": a run's stream takes offset, live, view, cursor and format=ndjson/],
      ['?format=raw', /format="raw": this route serves format=ndjson only/],
      ['?view=all', /view="all": live or committed/],
      ['?live=ws', /live="ws": sse or long-poll/],
      ['?offset=-1&offset=0', /query parameter "offset" given 2 times/],
    ] as const) {
      const res = await r(get('/s' + q));
      assert.equal(res.status, 400, q);
      const body = await res.text();
      assert.match(body, want);
      assert.equal(body.split('\n').length, 2, 'one line');
      assert.equal(res.headers.get('content-type'), 'text/plain; charset=utf-8');
      assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
    }
    for (const [run, name] of [
      ['', 'tokens'],
      ['a/b', 'tokens'],
      ['..', 'tokens'],
      ['run', ''],
      ['run', 'a//b'],
      ['run', '../x'],
      ['run', 'a/./b'],
      ['run\n', 'x'],
    ]) {
      const res = await streamRoute({ baseUrl: 'http://weir.test', fetch: weir.fetch, stream: () => ({ run: run!, name: name! }) })(get('/s'));
      assert.equal(res.status, 400, `${JSON.stringify(run)} ${JSON.stringify(name)}`);
    }
    const forbidden = await streamRoute({ fetch: weir.fetch, stream: () => new Response('not yours', { status: 403 }) })(get('/s'));
    assert.equal(forbidden.status, 403);
    assert.equal(await forbidden.text(), 'not yours');
    assert.equal(weir.calls.length, 0, 'nothing refused reached weir');
    assert.throws(() => streamRoute({} as StreamRouteOptions), /options.stream/);
  });

  test("forwards a reader's request only: the app's token, no cookie; passes weir's stream headers back, no-store", async () => {
    const weir = fakeWeir(
      () =>
        new Response('{"offset":0}\n', {
          status: 200,
          headers: {
            'content-type': 'application/x-ndjson',
            'stream-next-offset': '0000000000000000_0000000000000001',
            'weir-data-encoding': 'base64',
            etag: '"e1"',
            'set-cookie': 'weir=1',
            'cache-control': 'public, max-age=60',
            server: 'weir',
          },
        }),
    );
    const r = streamRoute({ baseUrl: 'http://weir.test/prefix/', token: 'secret', fetch: weir.fetch, stream: () => ({ run: 'wrun_1 2', name: 'a/strm b' }) });
    const res = await r(
      get('/s?offset=0000000000000000_0000000000000001&live=sse&view=committed&cursor=7', {
        headers: { cookie: 'session=1', authorization: 'Bearer browser', accept: 'text/event-stream', origin: 'http://evil.test', 'if-none-match': '"e0"' },
      }),
    );
    assert.equal(res.status, 200);
    assert.equal(await res.text(), '{"offset":0}\n', 'the body as it came');
    const call = weir.calls[0]!;
    assert.equal(call.url.origin + call.url.pathname, 'http://weir.test/prefix/v1/stream/runs/wrun_1%202/a/strm%20b');
    assert.deepEqual(Object.fromEntries(call.url.searchParams), {
      offset: '0000000000000000_0000000000000001',
      live: 'sse',
      view: 'committed',
      cursor: '7',
      format: 'ndjson',
    });
    const sent: Record<string, string> = {};
    call.headers.forEach((v, k) => (sent[k] = v));
    assert.deepEqual(sent, { accept: 'text/event-stream', authorization: 'Bearer secret', 'if-none-match': '"e0"' });
    const got: Record<string, string> = {};
    res.headers.forEach((v, k) => (got[k] = v));
    assert.deepEqual(got, {
      'cache-control': 'private, no-store',
      'content-type': 'application/x-ndjson',
      etag: '"e1"',
      'stream-next-offset': '0000000000000000_0000000000000001',
      'weir-data-encoding': 'base64',
      'x-content-type-options': 'nosniff',
    });

    const head = await r(get('/s', { method: 'HEAD' }));
    assert.equal(head.status, 200);
    assert.equal(head.body, null);
    assert.equal(weir.calls[1]!.method, 'HEAD');

    const down = await streamRoute({ fetch: () => Promise.reject(new TypeError('fetch failed')), stream: () => ({ run: 'r', name: 'n' }) })(get('/s'));
    assert.equal(down.status, 502);
    assert.match(await down.text(), /weir server unreachable: fetch failed/);
  });

  const records = [
    { offset: 0, next_offset: '0000000000000000_0000000000000001', kind: 'data', writer: 'step/1', attempt: 1, seq: 0, data: b64('Hel') },
    { offset: 1, next_offset: '0000000000000000_0000000000000002', kind: 'data', writer: 'step/1', attempt: 1, seq: 1, data: b64('lo') },
    { offset: 2, next_offset: '0000000000000000_0000000000000003', kind: 'abort', writer: 'step/1', attempt: 2, from: 0 },
    { offset: 3, next_offset: '0000000000000000_0000000000000004', kind: 'data', writer: 'step/1', attempt: 2, seq: 0, data: b64('Hi'), encoding: 'base64' },
    { offset: 4, next_offset: '0000000000000000_0000000000000005', kind: 'commit', writer: 'step/1', attempt: 2, count: 1 },
    { offset: 5, next_offset: '0000000000000000_0000000000000006', kind: 'close' },
  ];
  const lines = records.map((r) => JSON.stringify(r));
  const decoded = (d: string) => ({ text: d.toUpperCase() });
  const want = records.map((r) => {
    if (r.kind !== 'data') return r;
    const { encoding: _e, ...rest } = r;
    return { ...rest, data: decoded(Buffer.from(String(r.data), 'base64').toString()) };
  });
  const upper = (b: Uint8Array) => decoded(dec.decode(b));

  test('decode: each data record of an ndjson reply decoded, every other record and field as it came', async () => {
    const weir = fakeWeir(() => new Response(lines.join('\n') + '\n', { status: 200, headers: { 'content-type': 'application/x-ndjson', 'weir-data-encoding': 'base64', etag: '"x"' } }));
    const res = await route({ fetch: weir.fetch, decode: upper })(get('/s?offset=-1'));
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('weir-data-encoding'), 'json');
    assert.equal(res.headers.get('etag'), null, "weir's ETag does not name the decoded body");
    const body = await res.text();
    assert.deepEqual(body.trimEnd().split('\n').map((l) => JSON.parse(l)), want);
    assert.deepEqual(body.split('\n')[2], lines[2], 'an abort passes byte for byte');
    // Text and JSON streams: the bytes are the text, or the JSON as weir sent it.
    const seen: string[] = [];
    const keep = (b: Uint8Array) => (seen.push(dec.decode(b)), 1);
    for (const [enc, data] of [
      ['text', 'héllo'],
      ['json', { a: [1, 'x'] }],
    ] as const) {
      const rec = JSON.stringify({ ...records[0], data });
      const w = fakeWeir(() => new Response(rec + '\n', { status: 200, headers: { 'content-type': 'application/x-ndjson', 'weir-data-encoding': enc } }));
      await (await route({ fetch: w.fetch, decode: keep })(get('/s'))).text();
    }
    assert.deepEqual(seen, ['héllo', '{"a":[1,"x"]}']);
  });

  test('decode: an SSE reply decoded event by event; control events and keep-alive comments as they came', async () => {
    const sse =
      `event: data\ndata:${lines[0]}\ndata:${lines[1]}\n\n` +
      `event: control\ndata:{"streamNextOffset":"0000000000000000_0000000000000002","streamCursor":"1"}\n\n` +
      `:\n\n` +
      `event: data\ndata:${lines[2]}\ndata:${lines[3]}\n\n` +
      `event: data\ndata:${lines[4]}\ndata:${lines[5]}\n\n` +
      `event: control\ndata:{"streamNextOffset":"0000000000000000_0000000000000006","streamClosed":true}\n\n`;
    // Cut at awkward places: events and lines arrive in pieces.
    const bytes = new TextEncoder().encode(sse);
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        for (let i = 0; i < bytes.length; i += 7) c.enqueue(bytes.subarray(i, i + 7));
        c.close();
      },
    });
    const weir = fakeWeir(() => new Response(body, { status: 200, headers: { 'content-type': 'text/event-stream', 'weir-data-encoding': 'base64' } }));
    const res = await route({ fetch: weir.fetch, decode: upper })(get('/s?live=sse'));
    assert.equal(res.headers.get('content-type'), 'text/event-stream');
    assert.equal(res.headers.get('weir-data-encoding'), 'json');
    const pieces: string[] = [];
    const reader = res.body!.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      pieces.push(dec.decode(value));
    }
    assert.deepEqual(pieces, [
      `event: data\ndata:${JSON.stringify(want[0])}\ndata:${JSON.stringify(want[1])}\n\n`,
      `event: control\ndata:{"streamNextOffset":"0000000000000000_0000000000000002","streamCursor":"1"}\n\n`,
      `:\n\n`,
      `event: data\ndata:${lines[2]}\ndata:${JSON.stringify(want[3])}\n\n`,
      `event: data\ndata:${lines[4]}\ndata:${lines[5]}\n\n`,
      `event: control\ndata:{"streamNextOffset":"0000000000000000_0000000000000006","streamClosed":true}\n\n`,
    ]);
    // And follow reads it: the rewind applied to decoded chunks.
    const again = fakeWeir(() => new Response(sse, { status: 200, headers: { 'content-type': 'text/event-stream', 'weir-data-encoding': 'base64' } }));
    const r = route({ fetch: again.fetch, decode: upper });
    const f = follow({ url: 'http://app.test/s', fetch: (input, init) => r(new Request(String(input), init)) });
    const final = await within(f.done, 'the follower to end');
    assert.deepEqual(final.chunks.map((c) => c.data), [{ text: 'HI' }]);
  });

  test('decode: a record that cannot be decoded ends the reply with an error naming it, never a wrong record', async () => {
    const boom = (b: Uint8Array) => {
      if (dec.decode(b) === 'lo') throw new Error('not a frame');
      return dec.decode(b);
    };
    const nd = fakeWeir(() => new Response(lines.join('\n') + '\n', { status: 200, headers: { 'content-type': 'application/x-ndjson' } }));
    const res = await route({ fetch: nd.fetch, decode: boom })(get('/s'));
    assert.equal(res.status, 500);
    assert.equal(
      await res.text(),
      'streamRoute: the data record at offset 1 (writer "step/1", attempt 1, seq 1) could not be decoded: not a frame\n',
    );
    const sse = `event: data\ndata:${lines[0]}\ndata:${lines[1]}\ndata:${lines[2]}\n\nevent: control\ndata:{"streamNextOffset":"0000000000000000_0000000000000003"}\n\n`;
    const s = fakeWeir(() => new Response(sse, { status: 200, headers: { 'content-type': 'text/event-stream' } }));
    const out = await (await route({ fetch: s.fetch, decode: boom })(get('/s?live=sse'))).text();
    assert.equal(
      out,
      `event: data\ndata:${JSON.stringify({ ...records[0], data: 'Hel' })}\n\n` +
        `event: error\ndata:${JSON.stringify({ error: 'streamRoute: the data record at offset 1 (writer "step/1", attempt 1, seq 1) could not be decoded: not a frame' })}\n\n`,
    );
    for (const bad of [() => undefined, () => () => 1, () => 10n]) {
      const w = fakeWeir(() => new Response(lines[0] + '\n', { status: 200, headers: { 'content-type': 'application/x-ndjson' } }));
      const r = await route({ fetch: w.fetch, decode: bad })(get('/s'));
      assert.equal(r.status, 500);
      assert.match(await r.text(), /offset 0 .*(not a JSON value|JSON cannot hold)/);
    }
    // Error replies and 204s pass as they came, decode or not.
    const nf = fakeWeir(() => new Response('no such stream\n', { status: 404, headers: { 'content-type': 'text/plain', 'weir-error': 'not_found' } }));
    const r404 = await route({ fetch: nf.fetch, decode: boom })(get('/s'));
    assert.equal(r404.status, 404);
    assert.equal(r404.headers.get('weir-error'), 'not_found');
    assert.equal(r404.headers.get('weir-data-encoding'), null);
    assert.equal(await r404.text(), 'no such stream\n');
  });
});

for (const { name, store } of stores()) {
  describe(`streamRoute against weir server (${name})`, () => {
    let weir: WeirServer;
    let c: Client;
    let app: { url: string; close(): Promise<void> };
    let run = '';
    let decodeMode: 'none' | 'upper' | 'fail' = 'none';
    before(async () => {
      weir = await startWeir(store());
      c = new Client({ baseUrl: weir.url });
      // One app, three routes: as it is, decoded, and a decode that fails on " x".
      const plain = streamRoute({ baseUrl: weir.url, stream: () => ({ run, name: 'tokens' }) });
      const upper = streamRoute({ baseUrl: weir.url, stream: () => ({ run, name: 'tokens' }), decode: (b) => ({ token: dec.decode(b).toUpperCase() }) });
      const fail = streamRoute({
        baseUrl: weir.url,
        stream: () => ({ run, name: 'tokens' }),
        decode: (b) => {
          if (dec.decode(b) === ' x') throw new Error('cannot read " x"');
          return dec.decode(b);
        },
      });
      app = await serve((req) => (decodeMode === 'none' ? plain : decodeMode === 'upper' ? upper : fail)(req));
    });
    after(async () => {
      await app?.close();
      await weir?.stop();
    });

    /** demo.tokens: attempt 1 streams "a", " b" and fails; attempt 2 streams "a" (adopted), " x" (an abort from seq 1), " y". */
    const startRun = async (delay = 0) => {
      const started = await c.start('demo.tokens', { text: 'a b c d', retry_text: 'a x y', fail_after: 2, delay: delay * ms });
      run = started.run.id;
      return run;
    };

    test("a run's records through the route: byte for byte weir's, abort included", async () => {
      const id = await startRun();
      assert.equal((await c.wait(id, { timeoutMs: 10_000 })).status, 'completed');
      decodeMode = 'none';
      for (const view of ['live', 'committed']) {
        const direct = await fetch(`${weir.url}/v1/stream/runs/${id}/tokens?offset=-1&view=${view}&format=ndjson`);
        const routed = await fetch(`${app.url}/chat/stream?offset=-1&view=${view}`, { headers: { cookie: 'session=1' } });
        assert.equal(routed.status, 200);
        const body = await routed.text();
        assert.equal(body, await direct.text(), view);
        assert.equal(routed.headers.get('stream-next-offset'), direct.headers.get('stream-next-offset'));
        assert.equal(routed.headers.get('content-type'), direct.headers.get('content-type'));
        assert.equal(routed.headers.get('cache-control'), 'private, no-store');
        assert.equal(routed.headers.get('x-content-type-options'), 'nosniff');
        const kinds = body.trimEnd().split('\n').map((l) => (JSON.parse(l) as { kind: string }).kind);
        if (view === 'live') assert.deepEqual(kinds, ['data', 'data', 'abort', 'data', 'data', 'commit', 'close']);
      }
      const refused = await fetch(`${app.url}/chat/stream?path=runs/other/tokens`);
      assert.equal(refused.status, 400);
    });

    test('SSE live through the route: tokens as they come, the rewind applied, the committed result at the close', async () => {
      decodeMode = 'none';
      const id = await startRun(80);
      const events: { at: number; ev: FollowEvent }[] = [];
      const f = follow({ url: `${app.url}/chat/stream`, waitForStreamMs: 10_000, onEvent: (ev) => events.push({ at: Date.now(), ev }) });
      const final = await within(f.done, 'the run stream to close through the route', 20_000);
      assert.deepEqual(texts(final), ['a', ' x', ' y']);
      const rewinds = events.filter((e) => e.ev.type === 'rewind');
      assert.equal(rewinds.length, 1);
      const rw = rewinds[0]!.ev as Extract<FollowEvent, { type: 'rewind' }>;
      assert.equal(rw.fromSeq, 1);
      assert.deepEqual(rw.removed.map(text), [' b']);
      assert.ok(!events.some((e) => e.ev.type === 'reconnect'), 'SSE held, no reconnect');
      // Flushed event by event: the first token came well before the close
      // (a route that buffered the reply would hand over all at once).
      const first = events.find((e) => e.ev.type === 'append')!;
      const closed = events.find((e) => e.ev.type === 'close')!;
      assert.ok(closed.at - first.at >= 150, `first token at ${first.at}, close at ${closed.at}`);
      assert.equal((await c.wait(id, { timeoutMs: 10_000 })).status, 'completed');
    });

    test('decode applied: JSON values in every record, the rewind applied to them, live and committed', async () => {
      decodeMode = 'upper';
      const id = await startRun(20);
      const rewinds: unknown[][] = [];
      const f = follow({
        url: `${app.url}/chat/stream`,
        waitForStreamMs: 10_000,
        onEvent: (ev) => {
          if (ev.type === 'rewind') rewinds.push(ev.removed.map((ch) => ch.data));
        },
      });
      const final = await within(f.done, 'the decoded stream to close', 20_000);
      assert.deepEqual(final.chunks.map((ch) => ch.data), [{ token: 'A' }, { token: ' X' }, { token: ' Y' }]);
      assert.deepEqual(rewinds, [[{ token: ' B' }]]);
      const committed = await within(follow({ url: `${app.url}/chat/stream`, view: 'committed' }).done, 'the committed view');
      assert.deepEqual(committed.chunks.map((ch) => ch.data), [{ token: 'A' }, { token: ' X' }, { token: ' Y' }]);
      const lp = await fetch(`${app.url}/chat/stream?offset=-1&view=live&live=long-poll`);
      assert.equal(lp.headers.get('weir-data-encoding'), 'json');
      assert.match(await lp.text(), /"data":\{"token":"A"\}/);
      assert.equal((await c.wait(id, { timeoutMs: 10_000 })).status, 'completed');
    });

    test('a decode that throws: the follower fails with the record named, having shown only what was decoded', async () => {
      decodeMode = 'fail';
      const id = await startRun();
      assert.equal((await c.wait(id, { timeoutMs: 10_000 })).status, 'completed');
      const f = follow({ url: `${app.url}/chat/stream`, maxReconnects: 1 });
      await assert.rejects(within(f.done, 'the follower to fail'), /the data record at offset 3 \(writer "step\/1", attempt 2, seq 1\) could not be decoded: cannot read " x"/);
      assert.deepEqual(texts(f.snapshot()), ['a'], 'what came before it, rewind applied');
      const nd = await fetch(`${app.url}/chat/stream?offset=-1`);
      assert.equal(nd.status, 500);
      assert.match(await nd.text(), /offset 3 .* cannot read " x"/);
    });
  });
}
