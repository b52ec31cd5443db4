import { defineConfig } from 'vitest/config';

// One file at a time: each starts weir servers and app processes, and the
// machine has two cores.
export default defineConfig({
  test: {
    include: ['test/**/*.test.mjs'],
    setupFiles: ['./test/setup.mjs'],
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 120_000,
    reporters: ['verbose'],
  },
});
