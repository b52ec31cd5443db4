// The test app: a Vercel Workflow v4 app with no framework. It serves the
// routes `wf build` generated (.well-known/workflow/v1/{flow,step}.js) and a
// few routes the tests drive it with. WORKFLOW_TARGET_WORLD picks the World
// (@weirhq/world, local, @workflow/world-postgres); the app's code is the
// same for all three.
//
// It is also the server @workflow/world-testing's test files spawn (they
// look for server.mjs beside them, and read {state: 'listening', info} on
// fd 3 when CONTROL_FD=3): the harness copies it there.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { createUIMessageStreamResponse } from 'ai';
import { getHookByToken, getRun, resumeHook, start } from 'workflow/api';
import { getWorld } from 'workflow/runtime';
import { worldStreamRoute } from '@weirhq/world';

// Node 20 lacks Promise.withResolvers, which the runtime's hooks use.
if (!Promise.withResolvers) {
  Promise.withResolvers = function () {
    let resolve, reject;
    const promise = new Promise((a, b) => ((resolve = a), (reject = b)));
    return { promise, resolve, reject };
  };
}

const appDir = process.env.WEIR_APP_DIR ?? process.cwd();
const require = createRequire(path.join(appDir, 'index.js'));
const wk = path.join(appDir, '.well-known/workflow/v1/');
const flow = require(wk + 'flow.js'); // v4's bundles are CommonJS
const step = require(wk + 'step.js');
const manifest = JSON.parse(fs.readFileSync(wk + 'manifest.json', 'utf8'));

// WEIR_TEST_FAIL_FLOW=n answers the first n flow deliveries with 500 (the
// fault tests' app that errors twice).
let failFlow = Number(process.env.WEIR_TEST_FAIL_FLOW ?? 0);
let flowDeliveries = 0;

const tagged = (_k, v) =>
  v instanceof Uint8Array ? { __type: 'Uint8Array', data: Buffer.from(v).toString('base64') } : v;
const json = (v, status = 200) =>
  new Response(JSON.stringify(v, tagged), { status, headers: { 'content-type': 'application/json' } });

function workflowOf(file, name) {
  const wf = manifest.workflows?.[file]?.[name];
  if (!wf) throw new Error(`no workflow ${name} in ${file}`);
  return wf;
}

