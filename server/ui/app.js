// weir's web UI: a runs list and a run page with its event timeline and its
// streams rendered live. No framework, no build step. It talks only to the
// server's public API, with the bearer token the user typed (kept in
// sessionStorage: this tab only, gone with it), so it sees exactly what any
// client sees.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
};

// ---- API ------------------------------------------------------------------

function headers(extra = {}) {
  const h = { ...extra };
  const tok = sessionStorage.getItem("weir.token");
  if (tok) h["Authorization"] = "Bearer " + tok;
  return h;
}

async function api(path, opts = {}) {
  const res = await fetch(path, { ...opts, headers: headers(opts.headers) });
  if (!res.ok) {
    const text = (await res.text()).trim();
    throw new Error(`${res.status} ${text || res.statusText}`);
  }
  const ct = res.headers.get("Content-Type") || "";
  return ct.includes("json") ? res.json() : res.text();
}

const listOf = (body, key) => (Array.isArray(body) ? body : body[key] || []);
const runsAPI = {
  list: (q) => api("/v1/runs?" + new URLSearchParams(q)),
  get: (id) => api(`/v1/runs/${encodeURIComponent(id)}`),
  async events(id, after = 0) {
    // The events after seq after (the log only grows): the server
    // answers a page at a time (more, next_after).
    const out = [];
    for (;;) {
      const q = after > 0 ? `?after=${after}` : "";
      const page = await api(`/v1/runs/${encodeURIComponent(id)}/events${q}`);
      out.push(...listOf(page, "events"));
      if (!page.more || !(page.next_after > after)) return out;
      after = page.next_after;
    }
  },
  streams: (id) => api(`/v1/runs/${encodeURIComponent(id)}/streams`).then((b) => listOf(b, "streams")),
  workflows: () => api("/v1/workflows").then((b) => listOf(b, "workflows")),
  start: (workflow, input) =>
    api("/v1/runs", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ workflow, input }) }),
  cancel: (id) => api(`/v1/runs/${encodeURIComponent(id)}/cancel`, { method: "POST" }),
  resume: (id) => api(`/v1/runs/${encodeURIComponent(id)}/resume`, { method: "POST" }),
  fork: (id, body) => api(`/v1/runs/${encodeURIComponent(id)}/fork`, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  }),
  waiting: (id) => api(`/v1/runs/${encodeURIComponent(id)}/waiting`),
  hooks: (id) => api(`/v1/runs/${encodeURIComponent(id)}/hooks`).then((b) => listOf(b, "hooks")),
  state: (id) => api(`/v1/runs/${encodeURIComponent(id)}/state`),
};

// The schedules API.
const schedulesAPI = {
  // A page of the schedules after name after (the server bounds a page:
  // at most limit schedules and about 1 MiB of their inputs).
  page: (after, limit) => api("/v1/schedules?" + new URLSearchParams(after ? { limit, after } : { limit })),
  // Pause or resume alone: a change made to the schedule since the list
  // was read is kept (a PUT of the listed schedule would undo it).
  pause: (name, paused) => api(`/v1/schedules/${encodeURIComponent(name)}/${paused ? "pause" : "resume"}`, { method: "POST" }),
};

// The World API: the events of a Vercel Workflow run, and the queue's dead
// letters.
const worldAPI = {
  async events(id) {
    const out = [];
    let cursor = null;
    do {
      const q = new URLSearchParams({ limit: "1000" });
      if (cursor) q.set("cursor", cursor);
      const page = await api(`/v1/world/runs/${encodeURIComponent(id)}/events?${q}`);
      out.push(...page.data);
      cursor = page.hasMore ? page.cursor : null;
    } while (cursor);
    return out;
  },
  dead: () => api("/v1/world/queue?state=dead").then((b) => listOf(b, "messages")),
  messages: (state, runId) => api(`/v1/world/queue?state=${state}&runId=${encodeURIComponent(runId)}`).then((b) => listOf(b, "messages")),
  redeliver: (id) => api(`/v1/world/queue/${encodeURIComponent(id)}/redeliver`, { method: "POST" }),
};

// Field names as the server writes them, with fallbacks, in one place.
const runField = {
  id: (r) => r.id ?? r.ID,
  workflow: (r) => r.workflow ?? r.Workflow,
  status: (r) => r.status ?? r.Status,
  created: (r) => r.created_at ?? r.CreatedAt,
  updated: (r) => r.updated_at ?? r.UpdatedAt,
  error: (r) => r.error ?? r.Error,
  output: (r) => r.output ?? r.Output,
  kind: (r) => r.kind ?? r.Kind ?? "",
  parent: (r) => r.parent ?? r.Parent ?? "",
};
const terminal = (s) => s === "completed" || s === "failed" || s === "cancelled";

// ---- routing --------------------------------------------------------------

let stopPage = () => {};
let forkFrom = async () => {}; // the run page's: a fork from an operation
function route() {
  stopPage();
  const m = location.hash.match(/^#\/runs\/(.+)$/);
  if (m) runPage(decodeURIComponent(m[1]));
  else runsPage();
}

// fmtTime is a time to the millisecond, in the person's time zone.
function fmtTime(t) {
  if (!t) return "";
  const d = new Date(t);
  return isNaN(d) ? String(t) : d.toLocaleString(undefined, {
    year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", fractionalSecondDigits: 3,
  });
}

// fmtDur is a duration in the unit that reads: 7 ms, 1.24 s, 12.5 s,
// 10 min 3 s, 2 h 5 min.
function fmtDur(ms) {
  if (!(ms >= 0)) return "";
  if (ms < 1) return "<1 ms";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 10_000) return `${(ms / 1000).toFixed(2)} s`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)} min ${Math.floor((ms % 60_000) / 1000)} s`;
  return `${Math.floor(ms / 3_600_000)} h ${Math.floor((ms % 3_600_000) / 60_000)} min`;
}

// fmtOffset is an offset from the run's creation: 0.123 s, 12.3 s, 10:03.
function fmtOffset(ms) {
  ms = Math.max(0, ms);
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 3 : 1)} s`;
  const m = Math.floor(ms / 60_000), sec = Math.floor((ms % 60_000) / 1000);
  return `${m}:${String(sec).padStart(2, "0")}`;
}

// ---- runs list ------------------------------------------------------------

// The search's fields, as the URL keeps them (#/?q=…&workflow=…): a search
// is a link a person can share.
const searchFields = ["q", "workflow", "status", "since", "before"];

// stallAfter is how long a run may wait for a worker before the runs list
// warns that no worker serves its workflow.
const stallAfter = 10_000;

