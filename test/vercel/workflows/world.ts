import { createHook, sleep } from 'workflow';

// Workflows for what the world-testing port does not cover: waits, failed
// and cancelled runs, hook conflicts and disposal, a wide fan-out.

export async function sleeper(ms: number) {
  'use workflow';
  const before = await now();
  await sleep(ms);
  const after = await now();
  return { slept: after - before };
}

async function now() {
  'use step';
  return Date.now();
}

export async function thrower() {
  'use workflow';
  await now();
  throw new Error('the workflow itself threw');
}

// Waits on a hook that nobody resumes: the test cancels it, or a second run
// asks for the same token.
export async function hookWaiter(token: string) {
  'use workflow';
  const hook = createHook<{ n: number }>({ token });
  const first = await hook;
  return { got: first.n };
}

// Creates a hook, disposes of it at once, and goes on: its token is free.
export async function hookDisposer(token: string) {
  'use workflow';
  const hook = createHook<{ n: number }>({ token });
  hook.dispose();
  await sleep(500);
  return 'disposed';
}

export async function fanout(n: number) {
  'use workflow';
  const parts = await Promise.all(Array.from({ length: n }, (_, i) => square(i)));
  return { n: parts.length, sum: parts.reduce((a, b) => a + b, 0) };
}

async function square(i: number) {
  'use step';
  return i * i;
}
