// WeirChat's useChat API against a real weir server: an "app" (a fetch
// function here) answers the start POST the way @workflow/ai's
// WorkflowChatTransport expects (the run's id in x-workflow-run-id, a body
// streaming the run's chunks) or with {stream} JSON, and serves the stream
// at {api}/{id}/stream by passing the read on to weir. The answers are
// written by the client's own StreamWriter, attempts and all.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, test } from 'node:test';
import type { UIMessage, UIMessageChunk } from 'ai';
import { WeirChat, WorkflowChatTransport, type ChatFinish } from '@weirhq/client/ai';
import { Client } from '@weirhq/client';
import { startWeir, until, within, type WeirServer } from './helpers.js';

let weir: WeirServer;
let client: Client;
before(async () => {
  weir = await startWeir();
  client = new Client({ baseUrl: weir.url });
});
after(async () => {
  await weir?.stop();
});

const textOf = (m: UIMessage | undefined): string => (m?.parts ?? []).map((p) => (p.type === 'text' ? p.text : '')).join('');
const answerOf = (chat: WeirChat): string => {
  const last = chat.messages.at(-1);
  return last?.role === 'assistant' ? textOf(last) : '';
};
const turn = (messageId: string, ...deltas: string[]): UIMessageChunk[] => [
  { type: 'start', messageId },
  { type: 'start-step' },
  { type: 'text-start', id: 't' },
  ...deltas.map((delta): UIMessageChunk => ({ type: 'text-delta', id: 't', delta })),
];
const end: UIMessageChunk[] = [{ type: 'text-end', id: 't' }, { type: 'finish-step' }, { type: 'finish' }];

/** The app: what it was asked, and the streams it serves (by run or chat id). */
class App {
  posts: { body: Record<string, unknown>; headers: Headers }[] = [];
  streams = new Map<string, string>(); // id -> weir stream path
  cancelled = 0;
  /** How the next POST answers: the WorkflowChatTransport contract, JSON, or a failure. */
  answer: 'workflow' | 'json' | 'fail' = 'workflow';
  /** What the next POST's run writes, in the background, once asked. */
  script: (path: string) => Promise<void> = async () => {};

  fetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const url = new URL(String(input instanceof Request ? input.url : input), 'http://app.test/');
    if (url.pathname === '/api/chat' && init?.method === 'POST') {
      this.posts.push({ body: JSON.parse(String(init.body)) as Record<string, unknown>, headers: new Headers(init.headers) });
      if (this.answer === 'fail') return new Response('no model today\n', { status: 503 });
      const runId = `wrun_${randomBytes(6).toString('hex')}`;
      const path = `chattest/${runId}`;
      this.streams.set(runId, path);
      await client.createStream(path, 'application/json');
      void this.script(path);
      if (this.answer === 'json') return Response.json({ stream: `/api/chat/${runId}/stream`, runId });
      // The run's chunks as WorkflowChatTransport reads them: never read here.
      const body = new ReadableStream<Uint8Array>({
        cancel: () => {
          this.cancelled++;
        },
      });
      return new Response(body, { headers: { 'content-type': 'text/event-stream', 'x-workflow-run-id': runId } });
    }
    const m = /^\/api\/chat\/([^/]+)\/stream$/.exec(url.pathname);
    if (m) {
      const path = this.streams.get(decodeURIComponent(m[1]!));
      if (path === undefined) return new Response('no such chat\n', { status: 404 });
      return fetch(`${weir.url}/v1/stream/${path}${url.search}`, { headers: init?.headers, signal: init?.signal ?? null });
    }
    return new Response('not found\n', { status: 404 });
  };
}

/** A chat of app, recording every answer text it shows and every onFinish. */
function chatOf(app: App, opts: { id?: string } = {}) {
  const shown: string[] = [];
  const finished: ChatFinish[] = [];
  const chat = new WeirChat({ ...opts, fetch: app.fetch, onFinish: (f) => finished.push(f), follow: { idleTimeoutMs: 5_000 } });
  chat.subscribe(() => {
    const t = answerOf(chat);
    if (shown.at(-1) !== t) shown.push(t);
  });
  return { chat, shown, finished };
}

const grows = (shown: string[]) => {
  for (let i = 1; i < shown.length; i++) assert.ok(shown[i]!.startsWith(shown[i - 1]!), `the text went back: ${JSON.stringify(shown)}`);
};

