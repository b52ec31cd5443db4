import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  BadRequestError,
  BusyError,
  CODES,
  ClosedError,
  FencedError,
  ForbiddenError,
  GapError,
  HookInUseError,
  InternalError,
  NoDeliveryError,
  UnavailableError,
  WeirError,
  errorFromReply,
  formatOffset,
  parseOffset,
} from '../src/index.js';
import { Lines, SSE, parseRecord } from '../src/ndjson.js';
import { frame } from '../src/writer.js';

// dist-test/test/unit.test.js: the package is two folders up, the repository four.
const pkg = join(__dirname, '..', '..');
const errorsGo = join(pkg, '..', '..', 'api', 'errors.go');

test('a class per wire code of the server (api/errors.go), retryable where the server says so', { skip: !existsSync(errorsGo) && 'not in weir repository' }, () => {
  const src = readFileSync(errorsGo, 'utf8');
  const rows = [...src.matchAll(/\{Err: [^}]*Code: "([a-z_]+)", Status: http\.Status\w+[^}]*\}/g)].map((m) => m[1]!);
  const retryable = new Set([...src.matchAll(/Code: "([a-z_]+)"[^}]*Retryable: true/g)].map((m) => m[1]!));
  retryable.add('internal'); // the row of errors the table does not know
  assert.ok(rows.length > 30, `the Go table was found (${rows.length} rows)`);
  const missing = rows.filter((c) => !(c in CODES));
  assert.deepEqual(missing, [], 'wire codes of api/errors.go without a class in src/errors.ts');
  for (const [code, cls] of Object.entries(CODES)) {
    assert.equal(cls.code, code);
    assert.equal(cls.retryable, retryable.has(code), `${code} retryable`);
    assert.ok(rows.includes(code) || code === 'internal', `${code} is a code of the server`);
    const e = new cls('x');
    assert.ok(e instanceof WeirError && e.code === code && e.name === cls.name, code);
  }
});

test('errorFromReply picks the class of the code, else of the status', () => {
  const e = errorFromReply(403, { 'Weir-Error': 'fenced', 'Weir-Attempt': '3' }, 'fenced: attempt 2 of w\nmore', 'POST', 'http://h:1/v1/stream/s');
  assert.ok(e instanceof FencedError);
  assert.equal(e.currentAttempt, 3);
  assert.equal(e.status, 403);
  assert.equal(e.retryable, false);
  assert.equal(e.message, 'POST /v1/stream/s: fenced: attempt 2 of w (HTTP 403 fenced)');
  const gap = errorFromReply(409, new Headers({ 'weir-error': 'gap', 'weir-expected-seq': '7' }), 'gap');
  assert.ok(gap instanceof GapError && gap.expected === 7);
  // Without a code (a browser not let read Weir-Error, a proxy): by status and headers.
  assert.ok(errorFromReply(409, { 'Stream-Closed': 'true' }, '') instanceof ClosedError);
  assert.ok(errorFromReply(409, { 'Weir-Expected-Seq': '1' }, '') instanceof GapError);
  assert.ok(errorFromReply(403, { 'Weir-Attempt': '2' }, '') instanceof FencedError);
  assert.ok(errorFromReply(403, {}, '') instanceof ForbiddenError);
  assert.ok(errorFromReply(400, { 'Weir-Error': 'invalid' }, '') instanceof BadRequestError);
  const busy = errorFromReply(503, { 'Weir-Error': 'busy', 'Retry-After': '1' }, 'busy');
  assert.ok(busy instanceof BusyError && busy instanceof UnavailableError && busy.retryable && busy.retryAfter === 1);
  assert.ok(errorFromReply(503, { 'Weir-Error': 'no_delivery' }, '') instanceof NoDeliveryError);
  assert.equal(errorFromReply(503, { 'Weir-Error': 'no_delivery' }, '').retryable, false);
  const inUse = errorFromReply(409, { 'Weir-Error': 'hook_in_use' }, 'hook token in use');
  assert.ok(inUse instanceof HookInUseError && !inUse.retryable);
  assert.ok(errorFromReply(502, {}, '').retryable);
  assert.ok(errorFromReply(500, {}, '') instanceof InternalError);
  const future = errorFromReply(418, { 'Weir-Error': 'from_the_future' }, 'tea');
  assert.equal(future.constructor, WeirError);
  assert.equal(future.code, 'from_the_future');
  assert.equal(future.message, 'tea (HTTP 418 from_the_future)');
});

test('offsets', () => {
  assert.equal(formatOffset(42), '0000000000000000_0000000000000042');
  assert.equal(parseOffset('0000000000000000_0000000000000042'), 42);
  for (const bad of ['-1', 'now', '1_2', '0000000000000001_0000000000000042', 'x']) assert.equal(parseOffset(bad), undefined, bad);
  assert.throws(() => formatOffset(-1));
});

test('frames are a u32be length and the bytes', () => {
  assert.deepEqual([...new Uint8Array(frame([new Uint8Array([1, 2]), new Uint8Array(0), new Uint8Array([3])]))], [0, 0, 0, 2, 1, 2, 0, 0, 0, 0, 0, 0, 0, 1, 3]);
});

