import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import {
  BadRequestError,
  Client,
  InternalError,
  NotFoundError,
  ProtocolError,
  WeirConnectionError,
  WeirError,
  follow,
  formatOffset,
  type FollowEvent,
  type Follower,
} from '../src/index.js';
import { startWeir, texts, uniquePath, until, within, type WeirServer } from './helpers.js';

// What a follower does with replies that are not weir's: a tiny app server
// stands for a route in the way (HTML, a malformed line, records of another
// stream, silence, an SSE-less proxy), and a real weir server for the rest.

const rec = (offset: number, data: string) =>
  JSON.stringify({ offset, next_offset: formatOffset(offset + 1), kind: 'data', writer: '', attempt: 0, seq: 0, data });

function sse(res: ServerResponse, events: [string, string[]][], end = true): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'weir-data-encoding': 'text' });
  for (const [event, lines] of events) res.write(`event: ${event}\n${lines.map((l) => `data:${l}\n`).join('')}\n`);
  if (end) res.end();
}

const ghost = (offset: number, kind: string, rest: string) =>
  `{"offset":${offset},"next_offset":"${formatOffset(offset + 1)}","kind":"${kind}","writer":"ghost","attempt":3,${rest}}`;

const control = (next: number) => JSON.stringify({ streamNextOffset: formatOffset(next), upToDate: true });

/** Fails unless f fails with a WeirError of cls; returns it. */
async function failsWith<T extends WeirError>(f: Follower, cls: abstract new (...a: never[]) => T, what: string): Promise<T> {
  const err = await within(
    f.done.then(
      () => assert.fail(`${what}: the follower ended without an error`),
      (e: unknown) => e,
    ),
    what,
  );
  assert.ok(err instanceof cls, `${what}: ${String(err)}`);
  return err;
}