test("WorkflowChatTransport's contract: the run's id from the POST, its stream read from weir, an identical retry shown once", async () => {
  const app = new App();
  app.script = async (path) => {
    const a1 = client.writer({ path, writer: 'step/model', attempt: 1, contentType: 'application/json' });
    await a1.writeJSON(...turn('m1', 'Hel', 'lo'));
    const a2 = client.writer({ path, writer: 'step/model', attempt: 2, contentType: 'application/json' });
    await a2.writeJSON(...turn('m1', 'Hel', 'lo', ', world'), ...end);
    await a2.commit();
    await client.closeStream(path);
  };
  const { chat, shown, finished } = chatOf(app);
  await within(chat.sendMessage({ text: 'Say hello' }, { body: { model: 'scripted' }, headers: { 'x-tenant': 't1' } }), 'the turn to end');
  assert.equal(answerOf(chat), 'Hello, world');
  grows(shown);
  assert.equal(chat.getSnapshot().status, 'ready');
  assert.equal(chat.getSnapshot().rewinds, 0);
  assert.equal(app.cancelled, 1, "the POST's own stream is not read");
  const [post] = app.posts;
  assert.equal(post!.body.id, chat.id);
  assert.equal(post!.body.trigger, 'submit-message');
  assert.equal(post!.body.model, 'scripted');
  assert.equal(post!.headers.get('x-tenant'), 't1');
  assert.deepEqual((post!.body.messages as UIMessage[]).map((m) => [m.role, textOf(m)]), [['user', 'Say hello']]);
  assert.equal(finished.length, 1);
  assert.equal(textOf(finished[0]!.message), 'Hello, world');
  assert.deepEqual([finished[0]!.isAbort, finished[0]!.isError, finished[0]!.isDisconnect], [false, false, false]);
  assert.equal(finished[0]!.messages.length, 2);
});

test("@workflow/ai's WorkflowChatTransport as a useChat page passes it: its api, fetch and onChatSendMessage are the chat's; options weir's chat does not take are refused", async () => {
  const app = new App();
  app.script = async (path) => {
    const a = client.writer({ path, writer: 'step/model', attempt: 1, contentType: 'application/json' });
    await a.writeJSON(...turn('m1', 'Hi'), ...end);
    await a.commit();
    await client.closeStream(path);
  };
  const sent: (string | null)[] = [];
  const chat = new WeirChat({
    transport: new WorkflowChatTransport({ api: '/api/chat', fetch: app.fetch, maxConsecutiveErrors: 2, onChatSendMessage: (res) => void sent.push(res.headers.get('x-workflow-run-id')) }),
    follow: { idleTimeoutMs: 5_000 },
  });
  await within(chat.sendMessage({ text: 'Say hi' }), 'the turn to end');
  assert.equal(answerOf(chat), 'Hi');
  assert.equal(app.posts.length, 1, "the POST went to the transport's api through its fetch");
  assert.equal(sent.length, 1);
  assert.match(sent[0] ?? '', /^wrun_/, 'onChatSendMessage had the reply, with the run id');
  assert.equal(app.cancelled, 1, "the POST's own stream is not read");
  for (const k of ['prepareSendMessagesRequest', 'initialStartIndex', 'onChatEnd', 'prepareReconnectToStreamRequest']) {
    // A JavaScript caller's options (JSON.parse: untyped), as @workflow/ai takes them.
    assert.throws(() => new WorkflowChatTransport(JSON.parse(`{"${k}": 1}`)), new RegExp(`${k} is not supported on weir`));
  }
});

test('a divergent retry: one rewind, onFollowEvent sees it with the voided chunks, nothing voided shown after it, the retry\'s answer at the end', async () => {
  const app = new App();
  app.script = async (path) => {
    const a1 = client.writer({ path, writer: 'step/model', attempt: 1, contentType: 'application/json' });
    await a1.writeJSON(...turn('m1', 'Hel', 'lo'));
    const a2 = client.writer({ path, writer: 'step/model', attempt: 2, contentType: 'application/json' });
    await a2.writeJSON(...turn('m1', 'Hi', ' there'), ...end);
    await a2.commit();
    await client.closeStream(path);
  };
  const events: string[] = [];
  const shown: string[] = [];
  const chat = new WeirChat({
    fetch: app.fetch,
    follow: { idleTimeoutMs: 5_000 },
    onFollowEvent: (ev) => events.push(ev.type === 'rewind' ? `rewind ${ev.removed.length}` : ev.type),
  });
  let rewound = false;
  chat.subscribe(() => {
    rewound ||= events.some((e) => e.startsWith('rewind'));
    const t = answerOf(chat);
    if (shown.at(-1) !== t) shown.push(rewound ? `after: ${t}` : t);
  });
  await within(chat.sendMessage({ text: 'Say hi' }), 'the turn to end');
  assert.equal(answerOf(chat), 'Hi there');
  assert.equal(chat.getSnapshot().rewinds, 1);
  const rewinds = events.filter((e) => e.startsWith('rewind'));
  assert.equal(rewinds.length, 1, `one rewind: ${JSON.stringify(events)}`);
  assert.ok(Number(rewinds[0]!.split(' ')[1]) >= 1, `the rewind names what it voided: ${rewinds[0]}`);
  for (const t of shown.filter((x) => x.startsWith('after: '))) assert.ok(!/Hel|lo/.test(t), `a voided token shown after the rewind: ${JSON.stringify(shown)}`);
});