test('lines split at CR, LF and CRLF however the text arrives', () => {
  const all = 'a\r\nb\rc\nd\r\n\r\ne';
  for (let step = 1; step <= all.length; step++) {
    const l = new Lines();
    const got: string[] = [];
    for (let i = 0; i < all.length; i += step) got.push(...l.push(all.slice(i, i + step)));
    assert.deepEqual(got, ['a', 'b', 'c', 'd', ''], `step ${step}`);
    assert.equal(l.pending, 1);
  }
});

test('SSE events, comments and data lines', () => {
  const body = ': hi\n\nevent: data\ndata:{"a":1}\ndata: {"b":2}\n\nevent: control\r\ndata:{"x":true}\r\n\r\nevent: data\ndata:par';
  for (let step = 1; step <= body.length; step++) {
    const s = new SSE();
    const got = [];
    for (let i = 0; i < body.length; i += step) got.push(...s.push(body.slice(i, i + step)));
    assert.deepEqual(got, [
      { event: 'data', data: ['{"a":1}', '{"b":2}'] },
      { event: 'control', data: ['{"x":true}'] },
    ]);
    assert.equal(s.pending, true, 'a cut event is pending, not dispatched');
  }
});

test('records are checked and their data decoded', () => {
  const next = (n: number) => JSON.stringify(formatOffset(n));
  const rec = (o: number, rest: string) => `{"offset":${o},"next_offset":${next(o + 1)},${rest}}`;
  const d = parseRecord(rec(3, '"kind":"data","writer":"w","attempt":2,"seq":0,"data":"aGk="'), 'base64');
  assert.deepEqual(d, { kind: 'data', offset: 3, nextOffset: formatOffset(4), writer: 'w', attempt: 2, seq: 0, data: new Uint8Array([104, 105]) });
  assert.equal((parseRecord(rec(0, '"kind":"data","writer":"","attempt":0,"seq":0,"data":"hi"'), 'text') as { data: unknown }).data, 'hi');
  assert.deepEqual((parseRecord(rec(0, '"kind":"data","writer":"","attempt":0,"seq":0,"data":{"a":[1]}'), 'json') as { data: unknown }).data, { a: [1] });
  assert.deepEqual((parseRecord(rec(0, '"kind":"data","writer":"","attempt":0,"seq":0,"data":"/w==","encoding":"base64"'), 'text') as { data: unknown }).data, new Uint8Array([255]));
  assert.deepEqual(parseRecord(rec(4, '"kind":"abort","writer":"w","attempt":2,"from":1'), 'text'), { kind: 'abort', offset: 4, nextOffset: formatOffset(5), writer: 'w', attempt: 2, from: 1 });
  assert.deepEqual(parseRecord(`{"offset":6,"next_offset":${next(7)},"kind":"close"}`, 'text'), { kind: 'close', offset: 6, nextOffset: formatOffset(7) });
  for (const bad of [
    '<html>',
    '[1]',
    rec(1, '"kind":"nope","writer":"","attempt":0'),
    `{"offset":1,"next_offset":${next(3)},"kind":"close"}`,
    rec(1, '"kind":"data","writer":"","attempt":0,"seq":0'),
    rec(1, '"kind":"data","writer":"","attempt":-1,"seq":0,"data":"x"'),
    rec(1, '"kind":"data","writer":"","attempt":0,"seq":0,"data":"not base64!"'),
    rec(1, '"kind":"abort","writer":"w","attempt":1'),
  ]) {
    assert.throws(() => parseRecord(bad, 'base64'), (e: unknown) => e instanceof WeirError && e.name === 'ProtocolError', bad);
  }
  assert.throws(() => parseRecord(rec(0, '"kind":"data","writer":"","attempt":0,"seq":0,"data":1'), 'text'), /text data that is not a string/);
});

test('the package loads as ESM and as CommonJS, from its exports map', async () => {
  // The build (npm test runs it first) under the package's own name.
  const cjs = require('@weirhq/client') as Record<string, unknown>;
  const esm = (await import('@weirhq/client')) as Record<string, unknown>;
  for (const m of [cjs, esm]) {
    for (const name of ['follow', 'runStreamUrl', 'Client', 'StreamWriter', 'WeirError', 'FencedError', 'errorFromReply', 'CODES']) {
      assert.equal(typeof m[name] === 'function' || typeof m[name] === 'object', true, name);
    }
  }
  assert.notEqual(cjs.follow, esm.follow, 'two builds: dist/cjs and dist/esm');
  const manifest = JSON.parse(readFileSync(join(pkg, 'package.json'), 'utf8')) as { exports: Record<string, Record<string, Record<string, string>>> };
  for (const cond of ['import', 'require']) {
    for (const f of Object.values(manifest.exports['.']![cond]!)) assert.ok(existsSync(join(pkg, f)), `${cond}: ${f}`);
  }
});