const app = new Hono()
  .post('/.well-known/workflow/v1/flow', (c) => {
    flowDeliveries++;
    if (failFlow > 0) {
      failFlow--;
      return c.text('injected failure', 500);
    }
    return flow.POST(c.req.raw);
  })
  .post('/.well-known/workflow/v1/step', (c) => step.POST(c.req.raw))
  .get('/_stats', (c) => c.json({ flowDeliveries }))
  .post('/invoke', async (c) => {
    const { file, workflow, args = [] } = await c.req.json();
    const run = await start(workflowOf(file, workflow), args);
    return c.json({ runId: run.runId });
  })
  .post('/hooks/:token', async (c) => {
    const hook = await getHookByToken(c.req.param('token'));
    const { runId } = await resumeHook(hook.token, { ...(await c.req.json()), metadata: await hook.metadata });
    return c.json({ runId, hookId: hook.hookId });
  })
  .get('/hooks/:token', async (c) => {
    try {
      const hook = await getHookByToken(c.req.param('token'));
      return c.json({ hookId: hook.hookId, runId: hook.runId });
    } catch (err) {
      return c.json({ error: String(err) }, 404);
    }
  })
  .get('/runs/:runId', async (c) => json(await (await getWorld()).runs.get(c.req.param('runId'))))
  .get('/runs/:runId/events', async (c) => {
    const world = await getWorld();
    const events = [];
    let cursor;
    do {
      const page = await world.events.list({ runId: c.req.param('runId'), pagination: { cursor } });
      events.push(...page.data);
      cursor = page.hasMore ? page.cursor : undefined;
    } while (cursor);
    return json(events);
  })
  .post('/runs/:runId/cancel', async (c) => {
    await getRun(c.req.param('runId')).cancel();
    return c.json({ ok: true });
  })
  .get('/runs/:runId/readable', (c) => new Response(getRun(c.req.param('runId')).getReadable()))
  // The chat of test/chat.test.mjs: a DurableAgent turn (workflows/agent.ts)
  // read in a browser through worldStreamRoute, with weir's rewinds applied.
  .post('/chat', async (c) => {
    // useChat's body ({id, messages, trigger, ...body}) as @weirhq/client's
    // useChat and the AI SDK's transports send it: the prompt is the last
    // user message's text.
    const { messages, fail = false, same = false, ownStart = false } = await c.req.json();
    const last = Array.isArray(messages) ? messages.filter((m) => m?.role === 'user').at(-1) : undefined;
    const prompt = (last?.parts ?? []).map((p) => (p?.type === 'text' ? p.text : '')).join('');
    if (typeof prompt !== 'string' || !prompt) return c.text('a user message with text, please', 400);
    const run = await start(workflowOf('workflows/agent.ts', 'chat'), [{ prompt, fail: fail === true, same: same === true, ownStart: ownStart === true }]);
    if (process.env.WORKFLOW_TARGET_WORLD === '@weirhq/world') {
      // @workflow/ai's WorkflowChatTransport contract, as a Vercel app
      // writes it: the run's id in x-workflow-run-id, its readable as the
      // body (useChat on weir reads the header and follows /chat/<run>/stream).
      return createUIMessageStreamResponse({ stream: run.readable, headers: { 'x-workflow-run-id': run.runId } });
    }
    return c.json({ runId: run.runId, stream: `/chat/${run.runId}/readable` });
  })
  .get('/chat/:runId/stream', (c) => chatStream(c.req.raw))
  .get('/chat/:runId/readable', (c) => readableAsRecords(c.req.param('runId')))
  .get('/chat', () => new Response(CHAT_PAGE, { headers: { 'content-type': 'text/html; charset=utf-8', 'content-security-policy': "default-src 'self'" } }))
  // bench/render-bench.mjs's page: follow, served as its ES modules.
  .post('/bench/render', async (c) => {
    const { steps, tokens, paceMs } = await c.req.json();
    const run = await start(workflowOf('workflows/render.ts', 'render'), [steps, tokens, paceMs]);
    return c.json({ runId: run.runId });
  })
  .get('/bench/render', () => new Response(RENDER_PAGE, { headers: { 'content-type': 'text/html; charset=utf-8' } }))
  .get('/bench/client/:file', (c) => {
    const file = c.req.param('file');
    const dist = path.join(appDir, 'node_modules/@weirhq/client/dist/esm');
    if (!/^[a-z]+\.js$/.test(file) || !fs.existsSync(path.join(dist, file))) return c.text('no such file', 404);
    return new Response(fs.readFileSync(path.join(dist, file)), { headers: { 'content-type': 'text/javascript' } });
  })
  .get('/chat/app.js', async () => new Response(await chatBundle(), { headers: { 'content-type': 'text/javascript; charset=utf-8' } }));

// Who may read which run is the app's to decide; this test app lets anyone
// read any run of its own (the route forwards no cookie and no path of the
// browser's, only the run it picks).
const chatStream = worldStreamRoute({ stream: (req) => ({ runId: decodeURIComponent(new URL(req.url).pathname.split('/')[2] ?? '') }) });

// world-local and world-postgres keep no records to apply: for the
// comparison in test/chat.test.mjs, run.getReadable()'s chunks are served
// as weir's ndjson would carry them if every chunk were final (an anonymous
// data record each, then a close), so the same page shows what a reader of
// getReadable() sees.
function readableAsRecords(runId) {
  const enc = new TextEncoder();
  const off = (i) => '0000000000000000_' + String(i).padStart(16, '0');
  let n = 0;
  const line = (rec) => enc.encode(JSON.stringify({ offset: n, next_offset: off(n + 1), ...rec }) + '\n');
  const body = getRun(runId)
    .getReadable()
    .pipeThrough(
      new TransformStream({
        transform(chunk, c) {
          c.enqueue(line({ kind: 'data', writer: '', attempt: 0, seq: n, data: chunk }));
          n++;
        },
        flush(c) {
          c.enqueue(line({ kind: 'close' }));
        },
      }),
    );
  return new Response(body, { headers: { 'content-type': 'application/x-ndjson', 'weir-data-encoding': 'json', 'cache-control': 'no-store' } });
}