test('regenerate: the last answer goes, the POST says regenerate-message and which, the new answer takes its place', async () => {
  const app = new App();
  app.answer = 'json';
  let n = 0;
  app.script = async (path) => {
    n++;
    const w = client.writer({ path, writer: 'step/model', attempt: 1, contentType: 'application/json' });
    await w.writeJSON(...turn(`answer-${n}`, n === 1 ? 'First' : 'Second'), ...end);
    await w.commit();
    await client.closeStream(path);
  };
  const { chat } = chatOf(app);
  await within(chat.sendMessage('Hi'), 'turn 1');
  const first = chat.messages.at(-1)!;
  assert.equal(textOf(first), 'First');
  await within(chat.regenerate(), 'the regenerated turn');
  assert.deepEqual(chat.messages.map((m) => [m.role, textOf(m)]), [
    ['user', 'Hi'],
    ['assistant', 'Second'],
  ]);
  const post = app.posts[1]!;
  assert.equal(post.body.trigger, 'regenerate-message');
  assert.equal(post.body.messageId, first.id);
  assert.deepEqual((post.body.messages as UIMessage[]).map((m) => m.role), ['user']);

  // Editing the user message: it is replaced, and what followed it goes.
  const user = chat.messages[0]!;
  await within(chat.sendMessage({ text: 'Hi again', messageId: user.id }), 'the edited turn');
  assert.deepEqual(chat.messages.map((m) => [m.id === user.id, m.role, textOf(m)]), [
    [true, 'user', 'Hi again'],
    [false, 'assistant', 'Second'],
  ]);
  await assert.rejects(chat.sendMessage({ text: 'x', messageId: 'nope' }), /message nope not found/);
  await assert.rejects(chat.regenerate({ messageId: 'nope' }), /message nope not found/);
});

test("resumeStream after a reload: the chat's stream by its id, its message in place of the one kept", async () => {
  const app = new App();
  const path = `chattest/${randomBytes(6).toString('hex')}`;
  await client.createStream(path, 'application/json');
  const chatId = 'chat-reloaded';
  app.streams.set(chatId, path);
  const w = client.writer({ path, writer: 'step/model', attempt: 1, contentType: 'application/json' });
  await w.writeJSON(...turn('answer-x', 'Half'));
  // The page kept the half answer (as useChat's storage would), then reloaded.
  const kept: UIMessage[] = [
    { id: 'u1', role: 'user', parts: [{ type: 'text', text: 'Go' }] },
    { id: 'answer-x', role: 'assistant', parts: [{ type: 'text', text: 'Half' }] },
  ];
  const { chat, finished } = chatOf(app, { id: chatId });
  chat.setMessages(kept);
  chat.setMessages((ms) => ms.slice()); // a function of the current ones
  const resumed = chat.resumeStream();
  await until('the resumed answer', () => chat.getSnapshot().status === 'streaming');
  await w.writeJSON({ type: 'text-delta', id: 't', delta: ' and the rest' }, ...end);
  await w.commit();
  await client.closeStream(path);
  await within(resumed, 'the resumed turn to end');
  assert.deepEqual(chat.messages.map((m) => [m.id, textOf(m)]), [
    ['u1', 'Go'],
    ['answer-x', 'Half and the rest'],
  ]);
  assert.equal(finished.length, 1);
});

test('a start that fails: status error, onFinish says so, clearError makes the chat ready', async () => {
  const app = new App();
  app.answer = 'fail';
  const { chat, finished } = chatOf(app);
  await assert.rejects(chat.sendMessage('Hi'), /start a turn: 503 no model today/);
  assert.equal(chat.getSnapshot().status, 'error');
  assert.match(String(chat.getSnapshot().error?.message), /503/);
  assert.deepEqual([finished[0]?.isError, finished[0]?.isAbort], [true, false]);
  chat.clearError();
  assert.equal(chat.getSnapshot().status, 'ready');
  assert.equal(chat.getSnapshot().error, undefined);
});

test('stop: the turn ends as aborted, the message stays as shown', async () => {
  const app = new App();
  let wrote!: () => void;
  const first = new Promise<void>((r) => (wrote = r));
  app.script = async (path) => {
    const w = client.writer({ path, writer: 'step/model', attempt: 1, contentType: 'application/json' });
    await w.writeJSON(...turn('m', 'Partial'));
    wrote();
  };
  const { chat, finished } = chatOf(app);
  const sent = chat.sendMessage('Hi');
  await within(first, 'the first chunks written');
  await until('the partial answer shown', () => answerOf(chat) === 'Partial');
  chat.stop();
  await within(sent, 'sendMessage to return after stop');
  assert.equal(chat.getSnapshot().status, 'ready');
  assert.equal(answerOf(chat), 'Partial');
  assert.deepEqual([finished[0]?.isAbort, textOf(finished[0]?.message)], [true, 'Partial']);
});
