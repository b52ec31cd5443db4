import { getStepMetadata, getWritable, RetryableError } from 'workflow';

// bench/render-bench.mjs's workload: steps steps, each streaming tokens
// values {text, t} to getWritable() one every paceMs, t the time it was
// written (performance.timeOrigin + performance.now(): one clock for every
// process of the machine). Every fourth step's first attempt fails half way
// and its retry says other things, as a sampled model would.
type Token = { text: string; t: number };

export async function render(steps: number, tokens: number, paceMs: number) {
  'use workflow';
  for (let s = 0; s < steps; s++) await speak(s, tokens, paceMs);
  await closeOut();
  return { steps };
}

async function speak(step: number, tokens: number, paceMs: number) {
  'use step';
  const { attempt } = getStepMetadata();
  const failing = step % 4 === 3 && attempt === 1;
  const w = getWritable<Token>().getWriter();
  for (let i = 0; i < (failing ? tokens / 2 : tokens); i++) {
    await w.write({ text: ` s${step}t${i}a${attempt}`, t: performance.timeOrigin + performance.now() });
    await new Promise((r) => setTimeout(r, paceMs));
  }
  w.releaseLock();
  if (failing) throw new RetryableError('the model dropped', { retryAfter: 50 });
}

async function closeOut() {
  'use step';
  await getWritable<Token>().close();
}