describe('follow: bad input', () => {
  let weir: WeirServer;
  let app: Server;
  let appUrl = '';
  let sseAsked = 0;
  before(async () => {
    weir = await startWeir();
    app = createServer((req: IncomingMessage, res: ServerResponse) => {
      const u = new URL(req.url!, 'http://app');
      const offset = u.searchParams.get('offset');
      switch (u.pathname) {
        case '/html':
          res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><p>Not a stream</p>');
          return;
        case '/malformed':
          sse(res, [
            ['data', [rec(0, 'a'), rec(1, 'b')]],
            ['control', [control(2)]],
            ['data', ['{"offset":2,"next_offset":']],
          ]);
          return;
        case '/skip':
        case '/backwards':
          if (offset === '-1') sse(res, [['data', [rec(0, 'a'), rec(1, 'b')]], ['control', [control(2)]]]);
          else sse(res, [['data', [u.pathname === '/skip' ? rec(7, 'x') : rec(0, 'a')]]]);
          return;
        case '/ghost':
          // An abort and a commit of a writer this follower never saw data
          // of (it started after it): nothing to remove, nothing wrong.
          sse(res, [
            ['data', [rec(0, 'a'), ghost(1, 'abort', '"from":0'), ghost(2, 'commit', '"count":0'), JSON.stringify({ offset: 3, next_offset: formatOffset(4), kind: 'close' })]],
            ['control', [JSON.stringify({ streamNextOffset: formatOffset(4), upToDate: true, streamClosed: true })]],
          ]);
          return;
        case '/resumed': {
          // A resumed run's stream: a step's attempt open at the failure,
          // the close (which voids it), a reopen, the new attempt's chunk;
          // the server says closed only once the second close is read.
          const mark = (o: number, kind: string) => JSON.stringify({ offset: o, next_offset: formatOffset(o + 1), kind });
          if (offset === '-1') {
            sse(res, [
              ['data', [ghost(0, 'data', '"seq":0,"data":"bad"'), mark(1, 'close'), mark(2, 'reopen'), rec(3, 'good')]],
              ['control', [JSON.stringify({ streamNextOffset: formatOffset(4), upToDate: true })]],
            ]);
          } else {
            sse(res, [['data', [mark(4, 'close')]], ['control', [JSON.stringify({ streamNextOffset: formatOffset(5), upToDate: true, streamClosed: true })]]]);
          }
          return;
        }
        case '/silent':
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.flushHeaders();
          return; // and never a byte more
        case '/fail':
          res.writeHead(500, { 'content-type': 'text/plain' }).end('the app broke');
          return;
        case '/lp': {
          // An app route that proxies weir but cannot stream SSE: it asks
          // for long-poll instead, and answers what weir answered.
          if (u.searchParams.get('live') === 'sse') sseAsked++;
          u.searchParams.set('live', 'long-poll');
          void fetch(`${weir.url}/v1/stream/${u.searchParams.get('path')}?${u.searchParams}`).then(async (r) => {
            const h: Record<string, string> = {};
            r.headers.forEach((v, k) => {
              if (k === 'content-type' || k.startsWith('stream-') || k.startsWith('weir-')) h[k] = v;
            });
            res.writeHead(r.status, h).end(Buffer.from(await r.arrayBuffer()));
          });
          return;
        }
      }
      res.writeHead(404).end();
    });
    await new Promise<void>((r) => app.listen(0, '127.0.0.1', () => r()));
    appUrl = `http://127.0.0.1:${(app.address() as AddressInfo).port}`;
  });
  after(async () => {
    app?.closeAllConnections();
    await new Promise((r) => app?.close(r));
    await weir?.stop();
  });

  test('a route that answers HTML: a clear ProtocolError', async () => {
    const f = follow({ url: `${appUrl}/html` });
    const err = await failsWith(f, ProtocolError, 'HTML');
    assert.match(err.message, /"text\/html".*not text\/event-stream or application\/x-ndjson/);
    assert.deepEqual(f.snapshot().chunks, []);
  });

  test('a malformed record: a ProtocolError, and the snapshot keeps what it had', async () => {
    const events: FollowEvent[] = [];
    const f = follow({ url: `${appUrl}/malformed`, onEvent: (e) => events.push(e) });
    const err = await failsWith(f, ProtocolError, 'a malformed record');
    assert.match(err.message, /not JSON/);
    assert.deepEqual(texts(f.snapshot()), ['a', 'b']);
    assert.equal(f.snapshot().nextOffset, formatOffset(2));
    assert.deepEqual(events.map((e) => e.type), ['append']);
    // Iterating a failed follower throws its error.
    await assert.rejects(
      (async () => {
        for await (const _ of f) assert.fail('no event after the failure');
      })(),
      (e) => e === err,
    );
  });

  test('records of another stream (offsets that skip or go backwards): a ProtocolError, the snapshot kept', async () => {
    for (const [path, why] of [
      ['/skip', /records were skipped/],
      ['/backwards', /offsets went backwards/],
    ] as const) {
      const f = follow({ url: appUrl + path });
      const err = await failsWith(f, ProtocolError, path);
      assert.match(err.message, why);
      assert.deepEqual(texts(f.snapshot()), ['a', 'b'], path);
    }
  });

  test('an abort of a writer never seen removes nothing and is no error', async () => {
    const events: FollowEvent[] = [];
    const f = follow({ url: `${appUrl}/ghost`, onEvent: (e) => events.push(e) });
    const final = await within(f.done, 'the ghost stream to close');
    assert.deepEqual(texts(final), ['a']);
    assert.deepEqual(events.map((e) => e.type), ['append', 'commit', 'close']);
  });

  test('a resumed run: a close then a reopen read together do not end the follower; the close voids what was open', async () => {
    const events: FollowEvent[] = [];
    const f = follow({ url: `${appUrl}/resumed`, onEvent: (e) => events.push(e) });
    const final = await within(f.done, 'the resumed stream to close');
    assert.deepEqual(texts(final), ['good']);
    assert.deepEqual(events.map((e) => e.type), ['append', 'rewind', 'reopen', 'append', 'close']);
  });

  test('every wait is bounded: silence is a dropped connection, and the reconnects give up', async () => {
    const events: FollowEvent[] = [];
    const f = follow({ url: `${appUrl}/silent`, idleTimeoutMs: 150, maxReconnects: 2, onEvent: (e) => events.push(e) });
    const err = await failsWith(f, WeirConnectionError, 'silence');
    assert.match(err.message, /no byte for 150 ms.*gave up after 2 reconnects/);
    assert.deepEqual(events.map((e) => e.type === 'reconnect' && e.attempt), [1, 2]);

    const g = follow({ url: `${appUrl}/fail`, maxReconnects: 1 });
    const e500 = await failsWith(g, InternalError, 'a 500');
    assert.match(e500.message, /the app broke/);
  });

  test('an offset of another stream, a missing stream: the server says so, and the follower fails at once', async () => {
    const c = new Client({ baseUrl: weir.url });
    const long = uniquePath('long');
    const short = uniquePath('short');
    const w = c.writer({ path: long, writer: 'w', attempt: 1, contentType: 'text/plain' });
    await w.write('a', 'b', 'c', 'd');
    await c.createStream(short, 'text/plain');
    const events: FollowEvent[] = [];
    const f = c.follow(short, { from: formatOffset(4), onEvent: (e) => events.push(e) });
    const err = await failsWith(f, BadRequestError, 'an offset past the tail');
    assert.equal(err.status, 400);
    assert.match(err.message, /past the stream's end/);
    assert.deepEqual(events, [], 'not retried');
    await failsWith(c.follow(uniquePath('missing')), NotFoundError, 'a missing stream');
  });

  test('a stream that does not exist yet is waited for, within waitForStreamMs', async () => {
    let notFound = 0;
    const counting: typeof fetch = async (input, init) => {
      const r = await fetch(input, init);
      if (r.status === 404) notFound++;
      return r;
    };
    const c = new Client({ baseUrl: weir.url, fetch: counting });
    const path = uniquePath();
    const f = c.follow(path, { waitForStreamMs: 10_000 });
    await until('the follower to meet a 404 or two', () => notFound >= 2);
    const w = c.writer({ path, writer: 'w', attempt: 1, contentType: 'text/plain' });
    await w.write('late');
    await w.commit();
    await c.closeStream(path);
    assert.deepEqual(texts(await within(f.done, 'the stream, once created')), ['late']);
    const g = c.follow(uniquePath('never'), { waitForStreamMs: 200 });
    const err = await failsWith(g, NotFoundError, 'a stream never created');
    assert.match(err.message, /waited 200 ms/);
  });

  test('a route without SSE: long-poll from the first reply on', async () => {
    const c = new Client({ baseUrl: weir.url });
    const path = uniquePath();
    const w = c.writer({ path, writer: 'w', attempt: 1, contentType: 'text/plain' });
    await w.write('a');
    sseAsked = 0;
    const f = follow({ url: `${appUrl}/lp?path=${encodeURIComponent(path)}` });
    await until('a', () => texts(f.snapshot()).length === 1);
    await w.write('b', 'c');
    await until('a b c', () => texts(f.snapshot()).length === 3);
    const w2 = c.writer({ path, writer: 'w', attempt: 2, contentType: 'text/plain' });
    await w2.write('a', 'x');
    await w2.commit();
    await c.closeStream(path);
    const final = await within(f.done, 'the long-poll follower to end');
    assert.deepEqual(texts(final), ['a', 'x']);
    assert.equal(sseAsked, 1, 'asked for SSE once, then long-polled');
  });
});
