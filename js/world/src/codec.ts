// The World's JSON: bytes travel tagged as {"__type":"Uint8Array","data":
// "<base64>"} (world-local's encoding), everything else as JSON. weir stores
// the runtime's data as this JSON and gives it back unchanged.

/** The tag of bytes in the World's JSON. */
export const BYTES_TAG = 'Uint8Array';

interface TaggedBytes {
  __type: typeof BYTES_TAG;
  data: string;
}

function isTagged(v: unknown): v is TaggedBytes {
  return (
    typeof v === 'object' &&
    v !== null &&
    (v as { __type?: unknown }).__type === BYTES_TAG &&
    typeof (v as { data?: unknown }).data === 'string'
  );
}

/** Encodes value as the World's JSON. */
export function encode(value: unknown): string {
  return JSON.stringify(value, function (this: Record<string, unknown>, key: string, v: unknown) {
    // The holder's own value: Buffer's toJSON has run on v already.
    const raw = this[key];
    if (raw instanceof Uint8Array) {
      return { __type: BYTES_TAG, data: Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString('base64') };
    }
    return v;
  });
}

/** Decodes the World's JSON, tagged bytes back into Uint8Arrays. */
export function decode<T = unknown>(text: string): T {
  return JSON.parse(text, (_key, v: unknown) => (isTagged(v) ? new Uint8Array(Buffer.from(v.data, 'base64')) : v)) as T;
}

/** Returns the bytes of a chunk the runtime writes (a string is UTF-8). */
export function chunkBytes(chunk: string | Uint8Array): Uint8Array {
  return typeof chunk === 'string' ? new TextEncoder().encode(chunk) : chunk;
}

/** Frames chunks as weir's Weir-Framing: u32be: each a 4-byte big-endian length, then its bytes. */
export function frame(chunks: readonly Uint8Array[]): Uint8Array {
  let n = 0;
  for (const c of chunks) n += 4 + c.byteLength;
  const out = new Uint8Array(n);
  const view = new DataView(out.buffer);
  let off = 0;
  for (const c of chunks) {
    view.setUint32(off, c.byteLength);
    out.set(c, off + 4);
    off += 4 + c.byteLength;
  }
  return out;
}

/** The frame length that ends a World read: the stream is closed. */
export const FRAME_EOF = 0xffffffff;

/**
 * Deframer cuts a byte stream of u32be frames into chunks, however the
 * bytes arrive.
 */
export class Deframer {
  private buf: Uint8Array = new Uint8Array(0);
  /** eof is set once the end-of-stream frame was read. */
  eof = false;

  /** Pushes bytes and returns the whole chunks they complete. */
  push(bytes: Uint8Array): Uint8Array[] {
    const joined = new Uint8Array(this.buf.byteLength + bytes.byteLength);
    joined.set(this.buf, 0);
    joined.set(bytes, this.buf.byteLength);
    const out: Uint8Array[] = [];
    let off = 0;
    const view = new DataView(joined.buffer);
    while (!this.eof && joined.byteLength - off >= 4) {
      const n = view.getUint32(off);
      if (n === FRAME_EOF) {
        this.eof = true;
        off += 4;
        break;
      }
      if (joined.byteLength - off - 4 < n) break;
      out.push(joined.slice(off + 4, off + 4 + n));
      off += 4 + n;
    }
    this.buf = joined.slice(off);
    return out;
  }

  /** Reports bytes left that make no whole frame. */
  get pending(): number {
    return this.buf.byteLength;
  }
}
