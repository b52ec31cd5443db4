// The chat fold (@weirhq/client/ai) over recorded UI message chunk
// sequences, with whichever `ai` resolves next to the package: ai 7 here
// (js/client's devDependency), ai 6 in test-ai6 (the same compiled test, run
// against a copy of the package installed there). A follower's events are
// made by hand: the fold is what is under test, against the AI SDK's own
// readUIMessageStream.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readUIMessageStream, type UIMessage, type UIMessageChunk } from 'ai';
import { UIMessageFold } from '@weirhq/client/ai';
import type { Chunk, FollowEvent, Snapshot } from '@weirhq/client';

/** What the AI SDK itself builds from chunks: the last message readUIMessageStream yields. */
async function sdkFold(chunks: readonly UIMessageChunk[]): Promise<UIMessage | undefined> {
  const stream = new ReadableStream<UIMessageChunk>({
    start(c) {
      for (const ch of chunks) c.enqueue(ch);
      c.close();
    },
  });
  let last: UIMessage | undefined;
  for await (const m of readUIMessageStream({ stream })) last = m;
  return last;
}

/** A follower made by hand: visible chunks of writers, appends and rewinds. */
class Feed {
  chunks: Chunk[] = [];
  offset = 0;
  seqs = new Map<string, number>();
  reports: { at: number; message: UIMessage | undefined }[] = [];
  events = 0;
  fold = new UIMessageFold((m) => this.reports.push({ at: this.events, message: m }));

  snap(): Snapshot {
    return { chunks: [...this.chunks], nextOffset: String(this.offset), upToDate: true, closed: false };
  }

  append(writer: string, attempt: number, ...data: UIMessageChunk[]): void {
    const added: Chunk[] = [];
    for (const d of data) {
      const seq = this.seqs.get(writer) ?? 0;
      this.seqs.set(writer, seq + 1);
      added.push({ offset: this.offset++, writer, attempt, seq, data: d, final: false });
    }
    this.chunks.push(...added);
    this.emit({ type: 'append', chunks: added });
  }

  rewind(writer: string, fromSeq: number): void {
    const removed = this.chunks.filter((c) => c.writer === writer && c.seq >= fromSeq);
    this.chunks = this.chunks.filter((c) => !(c.writer === writer && c.seq >= fromSeq));
    this.seqs.set(writer, fromSeq);
    this.offset++;
    this.emit({ type: 'rewind', writer, fromSeq, removed });
  }

  close(): void {
    this.offset++;
    this.emit({ type: 'close' });
  }

  emit(ev: FollowEvent): void {
    this.events++;
    this.fold.apply(ev, this.snap());
  }

  visible(): UIMessageChunk[] {
    return this.chunks.map((c) => c.data as UIMessageChunk);
  }

  /** Waits until the fold has reported what it was given (a task: it folds in microtasks). */
  async settle(): Promise<void> {
    for (let i = 0; i < 3; i++) await new Promise((r) => setTimeout(r, 0));
  }
}

// Read through a function, so that an assertion on it does not narrow the
// type of later reads.
const messageOf = (f: Feed): UIMessage | undefined => f.fold.message;
const textOf = (m: UIMessage | undefined): string => (m?.parts ?? []).map((p) => (p.type === 'text' ? p.text : '')).join('');

const start: UIMessageChunk[] = [{ type: 'start', messageId: 'msg-1' }, { type: 'start-step' }, { type: 'text-start', id: 'text-1' }];
const deltas = (...ds: string[]): UIMessageChunk[] => ds.map((delta) => ({ type: 'text-delta', id: 'text-1', delta }));

test('each appended chunk is folded live, as the AI SDK folds it', async () => {
  const f = new Feed();
  f.append('step/1', 1, ...start);
  await f.settle();
  for (const d of ['Hel', 'lo', ', wor', 'ld!']) {
    f.append('step/1', 1, ...deltas(d));
    await f.settle();
  }
  f.append('step/1', 1, { type: 'text-end', id: 'text-1' }, { type: 'finish-step' }, { type: 'finish', finishReason: 'stop' });
  f.close();
  await f.settle();
  const texts = f.reports.map((r) => textOf(r.message));
  for (const t of ['Hel', 'Hello', 'Hello, wor', 'Hello, world!']) assert.ok(texts.includes(t), `${t} was shown live: ${JSON.stringify(texts)}`);
  assert.deepEqual(f.fold.message, await sdkFold(f.visible()));
});

