import { FatalError, getStepMetadata, getWritable, RetryableError } from 'workflow';

// The exactly-once scenario. Step A writes three chunks to getWritable() in
// its body and fails once; step B writes one chunk through a writable passed
// in as an argument and fails once; step F writes two chunks and fails for
// good (the workflow goes on); step C writes `end` and closes the stream.
// identical: each attempt writes the same bytes. divergent: each chunk says
// its attempt, and attempt 2 of A writes one chunk fewer.
type Mode = 'identical' | 'divergent';

export async function streamRetry(mode: Mode) {
  'use workflow';
  const out = getWritable<Uint8Array>();
  await stepA(mode);
  await stepB(out, mode);
  let failed = false;
  try {
    await stepF();
  } catch {
    failed = true;
  }
  await stepC(out);
  return { failed };
}

const line = (s: string) => new TextEncoder().encode(s + '\n');

async function stepA(mode: Mode) {
  'use step';
  const { attempt } = getStepMetadata();
  const w = getWritable<Uint8Array>().getWriter();
  const n = mode === 'divergent' && attempt > 1 ? 2 : 3;
  for (let i = 0; i < n; i++) await w.write(line(mode === 'divergent' ? `A${i}@${attempt}` : `A${i}`));
  w.releaseLock();
  if (attempt === 1) throw new RetryableError('A fails once', { retryAfter: 100 });
}

async function stepB(out: WritableStream<Uint8Array>, mode: Mode) {
  'use step';
  const { attempt } = getStepMetadata();
  const w = out.getWriter();
  await w.write(line(mode === 'divergent' ? `B@${attempt}` : 'B'));
  w.releaseLock();
  if (attempt === 1) throw new RetryableError('B fails once', { retryAfter: 100 });
}

async function stepF() {
  'use step';
  const w = getWritable<Uint8Array>().getWriter();
  await w.write(line('F0'));
  await w.write(line('F1'));
  w.releaseLock();
  throw new FatalError('F fails for good');
}

async function stepC(out: WritableStream<Uint8Array>) {
  'use step';
  const w = out.getWriter();
  await w.write(line('end'));
  await w.close();
}
