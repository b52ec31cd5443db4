import { MockLanguageModelV3 } from 'ai/test';

// `new MockLanguageModelV3(...)` inside a step's closure loses the closure's
// variables in the SWC plugin (vercel/workflow#1365, the workaround
// @workflow/ai's own mock providers use): the constructor is called from a
// plain function of another file.
export function mockModel(...args: ConstructorParameters<typeof MockLanguageModelV3>): MockLanguageModelV3 {
  return new MockLanguageModelV3(...args);
}
