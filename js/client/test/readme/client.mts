// js/client/README.md, "The rest: Client" (see follow.mts). Never run.
declare const token: string;

// snippet:client
import { Client } from '@weirhq/client';

const c = new Client({ baseUrl: 'http://127.0.0.1:4437', token });
const { run } = await c.start('demo.tokens', { text: 'hello there' }, { idempotencyKey: 'greeting-1' });
const f = c.followRun(run.id, 'tokens', { waitForStreamMs: 10_000 });
// end snippet
