import { getWritable } from 'workflow';

// weir bench world's workload: steps steps, each writing chunks chunks of
// size bytes to the run's stream, one after the other.
export async function benchRun(steps: number, chunks: number, size: number) {
  'use workflow';
  for (let s = 0; s < steps; s++) await writeChunks(s, chunks, size);
  await closeOut();
  return { steps };
}

async function writeChunks(step: number, chunks: number, size: number) {
  'use step';
  const w = getWritable<Uint8Array>().getWriter();
  for (let i = 0; i < chunks; i++) {
    const body = `${Date.now()} ${step}/${i} `;
    await w.write(new TextEncoder().encode(body.padEnd(size - 1, '.') + '\n'));
  }
  w.releaseLock();
}

async function closeOut() {
  'use step';
  await getWritable<Uint8Array>().close();
}
