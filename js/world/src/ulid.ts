import { randomBytes } from 'node:crypto';

const ALPHABET = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';

let lastTime = -1;
let lastRandom: Uint8Array = new Uint8Array(10);

/**
 * Returns prefix_<ULID>: 48 bits of milliseconds and 80 random bits, in
 * Crockford base32, monotonic within this process (a second id in the same
 * millisecond is the first plus one).
 */
export function ulid(prefix: string, now: number = Date.now()): string {
  let rnd: Uint8Array;
  if (now <= lastTime) {
    now = lastTime;
    rnd = lastRandom.slice();
    for (let i = rnd.length - 1; i >= 0; i--) {
      rnd[i] = (rnd[i]! + 1) & 0xff;
      if (rnd[i] !== 0) break;
    }
  } else {
    rnd = new Uint8Array(randomBytes(10));
  }
  lastTime = now;
  lastRandom = rnd;
  let out = '';
  let t = now;
  for (let i = 0; i < 10; i++) {
    out = ALPHABET[t % 32]! + out;
    t = Math.floor(t / 32);
  }
  // 80 bits: 16 characters of 5 bits.
  let bits = 0;
  let acc = 0;
  let tail = '';
  for (const b of rnd) {
    acc = (acc << 8) | b;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      tail += ALPHABET[(acc >> bits) & 31]!;
    }
    acc &= (1 << bits) - 1;
  }
  return `${prefix}_${out}${tail}`;
}
