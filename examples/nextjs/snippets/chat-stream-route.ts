// docs/world.md's stream route (see chat-route.ts).

// snippet:world-stream-route
// app/api/chat/[runId]/stream/route.ts: the run's stream, records and all
import { worldStreamRoute } from '@weirhq/world';
import { mayRead } from '@/lib/auth'; // the app's own check: is this run the visitor's?

export const runtime = 'nodejs'; // core's deserializer is Node's, not the edge's

export const GET = worldStreamRoute({
  // WEIR_URL and WEIR_TOKEN as the World reads them; the token never reaches the page.
  async stream(req) {
    const runId = decodeURIComponent(new URL(req.url).pathname.split('/')[3] ?? ''); // /api/chat/<runId>/stream
    if (!(await mayRead(req, runId))) return new Response('not yours', { status: 403 });
    return { runId }; // { runId, namespace } for getWritable({ namespace })
  },
});
// end snippet
