import { FatalError, getStepMetadata, RetryableError } from 'workflow';

// The world-testing suite's errors case: a step that fails for good, which
// the workflow catches, and one that asks to be retried 2 s later.
export async function retryableAndFatalErrorWorkflow() {
  'use workflow';
  let gotFatalError = false;
  try {
    await fatal();
  } catch {
    gotFatalError = true;
  }
  const retryableResult = await retryLater();
  return { gotFatalError, retryableResult };
}

async function fatal() {
  'use step';
  throw new FatalError('this step fails for good');
}

async function retryLater() {
  'use step';
  const { attempt, stepStartedAt } = getStepMetadata();
  if (attempt === 1) throw new RetryableError('try again in 2s', { retryAfter: 2000 });
  return { attempt, stepStartedAt, duration: Date.now() - stepStartedAt.getTime() };
}
