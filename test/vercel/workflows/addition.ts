// The world-testing suite's addition: a workflow that adds two numbers in a step.
export async function addition(a: number, b: number) {
  'use workflow';
  return await add(a, b);
}

async function add(a: number, b: number) {
  'use step';
  return a + b;
}
