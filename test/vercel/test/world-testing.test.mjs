import path from 'node:path';
import { afterAll, beforeAll, describe } from 'vitest';
import { FILES, prepareHarness } from './harness.mjs';
import { newStore, startWeir, weirEnv } from './procs.mjs';

// The five core tests of @workflow/world-testing, unmodified, against the
// test app on weir's World, on each store.
const harness = prepareHarness();
afterAll(() => harness.cleanup());
const suites = await Promise.all(FILES.map((f) => import(path.join(harness.dir, `${f}.mjs`))));

for (const kind of ['sqlite', 'postgres']) {
  describe(`world-testing on weir (${kind})`, () => {
    let weir, store;
    const saved = {};
    beforeAll(async () => {
      store = newStore(kind);
      weir = await startWeir(store.spec);
      // The test files spawn the app with the environment of this process.
      for (const [k, v] of Object.entries(weirEnv(weir))) {
        saved[k] = process.env[k];
        process.env[k] = v;
      }
    });
    afterAll(async () => {
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
      await weir?.stop();
      await store?.drop();
    });
    for (const suite of suites) for (const register of Object.values(suite)) register('@weirhq/world');
  });
}
