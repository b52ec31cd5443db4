import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Client, follow, type FollowEvent, type Follower, type Snapshot, type StreamWriter } from '../src/index.js';
import { Proxy, startWeir, stores, text, texts, uniquePath, until, within, type WeirServer } from './helpers.js';

// follow against real weir servers, the data written by the client's own
// StreamWriter, through a proxy that cuts the follower's connection in the
// middle of every scenario.

interface Watched {
  f: Follower;
  events: FollowEvent[];
  snaps: Snapshot[];
}

for (const { name, store } of stores()) {
  describe(`follow (${name})`, () => {
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

    /** Follows path through the proxy, keeping every event and the snapshot after each. */
    const watch = (path: string, view: 'live' | 'committed' = 'live'): Watched => {
      const events: FollowEvent[] = [];
      const snaps: Snapshot[] = [];
      const f = follow({
        url: `${proxy.url}/v1/stream/${path}`,
        view,
        idleTimeoutMs: 5_000,
        onEvent: (ev, s) => {
          events.push(ev);
          snaps.push(s);
        },
      });
      return { f, events, snaps };
    };
    const shows = (w: Watched, want: string[]) => until(`the follower to show ${JSON.stringify(want)}`, () => JSON.stringify(texts(w.f.snapshot())) === JSON.stringify(want));
    const writer = (path: string, attempt: number, contentType = 'text/plain'): StreamWriter => client.writer({ path, writer: 'job', attempt, contentType });
    /** Cuts the follower's connection and waits for it to say so. */
    const cutAndWait = async (w: Watched) => {
      const n = w.events.filter((e) => e.type === 'reconnect').length;
      proxy.cut();
      await until('the follower to reconnect', () => w.events.filter((e) => e.type === 'reconnect').length > n);
    };
    const rawCommitted = async (path: string) => (await fetch(`${weir.url}/v1/stream/${path}?offset=-1`)).text();

    test('an identical retry: adopted, no rewind, the snapshot never loses a chunk', async () => {
      const path = uniquePath();
      const w1 = writer(path, 1);
      await w1.write('a', 'b');
      await w1.write('c');
      const w = watch(path);
      await shows(w, ['a', 'b', 'c']);
      await cutAndWait(w);
      const w2 = writer(path, 2);
      assert.deepEqual((await w2.write('a', 'b', 'c', 'd')).map((a) => a.outcome), ['adopted', 'adopted', 'adopted', 'appended']);
      assert.equal(await w2.commit(), 'done');
      await client.closeStream(path);
      const final = await within(w.f.done, 'the follower to end');
      assert.deepEqual(texts(final), ['a', 'b', 'c', 'd']);
      assert.ok(final.closed && final.chunks.every((c) => c.final && c.writer === 'job'));
      assert.deepEqual(final.chunks.map((c) => [c.attempt, c.seq]), [[1, 0], [1, 1], [1, 2], [2, 3]]);
      assert.equal(w.events.filter((e) => e.type === 'rewind').length, 0, 'no rewind');
      for (let i = 1; i < w.snaps.length; i++) {
        const now = new Set(w.snaps[i]!.chunks.map((c) => c.offset));
        for (const c of w.snaps[i - 1]!.chunks) assert.ok(now.has(c.offset), `snapshot ${i} lost chunk ${c.offset}: no flicker`);
      }
      assert.deepEqual(w.events.at(-1), { type: 'close' });
      assert.equal(await rawCommitted(path), 'abcd');
    });

    test('a divergent retry: the rewind removes attempt 1 from seq k, then the new chunks append', async () => {
      const path = uniquePath();
      const w1 = writer(path, 1);
      await w1.write('a');
      await w1.write('b');
      await w1.write('c');
      const w = watch(path);
      await shows(w, ['a', 'b', 'c']);
      await cutAndWait(w); // the rewind arrives on the next connection: the state crossed it
      const w2 = writer(path, 2);
      assert.deepEqual((await w2.write('a', 'x', 'y')).map((a) => a.outcome), ['adopted', 'appended', 'appended']);
      await w2.commit();
      await shows(w, ['a', 'x', 'y']);
      await client.closeStream(path);
      const final = await within(w.f.done, 'the follower to end');
      assert.deepEqual(texts(final), ['a', 'x', 'y']);
      const kinds = w.events.filter((e) => e.type !== 'reconnect' && e.type !== 'append');
      assert.deepEqual(
        kinds.map((e) => e.type),
        ['rewind', 'commit', 'close'],
      );
      const rw = kinds[0] as Extract<FollowEvent, { type: 'rewind' }>;
      assert.equal(rw.writer, 'job');
      assert.equal(rw.fromSeq, 1);
      assert.deepEqual(rw.removed.map(text), ['b', 'c']);
      assert.deepEqual(kinds[1], { type: 'commit', writer: 'job', attempt: 2, count: 3 });
      const rewindAt = w.events.indexOf(rw);
      const appendedAfter = w.events.slice(rewindAt).flatMap((e) => (e.type === 'append' ? e.chunks.map(text) : []));
      assert.deepEqual(appendedAfter, ['x', 'y']);
      assert.equal(await rawCommitted(path), 'axy');
    });

    test('failed for good: the abort removes everything of the writer', async () => {
      const path = uniquePath();
      await client.createStream(path, 'text/plain');
      const anon = await fetch(`${weir.url}/v1/stream/${path}`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'anon' });
      assert.equal(anon.status, 204);
      const w1 = writer(path, 1);
      await w1.write('a', 'b');
      const w = watch(path);
      await shows(w, ['anon', 'a', 'b']);
      await cutAndWait(w);
      assert.equal(await w1.abort(), 'done');
      await shows(w, ['anon']);
      await client.closeStream(path);
      const final = await within(w.f.done, 'the follower to end');
      assert.deepEqual(texts(final), ['anon']);
      assert.equal(final.chunks[0]!.final, true);
      const rw = w.events.find((e) => e.type === 'rewind') as Extract<FollowEvent, { type: 'rewind' }>;
      assert.equal(rw.fromSeq, 0);
      assert.deepEqual(rw.removed.map(text), ['a', 'b']);
      await assert.rejects(w1.write('c'), { name: 'WriterFinishedError' });
    });

    test('a close with an open writer removes its chunks', async () => {
      const path = uniquePath();
      const w1 = writer(path, 1);
      await w1.write('a', 'b');
      const w = watch(path);
      await shows(w, ['a', 'b']);
      assert.equal(w.f.snapshot().chunks[0]!.final, false);
      await cutAndWait(w);
      await client.closeStream(path);
      const final = await within(w.f.done, 'the follower to end');
      assert.deepEqual(texts(final), []);
      assert.deepEqual(
        w.events.filter((e) => e.type !== 'reconnect' && e.type !== 'append').map((e) => e.type),
        ['rewind', 'close'],
      );
      await assert.rejects(w1.write('c'), { name: 'ClosedError' });
    });

    test('a rewind written while the follower is disconnected removes what it showed', async () => {
      const path = uniquePath();
      const w1 = writer(path, 1);
      await w1.write('a', 'b', 'c');
      const w = watch(path);
      await shows(w, ['a', 'b', 'c']);
      proxy.down();
      try {
        await until('the follower to notice', () => w.events.some((e) => e.type === 'reconnect'));
        await w1.abort(); // straight to the server, not through the proxy
        assert.deepEqual(texts(w.f.snapshot()), ['a', 'b', 'c'], 'still disconnected');
      } finally {
        proxy.up();
      }
      await shows(w, []);
      const rw = w.events.find((e) => e.type === 'rewind') as Extract<FollowEvent, { type: 'rewind' }>;
      assert.deepEqual(rw.removed.map(text), ['a', 'b', 'c']);
      w.f.cancel();
      const s = await within(w.f.done, 'done after cancel');
      assert.equal(s.closed, false);
    });

    test('the committed view: only committed chunks, never a rewind', async () => {
      const path = uniquePath();
      const w1 = writer(path, 1);
      await w1.write('a', 'b', 'c');
      const w = watch(path, 'committed');
      await until('the committed follower to be up to date', () => w.f.snapshot().upToDate);
      assert.deepEqual(texts(w.f.snapshot()), []);
      await cutAndWait(w);
      const w2 = writer(path, 2);
      await w2.write('a', 'x');
      assert.deepEqual(texts(w.f.snapshot()), []);
      await w2.commit();
      await shows(w, ['a', 'x']);
      await client.closeStream(path);
      const final = await within(w.f.done, 'the follower to end');
      assert.deepEqual(texts(final), ['a', 'x']);
      assert.ok(final.chunks.every((c) => c.final));
      assert.deepEqual(
        w.events.filter((e) => e.type !== 'reconnect').map((e) => e.type),
        ['append', 'close'],
      );
    });

    test('resumes with no gap and no repeat however the connection is cut', async () => {
      const path = uniquePath();
      await client.createStream(path, 'text/plain');
      const w1 = writer(path, 1);
      const w = watch(path);
      await until('the follower to be up to date', () => w.f.snapshot().upToDate);
      const want: string[] = [];
      for (const cut of [1, 17, 40, 97, 160, 250, 400]) {
        proxy.cutAfter(cut);
        for (let i = 0; i < 3; i++) {
          const s = `c${cut}.${i}`;
          want.push(s);
          await w1.write(s);
        }
        await shows(w, want);
      }
      await w1.commit();
      await client.closeStream(path);
      const final = await within(w.f.done, 'the follower to end');
      assert.deepEqual(texts(final), want);
      assert.deepEqual(final.chunks.map((c) => c.seq), want.map((_, i) => i));
      assert.ok(w.events.filter((e) => e.type === 'reconnect').length >= 5, 'the cuts were seen');
    });

    test('data is decoded per Weir-Data-Encoding: JSON values, text, bytes', async () => {
      const jpath = uniquePath('json');
      const jw = client.writer({ path: jpath, writer: 'j', attempt: 1, contentType: 'application/json' });
      await jw.writeJSON({ n: 1, s: 'x\ny' }, 'str', [1, 2], null);
      await jw.write('{"raw": true}');
      await assert.rejects(jw.write('not json'), TypeError);
      await jw.commit();
      await client.closeStream(jpath);
      const j = await within(client.follow(jpath).done, 'the JSON follower');
      assert.deepEqual(j.chunks.map((c) => c.data), [{ n: 1, s: 'x\ny' }, 'str', [1, 2], null, { raw: true }]);

      const tpath = uniquePath('text');
      const tw = writer(tpath, 1);
      await tw.write('héllo', new Uint8Array([0xff, 0xfe]));
      await tw.commit();
      await client.closeStream(tpath);
      const t = await within(client.follow(tpath).done, 'the text follower');
      assert.equal(t.chunks[0]!.data, 'héllo');
      assert.deepEqual(t.chunks[1]!.data, new Uint8Array([0xff, 0xfe]), 'a text record that is not UTF-8 comes as bytes');

      const bpath = uniquePath('bin');
      const bw = client.writer({ path: bpath, writer: 'b', attempt: 1 });
      await bw.write(new Uint8Array([0, 1, 2, 255]));
      await bw.commit();
      await client.closeStream(bpath);
      const b = await within(client.follow(bpath).done, 'the binary follower');
      assert.deepEqual(b.chunks[0]!.data, new Uint8Array([0, 1, 2, 255]));
    });

    test('follows with for await, and from an offset', async () => {
      const path = uniquePath();
      const w1 = writer(path, 1);
      await w1.write('a', 'b', 'c');
      await w1.commit();
      const seen: string[] = [];
      const f = client.follow(path, { from: '0000000000000000_0000000000000001' });
      const reading = (async () => {
        for await (const ev of f) {
          if (ev.type === 'append') seen.push(...ev.chunks.map(text));
          if (ev.type === 'close') seen.push('<close>');
        }
      })();
      await until('b and c', () => seen.length === 2);
      await client.closeStream(path);
      await within(reading, 'the loop to end');
      assert.deepEqual(seen, ['b', 'c', '<close>']);
      assert.equal((await f.done).nextOffset, '0000000000000000_0000000000000005');

      // Leaving the loop early cancels the follower.
      const open = uniquePath();
      await writer(open, 1).write('z');
      const g = client.follow(open);
      await within(
        (async () => {
          for await (const ev of g) {
            assert.equal(ev.type, 'append');
            break;
          }
        })(),
        'the first event',
      );
      const s = await within(g.done, 'done after break');
      assert.equal(s.closed, false);
    });
  });
}
