// The world-testing suite's null-byte case: a step result with a NUL.
export async function nullByteWorkflow() {
  'use workflow';
  return await withNul();
}

async function withNul() {
  'use step';
  return 'null byte \0';
}
