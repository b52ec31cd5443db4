// The chat page of test/chat.test.mjs: a DurableAgent's turn on a Vercel
// Workflow app (workflows/agent.ts), followed in the browser through the
// app's worldStreamRoute with @weirhq/client's WeirChat, weir's rewinds
// applied. No framework: the messages are rendered again on each change,
// the model's text always as text (textContent), never as markup.
// Conventions of examples/agent-chat's page: the assistant's text parts in
// `.msg.assistant .text`, every follower event in window.weirEvents with
// its performance.now().

import type { FollowEvent } from '@weirhq/client';
import { WeirChat } from '@weirhq/client/ai';

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

// The default start: POST /chat with useChat's body and the page's
// settings; on weir the app answers as for WorkflowChatTransport (the run's
// id in x-workflow-run-id) and the stream is /chat/<run>/stream.
const chat = new WeirChat({
  api: '/chat',
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
    .sendMessage({ text }, { body: { fail: fail.checked, same: same.checked, ownStart: ownStart.checked } })
    .catch(() => undefined) // the status shows it
    .finally(() => {
      window.weirTurns++;
    });
});
