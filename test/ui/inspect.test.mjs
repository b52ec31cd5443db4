// The UI answers the questions a person brings to a run, in headless
// Chromium against a real `weir server` (WEIR_STORE picks the store; CI runs
// this on SQLite and on PostgreSQL):
//
//   - an agent's run (demo.agent: parallel searches into one stream, a
//     retried draft, a child run, a hook): what it waits on and since when,
//     each attempt's duration on one axis, the hook's payload delivered from
//     the page (a bad one refused first), its input and result;
//   - hostile inputs and step names are shown as text, never run;
//   - the runs list searches by id prefix, status and creation time;
//   - a workflow no worker serves is named in a warning.
//
//   WEIR_BIN=/path/to/weir node --test inspect.test.mjs
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { startServer, openPage, until, unique, shots, tag } from "./harness.mjs";

test("an agent's run: parallel steps, a retry, a child, a hook delivered from the page", { timeout: 120_000 }, async (t) => {
  const { url, call } = await startServer(t);
  const { page, errors } = await openPage(t, url);
  const hook = unique("ui-agent-approve");
  const run = await call("POST", "/v1/runs", { workflow: "demo.agent", input: { topic: "exactly-once streams", token: hook, flaky: true } });
  await page.goto(`${url}/ui/#/runs/${encodeURIComponent(run.id)}`);

  // What it waits on: the hook, named, with how long and until when.
  const wait = page.locator('#run-waiting li[data-kind="hook"]');
  await wait.waitFor({ timeout: 30_000 });
  const waitText = await wait.textContent();
  assert.match(waitText, new RegExp(`a payload for hook “${hook}”`));
  assert.match(waitText, /for \d+ (ms|\.?\d* ?s)/);
  assert.match(waitText, /until .* \(in \d+(\.\d+)? (s|min)/, `no timeout in: ${waitText}`);
  assert.equal(await page.locator("#run-status").textContent(), "running");

  // Every attempt with its duration in milliseconds; the two searches in
  // lanes of their own, side by side on the axis.
  const attempt = (step, n) => page.locator(`#attempts tr.attempt[data-step="${step}"][data-attempt="${n}"]`);
  await attempt("draft", 2).waitFor({ timeout: 10_000 });
  const ms = async (step, n) => Number(await attempt(step, n).locator(".duration").getAttribute("data-ms"));
  const web = await ms("search web", 1), docs = await ms("search docs", 1);
  assert.ok(web >= 10 && web < 1000, `search web took ${web} ms`);
  assert.ok(docs >= 600 && docs < 10_000, `search docs took ${docs} ms`);
  assert.match(await attempt("search web", 1).locator(".duration").textContent(), /^\d+ ms$/);
  assert.equal(await attempt("draft", 1).locator(".outcome").textContent(), "failed, retried");
  assert.match(await attempt("draft", 1).textContent(), /connection to the model dropped/);
  assert.equal(await attempt("draft", 2).locator(".outcome").textContent(), "completed");
  assert.equal(await page.locator("#attempts tr.backoff").count(), 1);
  const lane = (name) => page.locator("#gantt .gantt-row", { has: page.locator(".lane-name", { hasText: new RegExp(`^${name}$`) }) });
  assert.match(await lane("search web").locator(".dur").textContent(), /· \d+ ms$/);
  const boxes = await Promise.all(["search web", "search docs"].map((n) => lane(n).locator(".bar.attempt").boundingBox()));
  assert.ok(boxes[0].width >= 3, `a 10 ms bar is ${boxes[0].width} px wide`);
  assert.ok(boxes[0].x < boxes[1].x + boxes[1].width && boxes[1].x < boxes[0].x + boxes[0].width, `the searches do not overlap: ${JSON.stringify(boxes)}`);
  assert.equal(await lane("draft").locator(".bar.attempt").count(), 2);
  assert.equal(await lane("draft").locator(".bar.backoff").count(), 1);
  assert.ok(await page.locator("#gantt .tick").count() >= 3, "the axis has no ticks");
  // The child: a lane, and a link in the timeline.
  const child = page.locator('#gantt .gantt-row[data-kind="child"]');
  await child.waitFor({ timeout: 10_000 });
  assert.equal(await page.locator("#timeline a.child-link").count(), 1);
  // Its input, its run events, its streams: the notes by writer, in lanes.
  assert.match(await page.locator("#run-input").textContent(), /exactly-once streams/);
  await page.locator('#run-state tr[data-key="status"]', { hasText: "waiting for approval" }).waitFor({ timeout: 10_000 });
  await page.getByLabel("by writer").check();
  const notes = page.locator('.stream[data-stream="notes"]');
  await until("two writers' lanes in the notes", async () => (await notes.locator(".lane").count()) === 2);
  await page.screenshot({ path: join(shots, `ui-agent-waiting${tag}.png`), fullPage: true });

  // The hook's form: a payload that is not JSON is refused in the page;
  // a JSON one is delivered, and the run ends with it.
  const form = page.locator(`#hooks li[data-hook="${hook}"] form`);
  await form.locator("textarea").fill("{approved: yes");
  await form.getByRole("button", { name: "Deliver payload" }).click();
  await form.locator(".form-msg.error", { hasText: "not JSON" }).waitFor({ timeout: 5_000 });
  assert.equal(await page.locator("#run-status").textContent(), "running");
  await form.locator("textarea").fill('{"approved": true, "by": "ann"}');
  await form.getByRole("button", { name: "Deliver payload" }).click();
  await form.locator(".form-msg", { hasText: "delivered" }).waitFor({ timeout: 10_000 });
  await page.locator("#run-status.completed").waitFor({ timeout: 30_000 });
  await until("the result", async () => /"by": "ann"/.test(await page.locator("#run-result").textContent()));
  assert.match(await page.locator("#run-meta").textContent(), /took \d/);
  assert.equal(await page.locator("#run-waiting li").count(), 0);
  await page.getByLabel("committed").check();
  const answer = page.locator('.stream[data-stream="answer"] .body');
  await until("the committed answer", async () => (await answer.textContent()).startsWith("Here is what I found about exactly-once streams"));
  await page.screenshot({ path: join(shots, `ui-agent-done${tag}.png`), fullPage: true });

  // The child's page links back to its parent.
  await page.locator("#timeline a.child-link").click();
  await page.locator("#run-meta a.parent-link", { hasText: run.id }).waitFor({ timeout: 10_000 });
  await page.locator("#run-status.completed").waitFor({ timeout: 10_000 });
  assert.deepEqual(errors, []);
});

test("hostile inputs, outputs and step names are shown as text", { timeout: 90_000 }, async (t) => {
  const { url, call } = await startServer(t);
  const { page, errors } = await openPage(t, url);
  const evil = ['<img src=x onerror="window.__pwned=1">', "<script>window.__pwned=2</script>", '"><svg onload=window.__pwned=3>'];
  const hook = unique("ui-hostile");
  const run = await call("POST", "/v1/runs", { workflow: "demo.agent", input: { topic: evil[0], sources: evil, token: hook } });
  await page.goto(`${url}/ui/#/runs/${encodeURIComponent(run.id)}`);
  await page.locator('#run-waiting li[data-kind="hook"]').waitFor({ timeout: 30_000 });
  await call("POST", `/v1/hooks/${encodeURIComponent(hook)}`, { note: evil[1] });
  await page.locator("#run-status.completed").waitFor({ timeout: 30_000 });
  await until("the result", async () => (await page.locator("#run-result").textContent()).includes("window.__pwned=2"));
  for (const s of evil) {
    assert.ok(await page.locator("#gantt .lane-name", { hasText: `search ${s}` }).count() === 1, `no lane named search ${s}`);
  }
  assert.ok((await page.locator("#run-input").textContent()).includes(JSON.stringify(evil[0])), "the input is not shown as it is");
  assert.ok((await page.locator('.stream[data-stream="notes"] .body').textContent()).includes(evil[2]));
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  assert.equal(await page.locator("#main img, #main svg, #main script").count(), 0);
  await page.screenshot({ path: join(shots, `ui-hostile${tag}.png`), fullPage: true });
  assert.deepEqual(errors, []);
});

test("the runs list searches by id prefix, status and creation time", { timeout: 60_000 }, async (t) => {
  const { url, call } = await startServer(t);
  const prefix = unique("ui-search");
  const text = { text: "a b", delay: 0 };
  for (const s of ["a-1", "a-2", "b-1"]) await call("POST", "/v1/runs", { workflow: "demo.tokens", id: `${prefix}-${s}`, input: text });
  const { page, errors } = await openPage(t, url);
  const rows = () => page.locator("table.runs tbody tr").evaluateAll((trs) => trs.map((tr) => tr.dataset.run));
  await page.locator("#f-q").fill(`${prefix}-a`);
  await until("the a runs", async () => JSON.stringify(await rows()) === JSON.stringify([`${prefix}-a-2`, `${prefix}-a-1`]));
  assert.match(page.url(), /q=ui-search/); // the search is in the link
  await page.locator("#f-q").fill(prefix);
  await page.locator("#f-status").selectOption("completed");
  await until("three completed runs", async () => (await rows()).length === 3);
  // A range that ends before the runs were made finds none.
  await page.locator("#f-before").fill("2020-01-01T00:00:00");
  await page.locator("#f-before").dispatchEvent("change");
  await page.locator("#runs-more", { hasText: "No run matches this search." }).waitFor({ timeout: 10_000 });
  await page.getByRole("button", { name: "Clear" }).click();
  await until("every run again", async () => (await rows()).length >= 3);
  assert.deepEqual(errors, []);
});

test("a workflow that no worker serves is named in a warning", { timeout: 60_000 }, async (t) => {
  // A server that claims nothing (--no-worker) on a store of its own.
  const { url, call } = await startServer(t, { args: ["--no-worker"], sqlite: true });
  const run = await call("POST", "/v1/runs", { workflow: "demo.tokens", input: { text: "never runs" } });
  const { page, errors } = await openPage(t, url);
  const warning = page.locator('#no-worker .warning[data-workflow="demo.tokens"]');
  await warning.waitFor({ timeout: 30_000 });
  assert.match(await warning.textContent(), /No worker has claimed a run of demo\.tokens for \d+(\.\d+)? s .*Is a worker running with demo\.tokens registered\?/);
  await page.screenshot({ path: join(shots, `ui-no-worker${tag}.png`), fullPage: true });
  await warning.locator("a").click();
  const wait = page.locator('#run-waiting li[data-kind="worker"]');
  await wait.waitFor({ timeout: 10_000 });
  assert.match(await wait.textContent(), /a worker to claim it/);
  assert.equal(await page.locator("#run-id").textContent(), run.id);
  assert.deepEqual(errors, []);
});

test("the time axis reads for 10 ms steps and for 10 minute ones", { timeout: 60_000 }, async (t) => {
  const { url } = await startServer(t, { sqlite: true });
  const { page, errors } = await openPage(t, url);
  const got = await page.evaluate(() => ({
    durs: [fmtDur(0.4), fmtDur(10), fmtDur(1234), fmtDur(12_345), fmtDur(603_000), fmtDur(7_500_000)],
    offsets: [fmtOffset(12), fmtOffset(12_345), fmtOffset(600_000)],
    ticks: [5, 10, 250, 9_000, 600_000, 7_200_000].map((span) => { const ts = ticks(span); return [ts.length, ts[1]]; }),
  }));
  assert.deepEqual(got.durs, ["<1 ms", "10 ms", "1.23 s", "12.3 s", "10 min 3 s", "2 h 5 min"]);
  assert.deepEqual(got.offsets, ["0.012 s", "12.3 s", "10:00"]);
  for (const [i, [n, step]] of got.ticks.entries()) {
    assert.ok(n >= 2 && n <= 9, `span ${i}: ${n} ticks`);
    assert.ok([1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5, 36e5].includes(step), `span ${i}: a tick every ${step} ms`);
  }
  assert.deepEqual(errors, []);
});

test("schedules are listed with what they did, and paused from the page", { timeout: 60_000 }, async (t) => {
  // A store of its own: a schedule left behind would tick on in a shared one.
  const { url, call } = await startServer(t, { sqlite: true });
  const name = unique("ui-beat").replace(/[^A-Za-z0-9_.-]/g, "-");
  await call("PUT", `/v1/schedules/${name}`, { workflow: "demo.tokens", input: { text: "<img src=x onerror=alert(1)>", delay: 0 }, spec: "@every 500ms", overlap: "allow" });
  await call("PUT", "/v1/schedules/nightly", { workflow: "demo.tokens", spec: "30 2 * * *", tz: "America/New_York", paused: true });
  const { page, errors } = await openPage(t, url);
  const row = page.locator(`#schedules tr[data-schedule="${name}"]`);
  await row.waitFor({ timeout: 20_000 });
  // Its ticks start runs; the row links the last one.
  await until("a tick's run linked", async () => (await row.locator("a").count()) === 1, 30_000);
  assert.match(await row.textContent(), /demo\.tokens.*@every 500ms.*allow.*active/);
  assert.match(await page.locator('#schedules tr[data-schedule="nightly"]').textContent(), /30 2 \* \* \* \(America\/New_York\).*paused/);
  await page.screenshot({ path: join(shots, `ui-schedules${tag}.png`), fullPage: true });
  // A change made since the page's last poll is kept by the Pause button
  // (it pauses by name; it once PUT the schedule as listed, undoing it).
  await call("PUT", `/v1/schedules/${name}`, { workflow: "demo.tokens", input: { text: "v2", delay: 0 }, spec: "@every 700ms", overlap: "allow" });
  await row.getByRole("button", { name: "Pause" }).click();
  await until("the schedule paused", async () => (await call("GET", `/v1/schedules/${name}`)).paused === true);
  const kept = await call("GET", `/v1/schedules/${name}`);
  assert.equal(kept.spec, "@every 700ms", "the change made before the click was undone");
  assert.deepEqual(kept.input, { text: "v2", delay: 0 });
  await row.getByRole("button", { name: "Resume" }).waitFor({ timeout: 10_000 });
  assert.match(await row.textContent(), /@every 700ms.*paused/);
  const link = row.locator("a");
  const runId = await link.textContent();
  assert.match(runId, new RegExp(`^sched:${name}:`));
  await link.click();
  await until("the tick's run page", async () => (await page.locator("#run-id").textContent()) === runId);
  assert.equal(await page.locator("img").count(), 0);
  assert.deepEqual(errors, []);
});

test("schedules are listed fifty at a time, with Next and Previous", { timeout: 60_000 }, async (t) => {
  const { url, call } = await startServer(t, { sqlite: true });
  const names = Array.from({ length: 55 }, (_, i) => `page-${String(i).padStart(2, "0")}`);
  for (const name of names) {
    await call("PUT", `/v1/schedules/${name}`, { workflow: "demo.tokens", spec: "30 2 * * *", paused: true });
  }
  const { page, errors } = await openPage(t, url);
  const rows = page.locator("#schedules tbody tr");
  await until("the first page", async () => (await rows.count()) === 50, 20_000);
  assert.equal(await rows.first().getAttribute("data-schedule"), "page-00");
  assert.equal(await rows.last().getAttribute("data-schedule"), "page-49");
  assert.match(await page.locator("#schedules h2").textContent(), /page-00 to page-49/);
  assert.equal(await page.locator("#schedules button.prev-schedules").count(), 0);
  await page.locator("#schedules button.next-schedules").click();
  await until("the second page", async () => (await rows.count()) === 5, 10_000);
  assert.deepEqual(await rows.evaluateAll((trs) => trs.map((tr) => tr.dataset.schedule)), names.slice(50));
  assert.equal(await page.locator("#schedules button.next-schedules").count(), 0);
  // The page stays put through the list's polls, and Previous goes back.
  await until("a poll later, still the second page", async () => (await rows.count()) === 5 && (await rows.first().getAttribute("data-schedule")) === "page-50", 3_000);
  await page.locator("#schedules button.prev-schedules").click();
  await until("the first page again", async () => (await rows.count()) === 50 && (await rows.first().getAttribute("data-schedule")) === "page-00", 10_000);
  assert.deepEqual(errors, []);
});

test("a cancelled run is resumed from its page, and forked from a step into a new run", { timeout: 90_000 }, async (t) => {
  const { url, call } = await startServer(t);
  const { page, errors } = await openPage(t, url);
  const run = await call("POST", "/v1/runs", { workflow: "demo.tokens", input: { text: "one two three four", delay: 150_000_000 } });
  await until("the run running", async () => (await call("GET", `/v1/runs/${encodeURIComponent(run.id)}`)).status === "running");
  await call("POST", `/v1/runs/${encodeURIComponent(run.id)}/cancel`);
  await until("the run cancelled", async () => (await call("GET", `/v1/runs/${encodeURIComponent(run.id)}`)).status === "cancelled");
  await page.goto(`${url}/ui/#/runs/${encodeURIComponent(run.id)}`);
  const resume = page.getByRole("button", { name: "Resume run" });
  await resume.waitFor({ timeout: 20_000 });
  await resume.click();
  await until("the resumed run completed on the page", async () => (await page.locator("#run-status").textContent()) === "completed", 30_000);
  await until("the resume in the timeline", async () => (await page.locator('#timeline li[data-type="run_resumed"]').count()) === 1);
  assert.ok(await resume.isHidden(), "Resume is offered for a completed run");
  await page.screenshot({ path: join(shots, `ui-resumed${tag}.png`), fullPage: true });

  // Fork from the step: a new run, on its own page.
  const fork = page.locator('#gantt .gantt-row[data-kind="step"] button.fork').first();
  await fork.waitFor({ timeout: 10_000 });
  await fork.click();
  await until("the fork's page", async () => (await page.locator("#run-id").textContent()) !== run.id, 10_000);
  const forkId = await page.locator("#run-id").textContent();
  await until("the fork completed", async () => (await call("GET", `/v1/runs/${encodeURIComponent(forkId)}`)).status === "completed", 30_000);
  await until("its origin in the timeline", async () => (await page.locator('#timeline li[data-type="run_forked"]').count()) === 1, 10_000);
  assert.match(await page.locator('#timeline li[data-type="run_forked"]').textContent(), new RegExp(`forked from run ${run.id}`));
  assert.deepEqual(errors, []);
});
