// The world-testing suite's idempotency case: twenty steps at once, each
// returning a number; replays re-issue their step_created and meet conflicts.
export async function brokenWf(a: number, b: number) {
  'use workflow';
  const numbers = await Promise.all(Array.from({ length: 20 }, (_, i) => noop(i * a + b)));
  return { numbers };
}

async function noop(n: number) {
  'use step';
  return n;
}
