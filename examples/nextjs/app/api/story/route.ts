import { start } from 'workflow/api';
import { story } from '@/workflows/story';

// POST {topic}: starts a story, answers {runId}.
export async function POST(req: Request) {
  const { topic } = (await req.json()) as { topic?: unknown };
  if (typeof topic !== 'string' || !topic) return new Response('a topic, please', { status: 400 });
  const run = await start(story, [topic]);
  return Response.json({ runId: run.runId });
}
