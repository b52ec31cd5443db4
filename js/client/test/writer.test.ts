import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Client, FencedError, StreamWriter, TooLargeError, WeirConnectionError, WriterFinishedError, MAX_CHUNK_BYTES } from '../src/index.js';
import { Proxy, startWeir, stores, uniquePath, type WeirServer } from './helpers.js';

for (const { name, store } of stores()) {
  describe(`StreamWriter (${name})`, () => {
    let weir: WeirServer;
    let proxy: Proxy;
    let client: Client;
    before(async () => {
      weir = await startWeir(store());
      proxy = await Proxy.start(weir.url);
      client = new Client({ baseUrl: weir.url });
    });
    after(async () => {
      await proxy?.close();
      await weir?.stop();
    });
    const raw = async (path: string, view: 'live' | 'committed') => (await fetch(`${weir.url}/v1/stream/${path}?offset=-1&view=${view}`)).text();

    test('seqs from 0 in call order; writes made while a request is in flight form the next batch', async () => {
      const path = uniquePath();
      const seqs: string[] = [];
      const counting: typeof fetch = (input, init) => {
        if (init?.method === 'POST') seqs.push((init.headers as Record<string, string>)['weir-seq']!);
        return fetch(input, init);
      };
      const w = new StreamWriter({ baseUrl: weir.url, fetch: counting, path, writer: 'batcher', attempt: 1, contentType: 'text/plain', maxBatchChunks: 10 });
      const writes = Array.from({ length: 50 }, (_, i) => w.write(`c${i},`));
      const acks = await Promise.all(writes);
      assert.deepEqual(seqs, ['0', '1', '11', '21', '31', '41'], 'the first write alone, then the 49 made meanwhile, 10 a request');
      assert.deepEqual(acks.map((a) => a.map((x) => x.seq)), writes.map((_, i) => [i]));
      assert.ok(acks.every((a, i) => a[0]!.outcome === 'appended' && (i === 0 || a[0]!.offset > acks[i - 1]![0]!.offset)));
      assert.equal(w.nextSeq, 50);
      assert.equal(await w.commit(), 'done');
      assert.equal(await raw(path, 'committed'), Array.from({ length: 50 }, (_, i) => `c${i},`).join(''));
      assert.deepEqual(w.outcomes, { appended: 50, adopted: 0, retransmit: 0 });
    });

    test('a batch whose reply is cut after the server committed it is sent again: retransmits, no duplicates', async () => {
      const path = uniquePath();
      const w = new StreamWriter({ baseUrl: proxy.url, path, writer: 'cut', attempt: 1, contentType: 'text/plain' });
      await w.write('one,');
      const cuts = proxy.cuts;
      proxy.dropNextReply();
      const acks = await w.write('two,', 'three,');
      assert.equal(proxy.cuts, cuts + 1, 'the reply was cut');
      assert.deepEqual(acks.map((a) => [a.seq, a.outcome]), [[1, 'retransmit'], [2, 'retransmit']]);
      await w.write('four');
      await w.commit();
      assert.equal(await raw(path, 'live'), 'one,two,three,four', 'each chunk once in the stream');
      assert.equal(await raw(path, 'committed'), 'one,two,three,four');
    });

    test('a zombie attempt is fenced, and the writer stays broken', async () => {
      const path = uniquePath();
      const a1 = client.writer({ path, writer: 'z', attempt: 1, contentType: 'text/plain' });
      await a1.write('a');
      const a2 = client.writer({ path, writer: 'z', attempt: 2, contentType: 'text/plain' });
      assert.equal((await a2.write('a'))[0]!.outcome, 'adopted');
      const err = await a1.write('b').then(
        () => assert.fail('fenced'),
        (e: unknown) => e,
      );
      assert.ok(err instanceof FencedError, String(err));
      assert.equal(err.currentAttempt, 2);
      assert.equal(err.status, 403);
      await assert.rejects(a1.write('c'), (e) => e === err);
      await assert.rejects(a1.commit(), (e) => e === err);
      await a2.commit();
      await assert.rejects(a2.write('late'), WriterFinishedError);
      assert.equal(await raw(path, 'committed'), 'a');
    });

    test('limits are checked before sending; commit of a writer that never wrote is empty', async () => {
      const path = uniquePath();
      const w = client.writer({ path, writer: 'big', attempt: 1 });
      await assert.rejects(w.write(new Uint8Array(MAX_CHUNK_BYTES + 1)), (e) => e instanceof TooLargeError && e.status === 0);
      assert.deepEqual(await w.write('', new Uint8Array(0)), [], 'empty chunks are skipped');
      assert.equal(w.nextSeq, 0);
      assert.equal(await w.commit(), 'empty');
      assert.throws(() => client.writer({ path, writer: '', attempt: 1 }), TypeError);
      assert.throws(() => client.writer({ path, writer: 'w', attempt: 0 }), RangeError);
    });

    test('abort drops what was not sent yet and voids the rest', async () => {
      const path = uniquePath();
      const w = client.writer({ path, writer: 'ab', attempt: 1, contentType: 'text/plain' });
      const first = w.write('sent');
      const dropped = assert.rejects(w.write('never'), WriterFinishedError);
      assert.equal(await w.abort(), 'done');
      assert.equal((await first)[0]!.outcome, 'appended');
      await dropped;
      assert.equal(await raw(path, 'live'), 'sent');
      assert.equal(await raw(path, 'committed'), '');
    });

    test('a server out of reach: retried for retryForMs, then a WeirConnectionError, for good', async () => {
      const path = uniquePath();
      const w = new StreamWriter({ baseUrl: proxy.url, path, writer: 'down', attempt: 1, retryForMs: 300, timeoutMs: 2000 });
      proxy.down();
      try {
        const t0 = Date.now();
        const err = await w.write('x').then(
          () => assert.fail('unreachable'),
          (e: unknown) => e,
        );
        assert.ok(err instanceof WeirConnectionError, String(err));
        assert.match(err.message, /tried \d+ times/);
        assert.ok(Date.now() - t0 >= 250, 'it retried');
        await assert.rejects(w.write('y'), (e) => e === err);
      } finally {
        proxy.up();
      }
    });
  });
}
