// js/world/README.md's route (see chat-route.ts): @weirhq/world is
// installed here from its tarball, as a user installs it.

// snippet:world-readme-route
import { worldStreamRoute } from '@weirhq/world';

// Next.js: app/api/runs/[runId]/stream/route.ts
export const GET = worldStreamRoute({
  stream: (req) => ({ runId: new URL(req.url).pathname.split('/')[3]! }), // after your own authorization
});
// end snippet
