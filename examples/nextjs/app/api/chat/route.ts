import { createUIMessageStreamResponse, type UIMessage } from 'ai';
import { start } from 'workflow/api';
import { chat } from '@/workflows/chat';

// POST: starts a turn, as for @workflow/ai's WorkflowChatTransport: the run's
// id in x-workflow-run-id, its readable as the body. The page's useChat
// (@weirhq/client/react) reads the header and follows the run's stream at
// /api/chat/<runId>/stream, where weir's rewinds are kept.
export async function POST(req: Request) {
  const { messages, fail, same, ownStart } = (await req.json()) as { messages?: UIMessage[]; fail?: unknown; same?: unknown; ownStart?: unknown };
  if (!Array.isArray(messages) || messages.length === 0) return new Response('messages, please', { status: 400 });
  const run = await start(chat, [{ messages, fail: fail === true, same: same === true, ownStart: ownStart === true }]);
  return createUIMessageStreamResponse({ stream: run.readable, headers: { 'x-workflow-run-id': run.runId } });
}
