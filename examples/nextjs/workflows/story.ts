import { getStepMetadata, getWritable, RetryableError } from 'workflow';

// The exactly-once scenario: a step streams a story's words to the run's
// stream and its first attempt fails after three of them; the retry tells
// another story. A reader of weir's records sees the first attempt's words
// live, then none of them once the retry's rewind arrives, and ends with
// the retry's words alone; weir's committed view holds them alone.
export async function story(topic: string) {
  'use workflow';
  const text = await tell(topic);
  await end();
  return text;
}

async function tell(topic: string) {
  'use step';
  const { attempt } = getStepMetadata();
  const words = attempt === 1 ? ['Once', ' upon', ' a'] : ['A', ' story', ' of ', topic, '.'];
  const w = getWritable<string>().getWriter();
  for (const word of words) await w.write(word);
  w.releaseLock();
  if (attempt === 1) throw new RetryableError('the model dropped the connection', { retryAfter: 100 });
  return words.join('');
}

async function end() {
  'use step';
  await getWritable<string>().close();
}
