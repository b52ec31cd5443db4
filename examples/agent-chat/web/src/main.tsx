// The page of examples/agent-chat: a chat on @weirhq/client's useChat (the
// AI SDK's useChat, with weir's rewinds applied).
// Each message starts a turn (POST /api/chat); the answer streams from the
// turn's run stream through the app's route, with weir's rewinds applied.

import { StrictMode, useState, type FormEvent } from 'react';
import { createRoot } from 'react-dom/client';
import type { UIMessage } from 'ai';
import { WeirChat, type StartRequest, type StartedTurn } from '@weirhq/client/ai';
import { useChat, useFollow } from '@weirhq/client/react';
import type { FollowEvent } from '@weirhq/client';

/** What the page tells the agent besides the conversation. */
interface Failure {
  fail: boolean;
  afterTokens: number;
  same: boolean;
}

/** Every follower event with its arrival time, for tests and the curious (window.weirEvents). */
interface Logged {
  at: number;
  type: FollowEvent['type'];
  removed?: number;
}

declare global {
  interface Window {
    weirEvents: Logged[];
    weirChat: WeirChat;
  }
}
window.weirEvents = [];

const failure: Failure = { fail: false, afterTokens: 3, same: false };

function textOf(m: UIMessage): string {
  return m.parts.map((p) => (p.type === 'text' ? p.text : '')).join('');
}

// The agent takes {messages: [{role, text}], fail}: the page's UIMessages,
// flattened to their text.
async function start(req: StartRequest): Promise<StartedTurn> {
  const body = {
    messages: req.messages.map((m) => ({ role: m.role, text: textOf(m) })),
    ...(failure.fail ? { fail: { afterTokens: failure.afterTokens, same: failure.same } } : {}),
  };
  const res = await fetch('/api/chat', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Idempotency-Key': crypto.randomUUID() },
    body: JSON.stringify(body),
    signal: req.signal,
  });
  if (!res.ok) throw new Error(`the agent refused: ${res.status} ${(await res.text()).trim()}`);
  return (await res.json()) as StartedTurn;
}

const chat = new WeirChat({
  start,
  onFollowEvent: (ev) => {
    window.weirEvents.push({ at: performance.now(), type: ev.type, ...(ev.type === 'rewind' ? { removed: ev.removed.length } : {}) });
  },
});
window.weirChat = chat;

function Part({ part }: { part: UIMessage['parts'][number] }) {
  if (part.type === 'text') return <span className="text">{part.text}</span>;
  if (part.type === 'step-start') return <hr className="step" />;
  if (part.type.startsWith('tool-') && 'toolCallId' in part) {
    const name = part.type.slice('tool-'.length);
    const out = part.state === 'output-available' ? JSON.stringify(part.output) : part.state;
    return (
      <div className="tool" data-tool={name} data-state={part.state}>
        🔧 {name}({JSON.stringify(part.input ?? {})}) → {out}
      </div>
    );
  }
  return null;
}

function App() {
  const { messages, status, error, rewinds, sendMessage, stop, stream } = useChat({ chat });
  // The turn's records as a second reader sees them (useFollow): how many
  // chunks are visible, how many rewinds it applied.
  const records = useFollow(stream?.stream, { waitForStreamMs: 30_000 });
  const [input, setInput] = useState('What is the weather in Lisbon?');
  const [fail, setFail] = useState(failure);
  const busy = status === 'submitted' || status === 'streaming';
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (!input.trim() || busy) return;
    Object.assign(failure, fail);
    void sendMessage(input).catch(() => {});
    setInput('');
  };
  return (
    <main>
      <h1>weir agent chat</h1>
      <div id="messages">
        {messages.map((m) => (
          <div key={m.id} className={`msg ${m.role}`} data-role={m.role} data-id={m.id}>
            {m.parts.map((p, i) => (
              <Part key={i} part={p} />
            ))}
          </div>
        ))}
      </div>
      <p id="status" data-status={status}>
        {status}
        {rewinds > 0 ? ` · ${rewinds} rewind${rewinds > 1 ? 's' : ''}: a retried step's voided tokens were dropped` : ''}
        {error ? ` · ${error.message}` : ''}
      </p>
      {stream ? (
        <p id="records" data-state={records.state} data-chunks={records.chunks.length} data-rewinds={records.rewinds}>
          stream: {records.state}, {records.chunks.length} visible chunks, {records.rewinds} rewinds
        </p>
      ) : null}
      <form onSubmit={submit}>
        <input id="input" value={input} onChange={(e) => setInput(e.target.value)} placeholder="Ask about a city's weather" />
        <button id="send" type="submit" disabled={busy}>
          Send
        </button>
        {busy ? (
          <button id="stop" type="button" onClick={() => void stop()}>
            Stop
          </button>
        ) : null}
        <fieldset>
          <label>
            <input id="fail" type="checkbox" checked={fail.fail} onChange={(e) => setFail({ ...fail, fail: e.target.checked })} /> fail
            mid-stream after
          </label>{' '}
          <input
            id="fail-after"
            type="number"
            min={0}
            max={100}
            value={fail.afterTokens}
            onChange={(e) => setFail({ ...fail, afterTokens: Number(e.target.value) })}
          />{' '}
          tokens;{' '}
          <label>
            <input id="same" type="checkbox" checked={fail.same} onChange={(e) => setFail({ ...fail, same: e.target.checked })} /> the
            retry says the same
          </label>
        </fieldset>
      </form>
    </main>
  );
}

const root = document.getElementById('root');
if (root === null) throw new Error('no #root');
createRoot(root).render(
  <StrictMode>
    <App />
  </StrictMode>,
);