function runsPage() {
  const main = $("#main");
  main.replaceChildren($("#runs-tpl").content.cloneNode(true));
  const f = {
    q: $("#f-q"), workflow: $("#f-workflow"), status: $("#f-status"), since: $("#f-since"), before: $("#f-before"),
  };
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  for (const k of searchFields) if (k !== "workflow") f[k].value = params.get(k) || "";
  runsAPI.workflows().then((wfs) => {
    for (const w of wfs) f.workflow.append(el("option", { text: typeof w === "string" ? w : w.name }));
    f.workflow.value = params.get("workflow") || "";
  }).catch(() => {});
  let alive = true;
  const query = () => {
    const q = { limit: "50" };
    if (f.q.value.trim()) q.id_prefix = f.q.value.trim();
    if (f.workflow.value) q.workflow = f.workflow.value;
    if (f.status.value) q.status = f.status.value;
    // datetime-local is the person's local time; the API takes UTC.
    for (const [k, name] of [["since", "created_since"], ["before", "created_before"]]) {
      const t = f[k].value && new Date(f[k].value);
      if (t && !isNaN(t)) q[name] = t.toISOString();
    }
    return q;
  };
  const refresh = async () => {
    try {
      const body = await runsAPI.list(query());
      if (!alive) return; // the page changed while the list was on its way
      const runs = listOf(body, "runs");
      const rows = runs.map((r) => {
        const id = runField.id(r), st = runField.status(r);
        const took = terminal(st) ? fmtDur(new Date(runField.updated(r)) - new Date(runField.created(r))) : "";
        return el("tr", { "data-run": id },
          el("td", { class: "id" }, el("a", { href: `#/runs/${encodeURIComponent(id)}`, text: id })),
          el("td", {}, el("span", { text: runField.workflow(r) }), runField.kind(r) === "world" ? el("span", { class: "kind", text: "world" }) : ""),
          el("td", {}, el("span", { class: `status ${st}`, text: st })),
          el("td", { text: fmtTime(runField.created(r)) }),
          el("td", { class: "num", text: took }));
      });
      $("#runs-body").replaceChildren(...rows);
      const filtered = Object.keys(query()).length > 1;
      $("#runs-more").textContent = runs.length ? "" : filtered ? "No run matches this search." : "No runs yet. Start one: a demo button, the runs API, or your Go program.";
      $("#runs-error").textContent = "";
    } catch (e) {
      if (alive) $("#runs-error").textContent = e.message;
    }
    if (alive) renderStalled().catch(() => {});
    if (alive) renderDead().catch(() => {});
    if (alive) renderSchedules().catch(() => {});
  };
  const onFilter = () => {
    const q = new URLSearchParams();
    for (const k of searchFields) if (f[k].value.trim()) q.set(k, f[k].value.trim());
    history.replaceState(null, "", "#/" + (q.toString() ? "?" + q : ""));
    refresh();
  };
  for (const k of searchFields) f[k].onchange = onFilter;
  f.q.oninput = onFilter;
  $("#clear-search").onclick = () => { for (const k of searchFields) f[k].value = ""; onFilter(); };
  const start = async (workflow, input) => {
    try {
      const run = await runsAPI.start(workflow, input);
      location.hash = `#/runs/${encodeURIComponent(runField.id(run.run ?? run))}`;
    } catch (e) {
      $("#runs-error").textContent = e.message;
    }
  };
  $("#start-demo").onclick = () => start("demo.tokens", {
    text: "Exactly once means every chunk reaches the reader once, even when the step that wrote it is retried.",
    retry_text: "Exactly once means every chunk reaches the reader once, even when the retry writes something else.",
    fail_after: 14,
    delay: 150e6,
  });
  $("#start-agent").onclick = () => start("demo.agent", { topic: "exactly-once streams", flaky: true });
  refresh();
  const timer = setInterval(() => alive && refresh(), 1000);
  stopPage = () => { alive = false; clearInterval(timer); };
}

// renderStalled warns of workflows whose runs wait for a worker: runs that
// were due more than stallAfter ago and that no worker has claimed (a
// server with --no-worker and no worker process, a worker that does not
// register the workflow, workers all busy).
async function renderStalled() {
  const box = $("#no-worker");
  if (!box) return;
  const pending = listOf(await runsAPI.list({ status: "pending", limit: "200" }), "runs");
  const now = Date.now(), byWf = new Map();
  for (const r of pending) {
    if (runField.kind(r) === "world") continue; // the app's deliveries are shown as dead letters
    const due = Math.max(new Date(runField.created(r)).getTime(), r.wake_at ? new Date(r.wake_at).getTime() : 0);
    if (now - due < stallAfter) continue;
    const wf = runField.workflow(r), s = byWf.get(wf) ?? { n: 0, oldest: due, id: runField.id(r) };
    s.n++;
    if (due <= s.oldest) { s.oldest = due; s.id = runField.id(r); }
    byWf.set(wf, s);
  }
  if (!byWf.size) { box.replaceChildren(); return; }
  box.replaceChildren(...[...byWf.entries()].map(([wf, s]) =>
    el("p", { class: "warning", "data-workflow": wf },
      el("strong", { text: `No worker has claimed a run of ${wf} for ${fmtDur(now - s.oldest)}` }),
      ` (${s.n} waiting, the oldest `, el("a", { href: `#/runs/${encodeURIComponent(s.id)}`, text: s.id }),
      `). Is a worker running with ${wf} registered? (weir worker, or your program's; a server started with --no-worker claims nothing.)`)));
}

