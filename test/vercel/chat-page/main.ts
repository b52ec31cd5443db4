// The chat page of test/chat.test.mjs: a DurableAgent's turn on a Vercel
// Workflow app (workflows/agent.ts), followed in the browser through the
// app's worldStreamRoute with @weirhq/client's WeirChat, weir's rewinds
// applied. No framework: the messages are rendered again on each change,
// the model's text always as text (textContent), never as markup.
// Conventions of examples/agent-chat's page: the assistant's text parts in
// `.msg.assistant .text`, every follower event in window.weirEvents with
// its performance.now().

import type { FollowEvent } from '@weirhq/client';
import { WeirChat, type StartRequest, type StartedTurn } from '@weirhq/client/ai';
import type { UIMessage } from 'ai';

/** A follower event with its arrival time. */
interface Logged {
  at: number;
  type: FollowEvent['type'];
  removed?: number;
  fromSeq?: number;
}

declare global {
  interface Window {
    weirEvents: Logged[];
    weirChat: WeirChat;
    /** Turns ended (the stream closed, or failed): what a test waits for. */
    weirTurns: number;
  }
}
window.weirEvents = [];
window.weirTurns = 0;

function byId<T extends HTMLElement>(id: string, type: new () => T): T {
  const el = document.getElementById(id);
  if (!(el instanceof type)) throw new Error(`the page has no #${id}`);
  return el;
}

const messagesEl = byId('messages', HTMLDivElement);
const statusEl = byId('status', HTMLParagraphElement);
const form = byId('form', HTMLFormElement);
const input = byId('input', HTMLInputElement);
const send = byId('send', HTMLButtonElement);
const fail = byId('fail', HTMLInputElement);
const same = byId('same', HTMLInputElement);
const ownStart = byId('own-start', HTMLInputElement);

const textOf = (m: UIMessage): string => m.parts.map((p) => (p.type === 'text' ? p.text : '')).join('');

// POST /chat starts the workflow with the page's settings and answers
// where the turn's stream is.
async function start(req: StartRequest): Promise<StartedTurn> {
  const last = req.messages[req.messages.length - 1];
  const res = await fetch('/chat', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: last ? textOf(last) : '', fail: fail.checked, same: same.checked, ownStart: ownStart.checked }),
    signal: req.signal,
  });
  if (!res.ok) throw new Error(`the app refused: ${res.status} ${(await res.text()).trim()}`);
  const body: unknown = await res.json();
  if (typeof body !== 'object' || body === null || !('stream' in body) || typeof body.stream !== 'string') {
    throw new Error('the app answered no stream');
  }
  const runId = 'runId' in body && typeof body.runId === 'string' ? body.runId : undefined;
  return runId === undefined ? { stream: body.stream } : { stream: body.stream, runId };
}

const chat = new WeirChat({
  start,
  onFollowEvent: (ev) => {
    window.weirEvents.push({
      at: performance.now(),
      type: ev.type,
      ...(ev.type === 'rewind' ? { removed: ev.removed.length, fromSeq: ev.fromSeq } : {}),
    });
  },
});
window.weirChat = chat;

function render(): void {
  const { messages, status, error, rewinds } = chat.getSnapshot();
  const els = messages.map((m) => {
    const div = document.createElement('div');
    div.className = `msg ${m.role}`;
    div.dataset.role = m.role;
    for (const p of m.parts) {
      if (p.type !== 'text') continue;
      const span = document.createElement('span');
      span.className = 'text';
      span.textContent = p.text;
      div.append(span);
    }
    return div;
  });
  messagesEl.replaceChildren(...els);
  statusEl.dataset.status = status;
  statusEl.textContent =
    status + (rewinds > 0 ? ` · ${rewinds} rewind${rewinds > 1 ? 's' : ''}: a retried step's voided chunks were dropped` : '') + (error ? ` · ${error.message}` : '');
  send.disabled = status === 'submitted' || status === 'streaming';
}
chat.subscribe(render);
render();

form.addEventListener('submit', (e) => {
  e.preventDefault();
  const text = input.value.trim();
  if (!text || send.disabled) return;
  input.value = '';
  void chat
    .sendMessage(text)
    .catch(() => undefined) // the status shows it
    .finally(() => {
      window.weirTurns++;
    });
});