test('a rewind rebuilds the message from the chunks that stay; no report shows a voided token after it', async () => {
  const f = new Feed();
  f.append('step/1', 1, ...start, ...deltas('Hel', 'lo', ', wor'));
  await f.settle();
  assert.equal(textOf(f.fold.message), 'Hello, wor');
  // The retry (attempt 2) diverges at seq 3, the first delta: the failed
  // attempt's three deltas are void.
  const at = f.events + 1;
  f.rewind('step/1', 3);
  f.append('step/2', 2); // nothing: the same writer goes on below
  f.append('step/1', 2, ...deltas('Hi', ' there'));
  await f.settle();
  const after = f.reports.filter((r) => r.at >= at).map((r) => textOf(r.message));
  assert.ok(after.length > 0, 'the rebuilt message was reported');
  for (const t of after) assert.ok(!/Hel|lo|wor/.test(t), `a voided token was shown after the rewind: ${JSON.stringify(after)}`);
  f.append('step/1', 2, { type: 'text-end', id: 'text-1' }, { type: 'finish-step' }, { type: 'finish' });
  f.close();
  await f.settle();
  assert.equal(textOf(f.fold.message), 'Hi there');
  assert.deepEqual(f.fold.message, await sdkFold(f.visible()));
});

test('a rewind in the middle of a tool call: the partial input goes, the retry streams its own', async () => {
  const f = new Feed();
  f.append(
    'step/1',
    1,
    ...start,
    ...deltas('Checking.'),
    { type: 'text-end', id: 'text-1' },
    { type: 'tool-input-start', toolCallId: 'call-1', toolName: 'weather' },
    { type: 'tool-input-delta', toolCallId: 'call-1', inputTextDelta: '{"city":"Par' },
  );
  await f.settle();
  const tool = (m: UIMessage | undefined) => m?.parts.find((p) => p.type === 'tool-weather') as { input?: unknown; state?: string } | undefined;
  assert.deepEqual(tool(f.fold.message)?.input, { city: 'Par' });
  const at = f.events + 1;
  f.rewind('step/1', 6); // the tool call's delta is void; its start stays
  f.append(
    'step/1',
    2,
    { type: 'tool-input-delta', toolCallId: 'call-1', inputTextDelta: '{"city":"Lisbon"}' },
    { type: 'tool-input-available', toolCallId: 'call-1', toolName: 'weather', input: { city: 'Lisbon' } },
  );
  await f.settle();
  for (const r of f.reports.filter((r) => r.at >= at)) {
    const input = tool(r.message)?.input as { city?: string } | undefined;
    assert.notEqual(input?.city, 'Par', 'the voided partial input was shown after the rewind');
  }
  assert.deepEqual(tool(f.fold.message)?.input, { city: 'Lisbon' });
  assert.equal(tool(f.fold.message)?.state, 'input-available');
  f.append('step/1', 2, { type: 'finish-step' });
  f.append('step/3', 1, { type: 'tool-output-available', toolCallId: 'call-1', output: { result: 'sunny' } }, { type: 'finish' });
  f.close();
  await f.settle();
  assert.deepEqual(f.fold.message, await sdkFold(f.visible()));
});

test('a rewind from the start (a random message id) removes the message until the retry starts another', async () => {
  const f = new Feed();
  f.append('step/1', 1, { type: 'start', messageId: 'random-a' }, { type: 'start-step' }, { type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: 'Hel' });
  await f.settle();
  assert.equal(f.fold.message?.id, 'random-a');
  f.rewind('step/1', 0);
  await f.settle();
  assert.equal(messageOf(f), undefined, 'nothing of the voided attempt stays');
  f.append('step/1', 2, { type: 'start', messageId: 'random-b' }, { type: 'start-step' }, { type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: 'Hi' });
  await f.settle();
  assert.equal(messageOf(f)?.id, 'random-b');
  assert.equal(textOf(f.fold.message), 'Hi');
});

test('two writers (parallel tools) interleave; a rewind of one leaves the other', async () => {
  const f = new Feed();
  f.append('step/1', 1, ...start, ...deltas('Looking.'), { type: 'text-end', id: 'text-1' });
  f.append(
    'step/1',
    1,
    { type: 'tool-input-available', toolCallId: 'a', toolName: 'weather', input: {} },
    { type: 'tool-input-available', toolCallId: 'b', toolName: 'clock', input: {} },
    { type: 'finish-step' },
  );
  f.append('step/2', 1, { type: 'tool-output-available', toolCallId: 'a', output: 'rain' });
  f.append('step/3', 1, { type: 'tool-output-available', toolCallId: 'b', output: '14:05' });
  await f.settle();
  f.rewind('step/2', 0); // the weather tool's attempt failed for good
  f.append('step/2', 2, { type: 'tool-output-available', toolCallId: 'a', output: 'sun' });
  await f.settle();
  const outs = (f.fold.message?.parts ?? []).filter((p) => p.type.startsWith('tool-')).map((p) => (p as { output?: unknown }).output);
  assert.deepEqual(outs, ['sun', '14:05']);
  assert.deepEqual(f.fold.message, await sdkFold(f.visible()));
});

test('hostile text stays text: the fold keeps it as the model wrote it', async () => {
  const f = new Feed();
  f.append('step/1', 1, ...start, ...deltas('<img src=x onerror=alert(1)>', '<script>alert(2)</script>'));
  await f.settle();
  assert.equal(textOf(f.fold.message), '<img src=x onerror=alert(1)><script>alert(2)</script>');
});
