import { createHook, getWritable } from 'workflow';

// The world-testing suite's hooks case: a hook the test resumes three times,
// each payload written to the run's stream as a JSON line.
interface Payload {
  data: string;
  done?: boolean;
  metadata?: unknown;
}

export async function collectWithHook(token: string, customData: string) {
  'use workflow';
  const hook = createHook<Payload>({ token, metadata: { customData } });
  const out = getWritable<Uint8Array>();
  const collected: Payload[] = [];
  await line(out, 'hookCreated');
  for await (const payload of hook) {
    await line(out, 'hookResumed', payload);
    collected.push(payload);
    if (payload.done) break;
  }
  return { collected };
}

async function line(out: WritableStream<Uint8Array>, event: string, payload?: unknown) {
  'use step';
  const w = out.getWriter();
  await w.write(new TextEncoder().encode(JSON.stringify({ event, payload }) + '\r\n'));
  w.releaseLock();
}
