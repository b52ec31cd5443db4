// js/client/README.md's snippets are type-checked here (tsc -p
// tsconfig.test.json, in npm test) and compared with the README by
// internal/doccheck (go test). Never run: each needs a live server. The
// declarations stand for what the README leaves to the reader.
import type { Chunk } from '@weirhq/client';

declare const runId: string;
declare function render(chunks: readonly Chunk[]): void;

// snippet:follow
import { follow, runStreamUrl } from '@weirhq/client';

const f = follow({
  url: runStreamUrl('http://127.0.0.1:4437', runId, 'tokens'),
  waitForStreamMs: 10_000, // a run's stream exists once its first step writes
  onEvent(ev, snapshot) {
    render(snapshot.chunks); // the visible chunks, in offset order
  },
});
const final = await f.done; // once the stream is closed
// end snippet