// renderSchedules lists the schedules a page at a time (schedulePage of
// them, from the one after schedAfter): what each starts and when, what it
// did, and a button that pauses or resumes it. The list is polled each
// second, so a page, not the whole list, is what each poll costs.
const schedulePage = 50;
let schedAfter = "";
let schedBefore = []; // the cursors of the pages before this one
async function renderSchedules() {
  const box = $("#schedules");
  if (!box) return;
  const page = await schedulesAPI.page(schedAfter, schedulePage);
  const all = listOf(page, "schedules");
  if (!all.length && schedAfter) { // the page emptied (its schedules deleted): back to the first
    schedAfter = ""; schedBefore = [];
    return renderSchedules();
  }
  if (!all.length) { box.replaceChildren(); return; }
  const rows = all.map((s) => {
    const btn = el("button", { class: "pause", text: s.paused ? "Resume" : "Pause" });
    btn.onclick = async () => {
      btn.disabled = true;
      await schedulesAPI.pause(s.name, !s.paused).catch((e) => { btn.title = e.message; });
      renderSchedules().catch(() => {});
    };
    const last = s.last_run ? el("a", { href: `#/runs/${encodeURIComponent(s.last_run)}`, text: s.last_run }) : "-";
    return el("tr", { "data-schedule": s.name },
      el("td", { class: "id", text: s.name }),
      el("td", { text: s.workflow }),
      el("td", { text: `${s.spec}${s.tz ? " (" + s.tz + ")" : ""}` }),
      el("td", { text: s.overlap || "skip" }),
      el("td", {}, el("span", { class: s.paused ? "status cancelled" : "status running", text: s.paused ? "paused" : "active" })),
      el("td", { text: s.next_due ? fmtTime(s.next_due) : "-" }),
      el("td", {}, last),
      el("td", { class: "num", text: `${s.started} / ${s.skipped}` }),
      el("td", {}, btn));
  });
  const paged = page.more || schedBefore.length > 0;
  const nav = el("p", { class: "pager" });
  if (schedBefore.length) {
    const prev = el("button", { class: "prev-schedules", text: "Previous" });
    prev.onclick = () => { schedAfter = schedBefore.pop() ?? ""; renderSchedules().catch(() => {}); };
    nav.append(prev);
  }
  if (page.more && page.next_after) {
    const next = el("button", { class: "next-schedules", text: "Next" });
    next.onclick = () => { schedBefore.push(schedAfter); schedAfter = page.next_after; renderSchedules().catch(() => {}); };
    nav.append(next);
  }
  const title = paged ? `Schedules (${all[0].name} to ${all[all.length - 1].name})` : `Schedules (${all.length})`;
  box.replaceChildren(el("h2", { text: title }),
    el("table", { class: "runs schedules" },
      el("thead", {}, el("tr", {}, ...["schedule", "workflow", "spec", "overlap", "state", "next tick", "last run", "started / skipped", ""].map((h) => el("th", { text: h })))),
      el("tbody", {}, ...rows)),
    paged ? nav : "");
}

// renderDead lists the World queue's dead letters, each with a button that
// delivers it again.
async function renderDead() {
  const box = $("#dead-letters");
  if (!box) return;
  const dead = await worldAPI.dead();
  if (!dead.length) { box.replaceChildren(); return; }
  box.replaceChildren(el("h2", { text: `Dead letters (${dead.length})` }), el("ul", {}, ...dead.map((m) => {
    const btn = el("button", { class: "redeliver", text: "Deliver again" });
    btn.onclick = async () => { await worldAPI.redeliver(m.messageId).catch(() => {}); renderDead().catch(() => {}); };
    return el("li", { "data-message": m.messageId },
      el("span", { class: "id", text: m.messageId }), " ",
      el("span", { text: `${m.queueName} · run ${m.runId || "-"} · ${m.failures} failures · ${m.lastError}` }), " ", btn);
  })));
}

// ---- run page -------------------------------------------------------------

function runPage(id) {
  const main = $("#main");
  main.replaceChildren($("#run-tpl").content.cloneNode(true));
  $("#run-id").textContent = id;
  const streams = new Map(); // name -> StreamView
  const hooks = new HookForms(id);
  let alive = true, view = "live";
  // The log read so far: a refresh asks for what follows it, not the
  // whole log again (a run with a 16 MiB inbox cost a tab a third of a
  // core; red team, round fifteen). read: the run's state when it was
  // last read whole, so an ended run that did not change is not read
  // again.
  let evs = [], evAfter = 0, evRun = "", read = "";
  for (const r of document.querySelectorAll('input[name="view"]')) {
    r.onchange = () => { view = r.value; for (const s of streams.values()) s.render(view); };
  }
  $("#cancel-run").onclick = async () => {
    try { await runsAPI.cancel(id); } catch (e) { $("#run-error").textContent = e.message; }
  };
  // A resumed run's streams reopen: the page starts over to follow them.
  $("#resume-run").onclick = async () => {
    try { await runsAPI.resume(id); route(); } catch (e) { $("#run-error").textContent = e.message; }
  };
  forkFrom = async (op) => {
    try {
      const f = await runsAPI.fork(id, { op });
      location.hash = `#/runs/${encodeURIComponent(runField.id(f))}`;
    } catch (e) { $("#run-error").textContent = e.message; }
  };
  const refresh = async () => {
    try {
      const [run, list] = await Promise.all([runsAPI.get(id), runsAPI.streams(id)]);
      if (!alive) return true; // the page changed meanwhile
      const r = run.run ?? run;
      const world = runField.kind(r) === "world";
      const st = runField.status(r), ended = terminal(st);
      const badge = $("#run-status");
      badge.textContent = st;
      badge.className = `status ${st}`;
      const created = runField.created(r);
      const meta = [runField.workflow(r) + (world ? " · a Vercel Workflow run on weir's World" : ""), `created ${fmtTime(created)}`];
      if (ended) meta.push(`took ${fmtDur(new Date(runField.updated(r)) - new Date(created))}`);
      if (r.version) meta.push(`version ${r.version}`);
      $("#run-meta").textContent = meta.join(" · ");
      const parent = runField.parent(r);
      if (parent) $("#run-meta").append(" · child of ", el("a", { href: `#/runs/${encodeURIComponent(parent)}`, class: "parent-link", text: parent }));
      $("#run-actions").hidden = ended;
      $("#end-actions").hidden = world || (st !== "failed" && st !== "cancelled");
      $("#gantt").dataset.fork = world ? "" : "1";
      renderInput(r, world);
      renderResult(r, st, world);
      if (world) {
        renderWorldTimeline(await worldAPI.events(id));
        await renderWorldWaiting(id, st);
      } else {
        const stamp = `${created}|${runField.updated(r)}|${st}`;
        if (ended && stamp === read) return ended; // nothing of it changed
        if (created !== evRun) { evs = []; evAfter = 0; evRun = created; } // another run of that id
        const [more, waiting, hs, state] = await Promise.all([runsAPI.events(id, evAfter),
          ended ? null : runsAPI.waiting(id), runsAPI.hooks(id).catch(() => []), runsAPI.state(id).catch(() => null)]);
        if (!alive) return true;
        if (more.length) { evs = evs.concat(more); evAfter = more[more.length - 1].seq; }
        read = stamp;
        const t0 = new Date(created).getTime();
        renderWaitingOn(waiting, ended);
        renderTimeline(evs, t0);
        renderSteps(evs, t0, ended ? new Date(runField.updated(r)).getTime() : Date.now());
        hooks.render(hs, ended);
        renderState(state);
      }
      for (const s of list) {
        const name = s.name ?? s.Name;
        if (!streams.has(name)) {
          const v = new StreamView(id, name);
          streams.set(name, v);
          $("#streams").append(v.root);
          v.follow(() => alive, () => view);
        }
      }
      $("#streams-none").hidden = list.length > 0;
      $("#run-error").textContent = "";
      return ended;
    } catch (e) {
      if (alive) $("#run-error").textContent = e.message;
      return false;
    }
  };
  const loop = async () => {
    while (alive) {
      const done = await refresh();
      await new Promise((r) => setTimeout(r, done ? 3000 : 500));
    }
  };
  loop();
  stopPage = () => { alive = false; for (const s of streams.values()) s.stop(); };
}

