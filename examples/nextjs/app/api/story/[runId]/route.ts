import { getRun } from 'workflow/api';

// GET: the run's status, and its story once it completed.
export async function GET(_req: Request, ctx: { params: Promise<{ runId: string }> }) {
  const run = getRun((await ctx.params).runId);
  const status = await run.status;
  return Response.json({ status, ...(status === 'completed' && { story: await run.returnValue }) });
}
