// mayRead says whether a request may read a run's stream: the check
// docs/world.md's stream route (snippets/chat-stream-route.ts) calls. This
// example has no sessions, so it lets anyone read any run; a real app checks
// its session here (who is signed in, and whether the run is theirs).
export async function mayRead(req: Request, runId: string): Promise<boolean> {
  return true;
}