// The page of bench/render-bench.mjs: follows a stream with @weirhq/client's
// follow (each view given), renders each value's text as a text node (and
// removes voided ones), and records now − written for each chunk it shows,
// in the DOM and at the next frame.
const RENDER_PAGE = `<!doctype html><meta charset="utf-8"><title>render bench</title><pre id="out"></pre>
<script type="module">
import { follow } from "/bench/client/index.js";
const now = () => performance.timeOrigin + performance.now();
window.lat = {};
window.done = {};
window.start = (key, url, view) => {
  const lat = (window.lat[key] = { dom: [], frame: [] });
  const el = document.getElementById("out");
  const nodes = new Map();
  const f = follow({ url, view, waitForStreamMs: 60000, onEvent(ev) {
    if (ev.type === "append") {
      const ts = [];
      for (const c of ev.chunks) {
        const n = document.createTextNode(c.data.text);
        el.appendChild(n);
        nodes.set(c.offset, n);
        ts.push(c.data.t);
      }
      const t = now();
      for (const w of ts) lat.dom.push(t - w);
      requestAnimationFrame(() => { const t2 = now(); for (const w of ts) lat.frame.push(t2 - w); });
    } else if (ev.type === "rewind") {
      for (const c of ev.removed) { nodes.get(c.offset)?.remove(); nodes.delete(c.offset); }
    }
  } });
  f.done.then(() => { window.done[key] = true; }, (e) => { window.done[key] = "error: " + e.message; });
};
</script>`;

const CHAT_PAGE = `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>weir: a DurableAgent chat</title></head>
<body>
<main>
<div id="messages"></div>
<p id="status" data-status="ready">ready</p>
<form id="form">
<input id="input" value="Say hello">
<button id="send" type="submit">Send</button>
<label><input id="fail" type="checkbox"> the model fails after 3 tokens</label>
<label><input id="same" type="checkbox"> its retry says the same</label>
<label><input id="own-start" type="checkbox"> a start chunk of the workflow's own</label>
</form>
</main>
<script type="module" src="/chat/app.js"></script>
</body>
</html>
`;

// The page's script, bundled from chat-page/main.ts on first use: nothing
// built is committed. The page folds with the app's own ai (6.x, what
// DurableAgent writes), not the copy @weirhq/client's folder has for its
// own tests.
let bundle;
function chatBundle() {
  bundle ??= (async () => {
    const { build } = await import('esbuild');
    const fromApp = {
      name: 'ai-of-the-app',
      setup(b) {
        b.onResolve({ filter: /^ai$/ }, (args) => (args.pluginData === 'app' ? undefined : b.resolve('ai', { kind: args.kind, resolveDir: appDir, pluginData: 'app' })));
      },
    };
    const res = await build({
      entryPoints: [path.join(appDir, 'chat-page/main.ts')],
      bundle: true,
      format: 'esm',
      target: 'es2022',
      platform: 'browser',
      write: false,
      logLevel: 'warning',
      plugins: [fromApp],
      define: { 'process.env.NODE_ENV': '"production"' },
    });
    return res.outputFiles[0].text;
  })();
  return bundle;
}

serve({ fetch: app.fetch, port: Number(process.env.PORT) || 0, hostname: '127.0.0.1' }, async (info) => {
  process.env.PORT = String(info.port);
  // The queues of world-local and world-postgres deliver here.
  process.env.WORKFLOW_LOCAL_BASE_URL = `http://127.0.0.1:${info.port}`;
  const world = await getWorld();
  if (world.start) await world.start().catch((err) => console.error('world.start failed', err));
  const line = JSON.stringify({ state: 'listening', info: { port: info.port } }) + '\n';
  if (process.env.CONTROL_FD === '3') fs.createWriteStream('', { fd: 3 }).end(line);
  else process.stdout.write(line);
});

// SIGTERM ends the process cleanly (a --cpu-prof profile is written).
process.on('SIGTERM', () => process.exit(0));
