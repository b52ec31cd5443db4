'use client';

import { useEffect, useState, type FormEvent } from 'react';
import type { FollowEvent } from '@weirhq/client';
import { useChat, WorkflowChatTransport } from '@weirhq/client/react';

// The chat: a page written for the AI SDK's useChat with @workflow/ai's
// WorkflowChatTransport, with one import changed. Each message starts a
// DurableAgent turn (POST /api/chat); the answer streams from the turn's run
// through /api/chat/<runId>/stream with weir's rewinds applied: each token
// shown once, and a retry's voided tokens gone as soon as its rewind
// arrives. The checkboxes tell the scripted model to fail mid-answer.

declare global {
  interface Window {
    /** Every follower event with its time, and the turns ended: what the example's test reads. */
    weirEvents: { at: number; type: FollowEvent['type']; fromSeq?: number; removed?: number }[];
    weirTurns: number;
  }
}
if (typeof window !== 'undefined') {
  window.weirEvents ??= [];
  window.weirTurns ??= 0;
}

export default function Chat() {
  const [input, setInput] = useState('Say hello');
  // Set once React runs in the page: before it, a click would submit the form natively.
  const [hydrated, setHydrated] = useState(false);
  useEffect(() => setHydrated(true), []);
  const [script, setScript] = useState({ fail: false, same: false, ownStart: false });
  const { messages, status, error, rewinds, stream, sendMessage } = useChat({
    transport: new WorkflowChatTransport({ api: '/api/chat' }),
    onFollowEvent: (ev) =>
      window.weirEvents.push({ at: performance.now(), type: ev.type, ...(ev.type === 'rewind' ? { fromSeq: ev.fromSeq, removed: ev.removed.length } : {}) }),
    onFinish: () => window.weirTurns++,
  });
  const busy = status === 'submitted' || status === 'streaming';
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (!input.trim() || busy) return;
    void sendMessage({ text: input }, { body: script }).catch(() => undefined); // the status shows it
  };
  const box = (name: keyof typeof script, label: string) => (
    <label>
      <input id={name} type="checkbox" checked={script[name]} onChange={(e) => setScript({ ...script, [name]: e.target.checked })} /> {label}
    </label>
  );
  return (
    <main data-hydrated={hydrated ? 'yes' : 'no'} data-stream={stream?.stream ?? ''}>
      <h1>A DurableAgent on weir</h1>
      <div id="messages">
        {messages.map((m) => (
          <p key={m.id} className={`msg ${m.role}`}>
            <b>{m.role === 'user' ? 'you: ' : 'agent: '}</b>
            {m.parts.map((p, i) => (p.type === 'text' ? <span key={i} className="text">{p.text}</span> : null))}
          </p>
        ))}
      </div>
      <p id="status" data-status={status}>
        {status}
        {rewinds > 0 ? ` · a retried step's tokens were taken back (${rewinds})` : ''}
        {error ? ` · ${error.message}` : ''}
      </p>
      <form onSubmit={submit}>
        <input id="input" value={input} onChange={(e) => setInput(e.target.value)} />
        <button id="send" type="submit" disabled={busy}>
          Send
        </button>
        <fieldset>
          <legend>the scripted model</legend>
          {box('fail', 'fails after 3 tokens')}
          <br />
          {box('same', 'its retry says the same words')}
          <br />
          {box('ownStart', "the workflow writes its own start chunk (sendStart: false)")}
        </fieldset>
      </form>
    </main>
  );
}
