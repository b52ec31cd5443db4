import { worldStreamRoute } from '@weirhq/world';

export const runtime = 'nodejs'; // the runtime's deserializer is Node's

// GET: the turn's stream with weir's records (rewinds intact), each value
// decoded as getReadable() would. Who may read which run is the app's to
// decide (its session, the run's owner); this example lets anyone read any
// run of its own.
export const GET = worldStreamRoute({
  stream: (req) => ({ runId: decodeURIComponent(new URL(req.url).pathname.split('/')[3] ?? '') }),
});