// renderWaitingOn says what the run waits on now, and since when (the
// server's /waiting, one rule for the UI and the CLI).
function renderWaitingOn(w, ended) {
  const box = $("#run-waiting");
  const waits = (w && w.waits) || [];
  if (ended || !waits.length) {
    box.replaceChildren(ended ? "" : el("p", { class: "muted waiting-none", text: "Running workflow code (waiting on nothing)." }));
    return;
  }
  const now = Date.now();
  box.replaceChildren(el("h2", { text: "Waiting on" }), el("ul", { class: "waiting" }, ...waits.map((x) => {
    const li = el("li", { class: `wait ${x.kind}`, "data-kind": x.kind },
      el("span", { class: "what", text: waitText(x) }),
      el("span", { class: "since", text: ` · for ${fmtDur(now - new Date(x.since))}, since ${fmtTime(x.since)}` }));
    if (x.until) li.append(el("span", { class: "until", text: ` · until ${fmtTime(x.until)} (${untilText(new Date(x.until) - now)})` }));
    if (x.kind === "hook") li.append(" ", el("a", { href: "#hooks", class: "to-form", text: "deliver a payload ↓" }));
    if (x.kind === "child") li.append(" ", el("a", { href: `#/runs/${encodeURIComponent(x.name)}`, class: "child-link", text: "open the child" }));
    return li;
  })));
}

function waitText(x) {
  switch (x.kind) {
    case "worker": return x.name
      ? `a worker of version “${x.name}” to claim it: is one running with this workflow registered? (or move the run: weir runs migrate)`
      : "a worker to claim it: is a worker running with this workflow registered?";
    case "step": return `step “${x.name}”, attempt ${x.attempt}, running`;
    case "retry": return `the retry of step “${x.name}” (attempt ${x.attempt} failed; its backoff)`;
    case "timer": return "a timer (a durable sleep)";
    case "hook": return `a payload for hook “${x.name}”`;
    case "child": return `child run ${x.name} to end`;
    case "limiter": return `step “${x.name}”, attempt ${x.attempt}, waiting for the limiter “${x.limiter}”` + (x.ahead >= 0 ? `: ${x.ahead} ahead` : "");
    case "scheduled": return "its scheduled start";
    default: return x.text || "a wake-up";
  }
}
const untilText = (ms) => ms > 0 ? `in ${fmtDur(ms)}` : "due now";

// renderInput shows the run's input, truncated and expandable.
function renderInput(r, world) {
  const box = $("#run-input");
  if (box.dataset.done) return; // an input never changes: keep what the person expanded
  const input = r.input ?? r.Input;
  if (input === undefined || input === null) { box.replaceChildren(); return; }
  box.dataset.done = "1";
  box.replaceChildren(el("h2", { text: "Input" }), world
    ? el("p", { class: "muted", text: "serialized by the Workflow runtime" })
    : valueEl(input, "input"));
}

function renderResult(r, st, world) {
  const box = $("#run-result");
  if (world && st === "completed") {
    // The runtime's serialized value: weir keeps it as it came.
    box.replaceChildren(el("h2", { text: "Result" }), el("p", { class: "muted", text: "serialized by the Workflow runtime (see the app's run.returnValue)" }));
  } else if (st === "completed") {
    if (box.dataset.done) return;
    box.dataset.done = "1";
    box.replaceChildren(el("h2", { text: "Result" }), valueEl(runField.output(r), "result"));
  } else if (st === "failed" || st === "cancelled") {
    box.replaceChildren(el("h2", { text: st === "failed" ? "Error" : "Cancelled" }), el("pre", { class: "result error", text: runField.error(r) || "" }));
  } else box.replaceChildren();
}

// valueEl shows a JSON value as text, pretty-printed, its first lines only
// until the person asks for the rest.
const previewChars = 600;
function valueEl(v, cls) {
  let text = typeof v === "string" ? v : JSON.stringify(v, null, 2);
  if (text === undefined) text = "";
  const pre = el("pre", { class: `value ${cls}`, text: text.length > previewChars ? text.slice(0, previewChars) + "…" : text });
  if (text.length <= previewChars) return pre;
  const more = el("button", { class: "more", text: `show all ${fmtBytes(text.length)}` });
  more.onclick = () => { pre.textContent = text; more.remove(); };
  return el("div", {}, pre, more);
}
const fmtBytes = (n) => n < 1024 ? `${n} characters` : `${(n / 1024).toFixed(1)} K characters`;

