import { DurableAgent } from '@workflow/ai/agent';
import type { UIMessageChunk } from 'ai';
import { getStepMetadata, getWorkflowMetadata, getWritable } from 'workflow';
import { mockModel } from './mock-model';

// A DurableAgent chat turn on a model that streams like an LLM and can
// drop the connection: the workflow of test/chat.test.mjs.
//
// The model (like @workflow/ai's mockTextModel: a 'use step' factory that
// returns a MockLanguageModelV3) streams "Hel", "lo", ", wor", "ld", "!",
// 40 ms a token. With fail, its first attempt errors after 3 tokens and
// DurableAgent's model step is retried: the retry streams "Hi", " there",
// "!" (same: false), or the same tokens again (same: true).
//
// DurableAgent's own start chunk carries a random messageId (generateId()),
// so every retry of its model step writes another first chunk: weir sees a
// divergence at seq 0, whatever the model says. ownStart writes a start
// chunk with the run's id as messageId in a step of its own, and asks the
// agent for none (sendStart: false, as its docs say for a start chunk
// written before agent.stream()): then an identical retry writes identical
// bytes and is adopted.

export interface ChatInput {
  prompt: string;
  fail?: boolean;
  same?: boolean;
  ownStart?: boolean;
}

export async function chat(input: ChatInput) {
  'use workflow';
  const writable = getWritable<UIMessageChunk>();
  if (input.ownStart) await writeStart(writable, `msg-${getWorkflowMetadata().workflowRunId}`);
  const agent = new DurableAgent({ model: flakyModel(input.fail === true, input.same === true) });
  await agent.stream({
    messages: [{ role: 'user', content: input.prompt }],
    writable,
    sendStart: !input.ownStart,
  });
  return { ok: true };
}

async function writeStart(writable: WritableStream<UIMessageChunk>, messageId: string) {
  'use step';
  const w = writable.getWriter();
  await w.write({ type: 'start', messageId });
  w.releaseLock();
}

const TOKENS = ['Hel', 'lo', ', wor', 'ld', '!'];
const RETRY_TOKENS = ['Hi', ' there', '!'];
const FAIL_AFTER = 3;
const TOKEN_MS = 40;

function flakyModel(fail: boolean, same: boolean) {
  return async () => {
    'use step';
    // Bound at the step body's level so that the SWC plugin sees them (as
    // @workflow/ai's mockTextModel does).
    const _fail = fail;
    const _same = same;
    // The factory runs inside DurableAgent's model step: its attempt.
    const { attempt } = getStepMetadata();
    const tokens = attempt > 1 && !_same ? RETRY_TOKENS : TOKENS;
    const failAfter = _fail && attempt === 1 ? FAIL_AFTER : -1;
    return mockModel({
      doStream: async () => {
        let i = 0;
        let started = false;
        return {
          stream: new ReadableStream({
            async pull(c) {
              if (!started) {
                started = true;
                c.enqueue({ type: 'stream-start', warnings: [] });
                c.enqueue({ type: 'response-metadata', id: 'r', modelId: 'flaky', timestamp: new Date(0) });
                c.enqueue({ type: 'text-start', id: '1' });
                return;
              }
              await new Promise((r) => setTimeout(r, TOKEN_MS));
              if (i === failAfter) {
                c.error(new Error(`the model dropped the connection after ${failAfter} tokens (attempt ${attempt})`));
                return;
              }
              if (i < tokens.length) {
                c.enqueue({ type: 'text-delta', id: '1', delta: tokens[i++]! });
                return;
              }
              c.enqueue({ type: 'text-end', id: '1' });
              c.enqueue({
                type: 'finish',
                finishReason: { unified: 'stop', raw: 'stop' },
                usage: {
                  inputTokens: { total: 5, noCache: 5, cacheRead: undefined, cacheWrite: undefined },
                  outputTokens: { total: tokens.length, text: tokens.length, reasoning: undefined },
                },
              });
              c.close();
            },
          }),
        };
      },
    });
  };
}
