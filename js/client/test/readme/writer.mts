// js/client/README.md, "Write exactly once" (see follow.mts). Never run.
declare const baseUrl: string;
declare const attempt: number;
declare function model(): AsyncIterable<string>;

// snippet:writer
import { StreamWriter } from '@weirhq/client';

const w = new StreamWriter({ baseUrl, path: 'chat/42', writer: 'answer-42', attempt, contentType: 'text/plain' });
for await (const token of model()) w.write(token); // no need to await each
await w.commit();
// end snippet