const evField = (e, k, alt) => e[k] ?? e[alt];
function renderTimeline(events, t0) {
  const items = events.map((e) => {
    const type = evField(e, "type", "Type"), name = evField(e, "name", "Name");
    const attempt = evField(e, "attempt", "Attempt"), at = evField(e, "at", "At");
    const err = evField(e, "error", "Error"), wake = evField(e, "wake_at", "WakeAt");
    const final = evField(e, "final", "Final");
    let cls = "", text = type;
    switch (type) {
      case "run_started": cls = "run"; text = "run started"; break;
      case "step_started": text = `step “${name}” · attempt ${attempt} started`; break;
      case "step_completed": cls = "ok"; text = `step “${name}” · attempt ${attempt} completed`; break;
      case "step_failed":
        cls = final ? "bad" : "retry";
        text = `step “${name}” · attempt ${attempt} failed` + (final ? " for good" : "");
        if (!final && wake && at) text += ` · retry in ${Math.max(0, new Date(wake) - new Date(at))} ms`;
        break;
      case "sleep_scheduled": text = `timer · until ${fmtTime(wake)}`; break;
      case "sleep_fired": text = "timer fired"; break;
      case "selected": text = `select chose case ${new TextDecoder().decode(b64bytes(evField(e, "data", "Data")))}`; break;
      case "hook_created":
        cls = name.startsWith("child_") ? "" : "wait";
        text = name.startsWith("child_") ? "waiting for the child run" : `hook “${name}” waiting · weir runs hook ${name}`; break;
      case "hook_received": cls = "ok"; text = name.startsWith("child_") ? "child run ended" : `hook “${name}” received a payload`; break;
      case "hook_disposed": text = `hook “${name}” disposed`; break;
      case "child_started": text = "child run "; break;
      case "message_received": text = `message on “${name}” received`; break;
      case "messages_taken": text = "messages taken"; break;
      case "message_sent": text = `message sent to ${name}`; break;
      case "event_set": text = `run event “${name}” set`; break;
      case "limit_waiting": cls = "wait"; text = `step “${name}” · attempt ${attempt} waiting for the limiter “${limiterOf(e)}”`; break;
      case "run_completed": cls = "ok"; text = "run completed"; break;
      case "run_failed": cls = "bad"; text = "run failed"; break;
      case "run_cancelled": cls = "bad"; text = "run cancelled"; break;
      case "run_resumed": cls = "run"; text = "run resumed"; break;
      case "run_forked": cls = "run"; text = `forked from run ${name}: the operations above are its`; break;
      case "stream_mark": return null; // where the workflow's writes stood: for forks
    }
    const head = el("div", { text });
    if (type === "child_started") head.append(el("a", { href: `#/runs/${encodeURIComponent(name)}`, class: "child-link", text: name }));
    const when = el("div", { class: "when" }, el("span", { class: "offset", text: `+${fmtOffset(new Date(at) - t0)}` }), ` ${fmtTime(at)}`);
    const li = el("li", { class: cls, "data-type": type }, head, when);
    if (err) li.append(el("div", { class: "err", text: err }));
    return li;
  });
  $("#timeline").replaceChildren(...items.filter(Boolean));
}

// limiterOf is the limiter a limit_waiting event names.
function limiterOf(e) {
  const d = evField(e, "data", "Data");
  return (d && typeof d === "object" && d.limiter) || "";
}

// b64bytes decodes an event's data, which Go's JSON encodes as base64 when
// it is not JSON itself.
function b64bytes(d) {
  if (d == null) return new Uint8Array();
  if (typeof d !== "string") return new TextEncoder().encode(JSON.stringify(d));
  try { return Uint8Array.from(atob(d), (c) => c.charCodeAt(0)); } catch { return new TextEncoder().encode(d); }
}

// stepRows reads the log into one lane per operation: a step's attempts
// (and the backoffs between them), a hook's waits, a timer, a child run.
function stepRows(events) {
  const rows = new Map(); // op -> {op, kind, name, segs: [{kind, start, end, state, attempt, error, output, until}]}
  const row = (op, kind, name) => {
    let r = rows.get(op);
    if (!r) { r = { op, kind, name, segs: [] }; rows.set(op, r); }
    return r;
  };
  const open = (r) => { const s = r.segs[r.segs.length - 1]; return s && s.end == null ? s : null; };
  for (const e of events) {
    const type = evField(e, "type", "Type"), op = evField(e, "op", "Op"), name = evField(e, "name", "Name");
    const at = new Date(evField(e, "at", "At")).getTime();
    const attempt = evField(e, "attempt", "Attempt"), wake = evField(e, "wake_at", "WakeAt");
    switch (type) {
      case "step_started": {
        const r = row(op, "step", name), b = open(r);
        if (b && (b.kind === "backoff" || b.kind === "limit")) b.end = at;
        r.segs.push({ kind: "attempt", start: at, end: null, state: "running", attempt });
        break;
      }
      case "step_completed": case "step_failed": {
        const r = row(op, "step", name), s = open(r);
        if (!s) break;
        s.end = at;
        s.error = evField(e, "error", "Error");
        if (type === "step_completed") { s.state = "ok"; s.output = evField(e, "data", "Data"); break; }
        s.state = evField(e, "final", "Final") ? "bad" : "retry";
        if (s.state === "retry") r.segs.push({ kind: "backoff", start: at, end: null, until: wake ? new Date(wake).getTime() : null });
        break;
      }
      case "limit_waiting": {
        const r = row(op, "step", name), b = open(r);
        if (b && b.kind === "backoff") b.end = at;
        r.segs.push({ kind: "limit", start: at, end: null, limiter: limiterOf(e) });
        break;
      }
      case "sleep_scheduled":
        row(op, "timer", "sleep").segs.push({ kind: "wait", start: at, end: null, until: wake ? new Date(wake).getTime() : null });
        break;
      case "sleep_fired": case "hook_disposed": case "hook_received": {
        const r = rows.get(op), s = r && open(r);
        if (s) { s.end = at; s.state = "ok"; }
        break;
      }
      case "hook_created":
        row(op, "hook", name).segs.push({ kind: "wait", start: at, end: null });
        break;
      case "selected": // a Select chose: a timer that lost it (a timeout) is over
        for (const r of rows.values()) { const s = r.kind === "timer" && open(r); if (s) { s.end = at; s.state = "lost"; } }
        break;
      case "run_completed": case "run_failed": case "run_cancelled": // what was open ended with the run
        for (const r of rows.values()) { const s = open(r); if (s) { s.end = at; s.state = s.state === "running" ? "bad" : "cut"; } }
        break;
      case "child_started": {
        const r = row(op, "child", name);
        r.kind = "child"; r.name = name;
        break;
      }
    }
  }
  return [...rows.values()].filter((r) => r.segs.length).sort((a, b) => a.op - b.op);
}

