import { DurableAgent } from '@workflow/ai/agent';
import type { UIMessage, UIMessageChunk } from 'ai';
import { getStepMetadata, getWorkflowMetadata, getWritable } from 'workflow';
import { mockModel } from './mock-model';

// A chat turn: Vercel's DurableAgent, as it ships, on a scripted model that
// streams like an LLM and can be told to drop the connection. The model
// streams "Hel", "lo", ", wor", "ld", "!", 40 ms a token. With fail, its
// first attempt errors after 3 tokens and DurableAgent's model step is
// retried: the retry says the same words (same), or others ("Hi there!").
//
// DurableAgent's start chunk carries a messageId it makes up per attempt;
// @weirhq/world writes it with one id for every attempt of the step, so a
// retry that says the same is adopted and the page never takes a token back
// (docs/world.md). ownStart writes the start chunk in a step of the
// workflow's own with sendStart: false, the way to get that on other Worlds.

export interface ChatTurn {
  messages: UIMessage[];
  fail?: boolean;
  same?: boolean;
  ownStart?: boolean;
}

export async function chat(turn: ChatTurn) {
  'use workflow';
  const writable = getWritable<UIMessageChunk>();
  if (turn.ownStart) await writeStart(writable, `msg-${getWorkflowMetadata().workflowRunId}`);
  const agent = new DurableAgent({ model: scriptedModel(turn.fail === true, turn.same === true) });
  await agent.stream({
    messages: turn.messages.map((m) => ({
      role: m.role === 'assistant' ? ('assistant' as const) : ('user' as const),
      content: m.parts.map((p) => (p.type === 'text' ? p.text : '')).join(''),
    })),
    writable,
    sendStart: !turn.ownStart,
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

function scriptedModel(fail: boolean, same: boolean) {
  return async () => {
    'use step';
    // Bound at the step body's level so that the SWC plugin sees them (as
    // @workflow/ai's own mock models do).
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
                c.enqueue({ type: 'response-metadata', id: 'r', modelId: 'scripted', timestamp: new Date(0) });
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
