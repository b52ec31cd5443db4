import { worldStreamRoute } from '@weirhq/world';

export const runtime = 'nodejs'; // the runtime's deserializer is Node's

// GET: the run's stream with weir's records (rewinds intact), each value
// decoded as getReadable() would: for @weirhq/client's follow. Who may read
// which run is the app's to decide; this one lets anyone read its own.
export const GET = worldStreamRoute({
  stream: (req) => ({ runId: decodeURIComponent(new URL(req.url).pathname.split('/')[3] ?? '') }),
});