// renderSteps draws every lane on one time axis from the run's creation,
// with ticks in the unit its length asks for (10 ms steps and 10 minute
// ones both get a scale that reads), bars that keep a visible width
// however short, and each attempt's duration in words; then a table of
// every attempt with its duration, outcome, error and output.
function renderSteps(events, t0, tEnd) {
  const rows = stepRows(events);
  const box = $("#gantt");
  if (!rows.length) { box.replaceChildren(); $("#attempts").replaceChildren(); return; }
  const span = Math.max(1, tEnd - t0);
  const pct = (t) => `${Math.min(100, (100 * Math.max(0, t - t0)) / span)}%`;
  const axis = el("div", { class: "gantt-axis" });
  for (const t of ticks(span)) {
    const tick = el("span", { class: "tick", text: fmtOffset(t) });
    tick.style.left = `${(100 * t) / span}%`; // through the CSSOM: the CSP allows no inline style
    axis.append(tick);
  }
  const lanes = rows.map((r) => {
    const track = el("span", { class: "gantt-track" });
    let total = 0;
    for (const s of r.segs) {
      const end = s.end ?? (s.kind === "backoff" && s.until ? Math.min(s.until, tEnd) : tEnd);
      const ms = Math.max(0, end - s.start);
      if (s.kind === "attempt") total += ms;
      const cls = s.kind === "attempt" ? `bar attempt ${s.state}` : s.kind === "backoff" ? "bar backoff" : s.kind === "limit" ? "bar limit" : `bar wait ${r.kind}${s.end == null ? " open" : ""}`;
      const bar = el("span", { class: cls, title: segTitle(r, s, ms) });
      bar.style.left = pct(s.start);
      bar.style.width = `${(100 * ms) / span}%`;
      if (s.attempt) bar.dataset.attempt = String(s.attempt);
      track.append(bar);
    }
    const attempts = r.segs.filter((s) => s.kind === "attempt").length;
    const what = r.kind === "step" ? `${r.name}` : r.kind === "hook" ? `hook ${r.name}` : r.kind === "child" ? `child ${r.name}` : "timer";
    const last = r.segs[r.segs.length - 1];
    const dur = r.kind === "step" ? fmtDur(total) : fmtDur(Math.max(0, (last.end ?? tEnd) - r.segs[0].start));
    const label = el("span", { class: "gantt-label", title: what },
      el("span", { class: `lane-kind ${r.kind}`, text: r.kind }), " ", el("span", { class: "lane-name", text: what }),
      el("span", { class: "dur", text: ` · ${attempts > 1 ? `${attempts} attempts · ` : ""}${dur}${last.end == null ? " so far" : ""}` }));
    if (r.kind === "step" && $("#gantt").dataset.fork) {
      // A new run from this step: the steps before it keep their output.
      const fork = el("button", { class: "fork", text: "fork from here", title: `a new run from op ${r.op}: the operations before it replay, their output is kept` });
      fork.onclick = () => forkFrom(r.op);
      label.append(" ", fork);
    }
    return el("div", { class: `gantt-row ${r.kind}`, "data-op": String(r.op), "data-kind": r.kind }, label, track);
  });
  box.replaceChildren(el("h2", { text: "Steps and waits" }),
    el("div", { class: "gantt-row axis-row" }, el("span", { class: "gantt-label muted", text: `from the run's creation · ${fmtDur(span)}` }), axis), ...lanes);
  renderAttempts(rows, t0, tEnd);
}

function segTitle(r, s, ms) {
  if (s.kind === "attempt") return `${r.name} · attempt ${s.attempt} · ${fmtDur(ms)} · ${s.state === "ok" ? "completed" : s.state === "running" ? "running" : "failed"}${s.error ? ": " + s.error : ""}`;
  if (s.kind === "limit") return `waiting for the limiter ${s.limiter} · ${fmtDur(ms)}`;
  if (s.kind === "backoff") return `backoff before attempt ${(r.segs.filter((x) => x.kind === "attempt" && x.start <= s.start).length) + 1} · ${fmtDur(ms)}`;
  return `${r.kind} ${r.name} · ${fmtDur(ms)}${s.end == null ? " so far" : ""}`;
}

// ticks are 4 to 10 round offsets (1, 2 or 5 of a power of ten ms, or of
// seconds and minutes) across a span of ms.
function ticks(span) {
  const steps = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5, 36e5, 72e5];
  const step = steps.find((s) => span / s <= 8) ?? 36e5 * Math.ceil(span / 36e5 / 8);
  const out = [];
  for (let t = 0; t <= span; t += step) out.push(t);
  return out;
}

// renderAttempts lists every attempt of every step: when it started, how
// long it took, how it ended, its error or its output.
function renderAttempts(rows, t0, tEnd) {
  const body = [];
  for (const r of rows) {
    if (r.kind !== "step") continue;
    let n = 0;
    for (const s of r.segs) {
      if (s.kind === "backoff" || s.kind === "limit") {
        body.push(el("tr", { class: s.kind }, el("td", {}), el("td", { class: "muted", text: s.kind === "limit" ? `limiter ${s.limiter}` : "backoff" }), el("td", { class: "num", text: `+${fmtOffset(s.start - t0)}` }),
          el("td", { class: "num", text: fmtDur((s.end ?? Math.min(s.until ?? tEnd, tEnd)) - s.start) }), el("td", { class: "muted", text: s.end ? "" : "waiting" }), el("td", {})));
        continue;
      }
      n++;
      const ms = (s.end ?? tEnd) - s.start;
      const out = s.state === "ok" ? valueEl(decodeData(s.output), "output") : s.error ? el("pre", { class: "value err", text: s.error }) : "";
      body.push(el("tr", { class: `attempt ${s.state}`, "data-op": String(r.op), "data-attempt": String(s.attempt || n), "data-step": r.name },
        el("td", { class: "step-name", text: n === 1 ? r.name : "" }),
        el("td", { text: `attempt ${s.attempt || n}` }),
        el("td", { class: "num", text: `+${fmtOffset(s.start - t0)}` }),
        el("td", { class: "num duration", "data-ms": String(Math.round(ms)), text: fmtDur(ms) + (s.end == null ? " so far" : "") }),
        el("td", {}, el("span", { class: `outcome ${s.state}`, text: s.state === "ok" ? "completed" : s.state === "running" ? "running" : s.state === "retry" ? "failed, retried" : "failed" })),
        el("td", { class: "detail" }, out)));
    }
  }
  $("#attempts").replaceChildren(...(body.length ? [el("table", { class: "attempts" },
    el("thead", {}, el("tr", {}, ...["step", "attempt", "started", "took", "outcome", "output or error"].map((h) => el("th", { text: h })))),
    el("tbody", {}, ...body))] : []));
}

// decodeData is an event's data as a value: JSON as it is, anything else
// (bytes without the SDK's encoding, base64 in JSON) as text.
function decodeData(d) {
  if (d == null) return "";
  return d;
}

