// A writer's sequence: weir's exactly-once extension numbers a writer
// attempt's chunks from 0 (Weir-Seq), and every request must carry the next
// seq. Chain hands out seqs in call order and sends the requests one after
// the other, so that a retried request re-sends the same seqs (which weir
// acknowledges as retransmits, or adopts from an earlier attempt) and no
// two requests of one writer race.

/** The most chunks and bytes one request carries. */
export const MAX_CHUNKS = 1000;
export const MAX_BYTES = 8 << 20;

/** Splits chunks into requests of at most MAX_CHUNKS and MAX_BYTES. */
export function batches(chunks: readonly Uint8Array[]): Uint8Array[][] {
  const out: Uint8Array[][] = [];
  let cur: Uint8Array[] = [];
  let bytes = 0;
  for (const c of chunks) {
    if (cur.length > 0 && (cur.length === MAX_CHUNKS || bytes + c.byteLength > MAX_BYTES)) {
      out.push(cur);
      cur = [];
      bytes = 0;
    }
    cur.push(c);
    bytes += c.byteLength;
  }
  if (cur.length > 0) out.push(cur);
  return out;
}

/** Chain is one writer attempt's sequence of requests. */
export class Chain {
  /** next is the seq the next chunk gets. */
  next = 0;
  /** lastUsed is when a write last began, for pruning. */
  lastUsed = Date.now();
  private tail: Promise<unknown> = Promise.resolve();

  /**
   * Sends chunks after every earlier write of this chain: send gets each
   * batch with the seq of its first chunk.
   */
  write(chunks: readonly Uint8Array[], send: (seq: number, batch: Uint8Array[]) => Promise<void>): Promise<void> {
    this.lastUsed = Date.now();
    const parts = batches(chunks).map((b) => {
      const seq = this.next;
      this.next += b.length;
      return { seq, b };
    });
    const p = this.tail.then(async () => {
      for (const { seq, b } of parts) await send(seq, b);
    });
    // A failed write does not stop the next one from being tried.
    this.tail = p.catch(() => undefined);
    return p;
  }

  /** Resolves once every write begun so far has ended. */
  settled(): Promise<unknown> {
    return this.tail;
  }
}
