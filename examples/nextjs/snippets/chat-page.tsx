// docs/world.md's chat page (see chat-route.ts).

// snippet:world-chat-page
// app/chat/page.tsx
'use client';
import { useChat } from '@weirhq/client/react'; // was: '@ai-sdk/react', with WorkflowChatTransport

export default function Chat() {
  const { messages, status, rewinds, sendMessage } = useChat({ api: '/api/chat' });
  return (
    <main>
      {messages.map((m) => (
        <p key={m.id} className={m.role}>
          {m.parts.map((p, i) => (p.type === 'text' ? <span key={i}>{p.text}</span> : null))}
        </p>
      ))}
      <button disabled={status === 'streaming'} onClick={() => sendMessage({ text: 'Say hello' })}>Send</button>
      {rewinds > 0 ? <small>a retried step's tokens were taken back</small> : null}
    </main>
  );
}
// end snippet
