// docs/world.md's Next.js code, "Reading a run's stream in the browser", as
// files of this app: next build type-checks them (tsconfig.json includes
// every .ts and .tsx file), and internal/doccheck (go test) fails if the
// doc's copy differs. Not under app/, so they are not routes: the example's
// own routes are app/api/chat.

// snippet:world-chat-route
// app/api/chat/route.ts: starts a turn (WorkflowChatTransport's contract: the run's id in a header)
import { createUIMessageStreamResponse, type UIMessage } from 'ai';
import { start } from 'workflow/api';
import { chat } from '@/workflows/chat'; // agent.stream({ messages, writable: getWritable<UIMessageChunk>() })

export async function POST(req: Request) {
  const { messages } = (await req.json()) as { messages: UIMessage[] };
  const run = await start(chat, [{ messages }]);
  // useChat from @weirhq/client/react reads only the header; WorkflowChatTransport reads the body too.
  return createUIMessageStreamResponse({ stream: run.readable, headers: { 'x-workflow-run-id': run.runId } });
}
// end snippet