// HookForms renders the run's hooks, each open one with a form that
// delivers a payload as POST /v1/hooks/{token} does (with the token typed
// in the header, checked by the server like any delivery). A form is made
// once and kept, so what a person types survives the page's refreshes.
class HookForms {
  constructor(run) { this.run = run; this.forms = new Map(); }
  render(hooks, ended) {
    const box = $("#hooks");
    const mine = hooks.filter((h) => !h.token.startsWith("child_"));
    if (!mine.length) { box.replaceChildren(); this.forms.clear(); return; }
    if (!box.firstChild) box.append(el("h2", { text: "Hooks" }), el("ul", { class: "hooks" }));
    const list = box.querySelector("ul");
    for (const h of mine) {
      let f = this.forms.get(h.token);
      if (!f) { f = this.form(h.token); this.forms.set(h.token, f); list.append(f.li); }
      const open = !h.disposed && !ended;
      f.state.textContent = ` · ${h.received} payload${h.received === 1 ? "" : "s"} received · ${open ? "open" : "disposed"}`;
      f.form.hidden = !open;
    }
  }
  form(token) {
    const area = el("textarea", { rows: "3", cols: "50", name: "payload", "aria-label": `payload for hook ${token}`, spellcheck: "false" });
    area.value = '{"approved": true}';
    const send = el("button", { type: "submit", text: "Deliver payload" });
    const msg = el("span", { class: "form-msg" });
    const form = el("form", { class: "hook-form" }, area, el("div", {}, send, msg));
    form.onsubmit = async (ev) => {
      ev.preventDefault();
      msg.className = "form-msg";
      // The same rule as the server's: a JSON value. Checked here first so
      // a typo is named before anything is sent.
      try { JSON.parse(area.value); } catch (e) {
        msg.className = "form-msg error"; msg.textContent = `not JSON: ${e.message}`; return;
      }
      send.disabled = true;
      try {
        const res = await api(`/v1/hooks/${encodeURIComponent(token)}`, { method: "POST", headers: { "Content-Type": "application/json" }, body: area.value });
        msg.textContent = `delivered (event ${res.seq ?? res.Seq ?? "?"} of the run's log)`;
      } catch (e) {
        msg.className = "form-msg error"; msg.textContent = e.message;
      } finally { send.disabled = false; }
    };
    const state = el("span", { class: "hook-state" });
    const li = el("li", { "data-hook": token }, el("span", { class: "id", text: token }), state, form);
    return { li, form, state };
  }
}

// renderState shows the run events the workflow published (latest value by
// key; a value over 4 KiB comes elided, by its size: its own route has it)
// and the messages sent to it, by topic. The state lists 1,000 keys at most.
function renderState(state) {
  const box = $("#run-state");
  const evs = (state && state.events) || [], msgs = (state && state.messages) || [];
  if (!evs.length && !msgs.length) { box.replaceChildren(); return; }
  const out = [el("h2", { text: "Run events and messages" })];
  const value = (e) => e.elided ? el("span", { class: "muted", text: `${e.size} bytes (GET /v1/runs/…/events/${e.key})` }) : el("code", { text: oneLine(e.value) });
  if (evs.length) out.push(el("table", { class: "kv run-events" }, el("tbody", {}, ...evs.map((e) =>
    el("tr", { "data-key": e.key }, el("th", { text: e.key }), el("td", {}, value(e)), el("td", { class: "muted", text: fmtTime(e.at) }))))));
  if (state.more) out.push(el("p", { class: "muted", text: `More run events after “${state.next_after}”: the first ${evs.length} are shown.` }));
  if (msgs.length) out.push(el("table", { class: "kv messages" }, el("tbody", {}, ...msgs.map((m) =>
    el("tr", { "data-topic": m.topic }, el("th", { text: `topic ${m.topic}` }),
      el("td", { text: `${m.received} received${m.taken >= 0 ? `, ${m.taken} taken, ${m.left} left` : ""}` }))))));
  box.replaceChildren(...out);
}
const oneLine = (v) => { const s = typeof v === "string" ? v : JSON.stringify(v); return s.length > 200 ? s.slice(0, 200) + "…" : s; };

// renderWorldWaiting says what a World run that has not ended waits on,
// when weir can tell: its deliveries to the app that keep failing, with the
// likely cause (the server's hint), and its dead letters.
async function renderWorldWaiting(id, st) {
  const box = $("#run-waiting");
  if (terminal(st)) { box.replaceChildren(); return; }
  const [pending, dead] = await Promise.all([worldAPI.messages("pending", id), worldAPI.messages("dead", id)]);
  const failing = [...pending.filter((m) => m.failures > 0), ...dead];
  if (!failing.length) { box.replaceChildren(); return; }
  box.replaceChildren(el("h2", { text: "Waiting for the app" }), el("ul", { class: "waiting" }, ...failing.map((m) =>
    el("li", {},
      el("span", { text: `${m.state === "dead" ? "dead-lettered" : "retrying"}: ${m.queueName} to ${m.target}, ${m.failures} failed, last: ${m.lastError || ""}` }),
      m.hint ? el("p", { class: "hint", text: m.hint }) : ""))));
}

// renderWorldTimeline renders a World run's event log: each step with its
// attempts, retries and outcome, hooks, sleeps, and the run's end.
function renderWorldTimeline(events) {
  const names = new Map(), attempts = new Map();
  const label = (id) => `step “${(names.get(id) || id).split("//").pop()}”`;
  const items = events.map((e) => {
    const type = e.eventType, id = e.correlationId, d = e.eventData || {};
    let cls = "", text = type.replace("_", " ");
    switch (type) {
      case "run_created": cls = "run"; text = "run created"; break;
      case "run_started": cls = "run"; text = "run started"; break;
      case "step_created": names.set(id, d.stepName || id); text = `${label(id)} created`; break;
      case "step_started": attempts.set(id, (attempts.get(id) || 0) + 1); text = `${label(id)} · attempt ${attempts.get(id)} started`; break;
      case "step_retrying": cls = "retry"; text = `${label(id)} · attempt ${attempts.get(id) || 1} failed, will retry` + (d.retryAfter ? ` after ${fmtTime(d.retryAfter)}` : ""); break;
      case "step_completed": cls = "ok"; text = `${label(id)} · attempt ${attempts.get(id) || 1} completed`; break;
      case "step_failed": cls = "bad"; text = `${label(id)} · attempt ${attempts.get(id) || 1} failed for good`; break;
      case "hook_created": text = `hook ${id} created`; break;
      case "hook_received": text = `hook ${id} received a payload`; break;
      case "hook_disposed": text = `hook ${id} disposed`; break;
      case "hook_conflict": cls = "bad"; text = `hook token ${d.token || ""} is another run's`; break;
      case "wait_created": text = `sleep until ${fmtTime(d.resumeAt)}`; break;
      case "wait_completed": text = "sleep ended"; break;
      case "run_completed": cls = "ok"; text = "run completed"; break;
      case "run_failed": cls = "bad"; text = "run failed"; break;
      case "run_cancelled": cls = "bad"; text = "run cancelled"; break;
    }
    const li = el("li", { class: cls, "data-type": type }, el("div", { text }), el("div", { class: "when", text: fmtTime(e.createdAt) }));
    const err = typeof d.error === "string" ? d.error : d.error?.message;
    if (err) li.append(el("div", { class: "err", text: err }));
    return li;
  });
  $("#timeline").replaceChildren(...items);
}

