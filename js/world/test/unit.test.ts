import assert from 'node:assert/strict';
import { test } from 'node:test';
import { batches } from '../src/chain';
import { decode, Deframer, encode, frame, FRAME_EOF } from '../src/codec';
import { sign, signTarget, verifySignature } from '../src/queue';
import { ulid } from '../src/ulid';
import { createWorld } from '../src/index';

test('the codec tags bytes and gives them back', () => {
  const v = { a: new Uint8Array([0, 1, 255]), b: Buffer.from('hi'), c: [1, 'x', null], d: { nested: new Uint8Array(0) } };
  const text = encode(v);
  assert.match(text, /"__type":"Uint8Array"/);
  const back = decode<typeof v>(text);
  assert.deepEqual(back.a, new Uint8Array([0, 1, 255]));
  assert.deepEqual(back.b, new Uint8Array(Buffer.from('hi')));
  assert.deepEqual(back.c, [1, 'x', null]);
  assert.deepEqual(back.d.nested, new Uint8Array(0));
});

test('the deframer cuts frames however the bytes arrive', () => {
  const chunks = [new Uint8Array([1]), new Uint8Array(300).fill(7), new Uint8Array([9, 9])];
  const eof = new Uint8Array([0xff, 0xff, 0xff, 0xff]);
  const all = new Uint8Array([...frame(chunks), ...eof]);
  for (let step = 1; step <= all.length; step++) {
    const d = new Deframer();
    const got: Uint8Array[] = [];
    for (let i = 0; i < all.length; i += step) got.push(...d.push(all.slice(i, i + step)));
    assert.deepEqual(got, chunks, `step ${step}`);
    assert.equal(d.eof, true);
    assert.equal(d.pending, 0);
  }
  assert.equal(FRAME_EOF, 0xffffffff);
});

test('batches respect the request limits', () => {
  const many = Array.from({ length: 2500 }, () => new Uint8Array(1));
  assert.deepEqual(batches(many).map((b) => b.length), [1000, 1000, 500]);
  const big = [new Uint8Array(5 << 20), new Uint8Array(5 << 20), new Uint8Array(1)];
  assert.deepEqual(batches(big).map((b) => b.length), [1, 2]);
});

test('ulids are prefixed, 26 characters, and increase', () => {
  const a = ulid('msg', 1_700_000_000_000);
  const b = ulid('msg', 1_700_000_000_000);
  assert.match(a, /^msg_[0-9A-HJKMNP-TV-Z]{26}$/);
  assert.ok(b > a, `${b} > ${a}`);
  assert.ok(ulid('msg') > b);
});

// The vector of weir's TestSignVector (delivery/delivery_test.go).
const secret = '0123456789abcdef-test-secret';
const body = new TextEncoder().encode('{"workflowRunId":"wrun_1","stepId":"step_1"}');
const header = 't=1764583200,v1=07a6aab843a86bab3830011e61b8c3743043f92e9c5451712778498c0e24c21a';

test('signatures match weir delivery.Sign', () => {
  assert.equal(sign(secret, '1764583200', '__wkf_step_step//add', 'msg_01JZ0000000000000000000000', 3, body), header.slice(header.indexOf('v1=') + 3));
  const now = 1764583200_000;
  assert.equal(verifySignature(secret, header, '__wkf_step_step//add', 'msg_01JZ0000000000000000000000', 3, body, now), undefined);
});

// The vector of weir's TestSignTarget (delivery/delivery_test.go).
test('target signatures match weir delivery.SignTarget', () => {
  assert.equal(
    signTarget('0123456789abcdef', 'http://127.0.0.1:3000'),
    'v1=d4a6fffd1918c06232021e033f499d94121ff1e5e607a88080f962b6cff40f3d',
  );
});

test('bad signatures are refused with a reason', () => {
  const now = 1764583200_000;
  const q = '__wkf_step_step//add';
  const id = 'msg_01JZ0000000000000000000000';
  assert.equal(verifySignature(secret, null, q, id, 3, body, now), 'unsigned delivery');
  assert.equal(verifySignature(secret, 't=x,v1=y', q, id, 3, body, now), 'malformed signature');
  assert.equal(verifySignature(secret, header, q, id, 3, body, now + 301_000), 'stale signature');
  assert.equal(verifySignature(secret, header, q, id, 4, body, now), 'bad signature');
  assert.equal(verifySignature(secret, header, '__wkf_workflow_w', id, 3, body, now), 'bad signature');
  assert.equal(verifySignature('another-secret-of-16', header, q, id, 3, body, now), 'bad signature');
  assert.equal(verifySignature(secret, header, q, id, 3, new TextEncoder().encode('{}'), now), 'bad signature');
});

test("a refused delivery is told in the app's log the first time, with what to set", async (t) => {
  const logged: string[] = [];
  t.mock.method(console, 'error', (...args: unknown[]) => logged.push(args.join(' ')));
  const deliver = (secret: string | undefined) => {
    const world = createWorld({ url: 'http://127.0.0.1:1', ...(secret !== undefined && { secret }) });
    const handler = world.createQueueHandler('__wkf_workflow_', async () => undefined);
    const req = new Request('http://app/.well-known/workflow/v1/flow', {
      method: 'POST',
      body: '{}',
      headers: { 'x-vqs-queue-name': '__wkf_workflow_w', 'x-vqs-message-id': 'msg_01JZ0000000000000000000000', 'x-vqs-message-attempt': '1' },
    });
    return handler(req);
  };
  for (let i = 0; i < 3; i++) {
    assert.equal((await deliver(undefined)).status, 401);
    assert.equal((await deliver('another-secret-of-16-bytes')).status, 401);
  }
  assert.equal(logged.length, 2, `logged once a reason: ${logged.join('\n')}`);
  assert.match(logged[0]!, /WEIR_WORLD_SECRET is not set.*--world-secret/);
  assert.match(logged[1]!, /unsigned delivery.*WEIR_WORLD_SECRET must be weir server's --world-secret/);
});
