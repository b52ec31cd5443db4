import { createHash } from 'node:crypto';

// DurableAgent's start chunk. @workflow/ai's model step opens its stream
// with {type: 'start', messageId: generateId()}: an id made up per attempt,
// so every retry of the step differs from the attempt before at seq 0, and
// weir, which adopts a retry's chunks only while they are the same bytes,
// voids everything the failed attempt showed even when the model says the
// same words again (the person sees the text vanish and be retyped).
//
// The id names the message and nothing else: no other chunk refers to it.
// So the World writes that chunk with an id of its own making instead, the
// same on every attempt of the step: 16 characters of the AI SDK's
// generateId alphabet, from a hash of the run and the step. Then an
// identical retry is adopted chunk for chunk, and a divergent one is rewound
// from its first different token, not from seq 0 (docs/world.md,
// "DurableAgent's start chunk").
//
// Only that exact chunk is touched: the first chunk a step's attempt writes
// on a stream, in the runtime's devalue format, whose value is exactly
// {type: 'start', messageId: <16 letters and digits>}. A start chunk with
// metadata, an id of another shape (a stable one the app chose, say), or
// any other chunk goes as it came.

const enc = new TextEncoder();
/** The frame's bytes up to the id: [u32be length][format 'devl'][payload head]. */
const HEAD = enc.encode('devl[{"type":1,"messageId":2},"start","');
const TAIL = enc.encode('"]');
const ID_LEN = 16;
const FRAME_LEN = 4 + HEAD.length + ID_LEN + TAIL.length;
const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

function isAlnum(b: number): boolean {
  return (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a);
}

/** The messageId the World gives the start chunk of runId's step stepId. */
export function stableMessageId(runId: string, stepId: string): string {
  const h = createHash('sha256').update(`weir start chunk\0${runId}\0${stepId}`).digest();
  let id = '';
  // 62 does not divide 256: the first letters are a little likelier. The
  // id only has to be the same on every attempt and unlikely to collide.
  for (let i = 0; i < ID_LEN; i++) id += ALPHABET[h[i]! % ALPHABET.length];
  return id;
}

/**
 * Returns chunk with its messageId replaced by id() if chunk is exactly a
 * devalue-framed {type: 'start', messageId: <16 alphanumerics>}; else
 * chunk itself (id is not called: a step's first chunk is rarely a start
 * chunk, and the hash is not made for nothing). id must give 16
 * alphanumerics (stableMessageId's).
 */
export function withStableStart(chunk: Uint8Array, id: () => string): Uint8Array {
  if (chunk.byteLength !== FRAME_LEN) return chunk;
  const view = new DataView(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  if (view.getUint32(0, false) !== FRAME_LEN - 4) return chunk;
  for (let i = 0; i < HEAD.length; i++) if (chunk[4 + i] !== HEAD[i]) return chunk;
  const at = 4 + HEAD.length;
  for (let i = 0; i < ID_LEN; i++) if (!isAlnum(chunk[at + i]!)) return chunk;
  for (let i = 0; i < TAIL.length; i++) if (chunk[at + ID_LEN + i] !== TAIL[i]) return chunk;
  const out = chunk.slice();
  out.set(enc.encode(id()), at);
  return out;
}