// ---- streams --------------------------------------------------------------

// StreamView follows one stream's live view (every record, as NDJSON) and
// renders either view from it: the committed view is computed here with the
// same rules the server's reader uses (commit, abort, close).
class StreamView {
  constructor(run, name) {
    this.run = run;
    this.name = name;
    this.records = [];
    this.root = el("div", { class: "stream", "data-stream": name }, el("h3", { text: name }), el("div", { class: "body" }), el("div", { class: "stats" }));
    this.ctrl = new AbortController();
  }
  stop() { this.ctrl.abort(); }
  url(offset, live) {
    const q = new URLSearchParams({ offset, view: "live", format: "ndjson" });
    if (live) q.set("live", "long-poll");
    return `/v1/stream/runs/${encodeURIComponent(this.run)}/${encodeURIComponent(this.name)}?${q}`;
  }
  async follow(alive, view) {
    let offset = "-1", live = false;
    while (alive()) {
      let res;
      try {
        res = await fetch(this.url(offset, live), { headers: headers(), signal: this.ctrl.signal });
      } catch (e) {
        if (!alive()) return;
        await new Promise((r) => setTimeout(r, 1000));
        continue;
      }
      if (res.status === 200) {
        const text = await res.text();
        const b64 = res.headers.get("Weir-Data-Encoding") === "base64";
        for (const line of text.split("\n")) {
          if (line.trim()) this.records.push(normalize(JSON.parse(line), b64));
        }
        this.render(view());
      } else if (res.status !== 204) {
        await new Promise((r) => setTimeout(r, 1000));
        continue;
      }
      offset = res.headers.get("Stream-Next-Offset") || offset;
      const closed = res.headers.get("Stream-Closed") === "true";
      const upToDate = res.headers.get("Stream-Up-To-Date") === "true";
      if (closed && upToDate) { this.closed = true; this.render(view()); return; }
      live = upToDate;
    }
  }
  render(view) {
    const { chunks, voided, committed, aborts } = interpret(this.records);
    const body = this.root.querySelector(".body");
    const out = [];
    if (view === "committed") {
      for (const r of chunks) if (committed.has(r.offset)) out.push(chunkEl(r, false));
    } else if (view === "writers") {
      // One lane per writer (a step's writer keeps its identity across its
      // attempts; parallel steps writing one stream are two lanes).
      const lanes = new Map();
      for (const r of this.records) {
        const w = r.writer || "anonymous";
        if (!lanes.has(w)) lanes.set(w, []);
        const lane = lanes.get(w);
        if (r.kind === "data") lane.push(chunkEl(r, voided.has(r.offset)));
        else if (r.kind === "abort") lane.push(el("span", { class: "marker abort", text: `abort ≥${r.from}` }));
        else if (r.kind === "commit") lane.push(el("span", { class: "marker commit", text: `commit a${r.attempt}` }));
      }
      for (const [w, kids] of lanes) {
        out.push(el("div", { class: "lane", "data-writer": w }, el("div", { class: "lane-label", text: w }), el("div", { class: "lane-body" }, ...kids)));
      }
    } else {
      for (const r of this.records) {
        if (r.kind === "data") out.push(chunkEl(r, voided.has(r.offset)));
        else if (r.kind === "abort") out.push(el("span", { class: "marker abort", title: `attempt ${r.attempt} diverged at seq ${r.from}`, text: `abort ≥${r.from}` }));
        else if (r.kind === "commit") out.push(el("span", { class: "marker commit", title: `attempt ${r.attempt} committed ${r.count} chunks`, text: `commit a${r.attempt}` }));
      }
    }
    body.replaceChildren(...out);
    this.root.querySelector(".stats").textContent =
      `${chunks.length} chunks written, ${voided.size} voided, ${committed.size} committed, ${aborts} abort${aborts === 1 ? "" : "s"}` + (this.closed ? " · closed" : " · following");
  }
}

const utf8 = new TextDecoder();
// normalize turns one NDJSON record into the shape the views use. Data of a
// binary stream comes base64-encoded (the response says so in
// Weir-Data-Encoding); it is shown as UTF-8 text.
function normalize(r, b64) {
  const kind = r.kind;
  let data = r.data ?? "";
  if (b64 && data) {
    try { data = utf8.decode(Uint8Array.from(atob(data), (c) => c.charCodeAt(0))); } catch { /* keep as is */ }
  }
  return {
    offset: Number(r.offset), kind, writer: r.writer || "", attempt: Number(r.attempt || 0), seq: Number(r.seq || 0),
    from: Number(r.from ?? r.from_seq ?? r.fromSeq ?? r.seq ?? 0), count: Number(r.count ?? r.seq ?? 0), data,
  };
}

// interpret applies the stream rules' read side: which data records an abort
// or close voided, and which are committed.
function interpret(records) {
  const open = new Map(); // writer -> [{seq, offset}] not yet settled
  const voided = new Set(), committed = new Set(), chunks = [];
  let aborts = 0;
  for (const r of records) {
    if (r.kind === "data") {
      chunks.push(r);
      if (r.attempt === 0) { committed.add(r.offset); continue; }
      if (!open.has(r.writer)) open.set(r.writer, []);
      open.get(r.writer).push(r);
    } else if (r.kind === "abort") {
      aborts++;
      const l = open.get(r.writer) || [];
      open.set(r.writer, l.filter((d) => { if (d.seq >= r.from) { voided.add(d.offset); return false; } return true; }));
    } else if (r.kind === "commit") {
      for (const d of open.get(r.writer) || []) (d.seq < r.count ? committed : voided).add(d.offset);
      open.delete(r.writer);
    } else if (r.kind === "close") {
      for (const l of open.values()) for (const d of l) voided.add(d.offset);
      open.clear();
    }
  }
  return { chunks, voided, committed, aborts };
}

function chunkEl(r, isVoid) {
  const cls = "chunk " + (isVoid ? "void" : `a${Math.min(r.attempt, 3)}`);
  return el("span", { class: cls, title: `offset ${r.offset} · ${r.writer || "anonymous"} attempt ${r.attempt} seq ${r.seq}`, "data-offset": String(r.offset), text: r.data });
}

// ---- start ----------------------------------------------------------------

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", () => {
  const tok = $("#token");
  tok.value = sessionStorage.getItem("weir.token") || "";
  // Keep the token as it is typed; the next request uses it. (Re-rendering
  // on change would swallow the click that blurs the field.)
  tok.oninput = tok.onchange = () => sessionStorage.setItem("weir.token", tok.value);
  route();
});
