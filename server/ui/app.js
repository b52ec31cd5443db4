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
  events: (id) => api(`/v1/runs/${encodeURIComponent(id)}/events`).then((b) => listOf(b, "events")),
  streams: (id) => api(`/v1/runs/${encodeURIComponent(id)}/streams`).then((b) => listOf(b, "streams")),
  workflows: () => api("/v1/workflows").then((b) => listOf(b, "workflows")),
  start: (workflow, input) =>
    api("/v1/runs", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ workflow, input }) }),
  cancel: (id) => api(`/v1/runs/${encodeURIComponent(id)}/cancel`, { method: "POST" }),
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
function route() {
  stopPage();
  const m = location.hash.match(/^#\/runs\/(.+)$/);
  if (m) runPage(decodeURIComponent(m[1]));
  else runsPage();
}

function fmtTime(t) {
  if (!t) return "";
  const d = new Date(t);
  return isNaN(d) ? String(t) : d.toLocaleString();
}

// ---- runs list ------------------------------------------------------------

function runsPage() {
  const main = $("#main");
  main.replaceChildren($("#runs-tpl").content.cloneNode(true));
  const wfSel = $("#f-workflow"), stSel = $("#f-status");
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  stSel.value = params.get("status") || "";
  runsAPI.workflows().then((wfs) => {
    for (const w of wfs) wfSel.append(el("option", { text: typeof w === "string" ? w : w.name }));
    wfSel.value = params.get("workflow") || "";
  }).catch(() => {});
  let alive = true;
  const refresh = async () => {
    const q = { limit: "50" };
    if (wfSel.value) q.workflow = wfSel.value;
    if (stSel.value) q.status = stSel.value;
    try {
      const body = await runsAPI.list(q);
      if (!alive) return; // the page changed while the list was on its way
      const runs = listOf(body, "runs");
      const rows = runs.map((r) => {
        const id = runField.id(r), st = runField.status(r);
        return el("tr", { "data-run": id },
          el("td", { class: "id" }, el("a", { href: `#/runs/${encodeURIComponent(id)}`, text: id })),
          el("td", {}, el("span", { text: runField.workflow(r) }), runField.kind(r) === "world" ? el("span", { class: "kind", text: "world" }) : ""),
          el("td", {}, el("span", { class: `status ${st}`, text: st })),
          el("td", { text: fmtTime(runField.created(r)) }),
          el("td", { text: fmtTime(runField.updated(r)) }));
      });
      $("#runs-body").replaceChildren(...rows);
      $("#runs-more").textContent = runs.length ? "" : "No runs yet. Start one: the demo button, the runs API, or your Go program.";
      $("#runs-error").textContent = "";
    } catch (e) {
      if (alive) $("#runs-error").textContent = e.message;
    }
    if (alive) renderDead().catch(() => {});
  };
  const onFilter = () => {
    const q = new URLSearchParams();
    if (wfSel.value) q.set("workflow", wfSel.value);
    if (stSel.value) q.set("status", stSel.value);
    history.replaceState(null, "", "#/" + (q.toString() ? "?" + q : ""));
    refresh();
  };
  wfSel.onchange = stSel.onchange = onFilter;
  $("#start-demo").onclick = async () => {
    try {
      const run = await runsAPI.start("demo.tokens", {
        text: "Exactly once means every chunk reaches the reader once, even when the step that wrote it is retried.",
        retry_text: "Exactly once means every chunk reaches the reader once, even when the retry writes something else.",
        fail_after: 14,
        delay: 150e6,
      });
      location.hash = `#/runs/${encodeURIComponent(runField.id(run.run ?? run))}`;
    } catch (e) {
      $("#runs-error").textContent = e.message;
    }
  };
  refresh();
  const timer = setInterval(() => alive && refresh(), 1000);
  stopPage = () => { alive = false; clearInterval(timer); };
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
  let alive = true, view = "live";
  for (const r of document.querySelectorAll('input[name="view"]')) {
    r.onchange = () => { view = r.value; for (const s of streams.values()) s.render(view); };
  }
  $("#cancel-run").onclick = async () => {
    try { await runsAPI.cancel(id); } catch (e) { $("#run-error").textContent = e.message; }
  };
  const refresh = async () => {
    try {
      const [run, list] = await Promise.all([runsAPI.get(id), runsAPI.streams(id)]);
      if (!alive) return true; // the page changed meanwhile
      const r = run.run ?? run;
      const world = runField.kind(r) === "world";
      const st = runField.status(r);
      const badge = $("#run-status");
      badge.textContent = st;
      badge.className = `status ${st}`;
      $("#run-meta").textContent = `${runField.workflow(r)}${world ? " · a Vercel Workflow run on weir's World" : ""} · created ${fmtTime(runField.created(r))}`;
      const parent = runField.parent(r);
      if (parent) $("#run-meta").append(" · child of ", el("a", { href: `#/runs/${encodeURIComponent(parent)}`, class: "parent-link", text: parent }));
      $("#run-actions").hidden = terminal(st);
      renderResult(r, st, world);
      if (world) {
        renderWorldTimeline(await worldAPI.events(id));
        await renderWaiting(id, st);
      }
      else {
        const evs = await runsAPI.events(id);
        if (!alive) return true;
        renderTimeline(evs);
        renderGantt(evs, terminal(st));
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
      $("#run-error").textContent = "";
      return terminal(st);
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

// renderWaiting says what a World run that has not ended waits on, when
// weir can tell: its deliveries to the app that keep failing, with the
// likely cause (the server's hint), and its dead letters.
async function renderWaiting(id, st) {
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

function renderResult(r, st, world) {
  const box = $("#run-result");
  if (world && st === "completed") {
    // The runtime's serialized value: weir keeps it as it came.
    box.replaceChildren(el("h2", { text: "Result" }), el("p", { class: "muted", text: "serialized by the Workflow runtime (see the app's run.returnValue)" }));
  } else if (st === "completed") {
    let out = runField.output(r);
    if (typeof out !== "string") out = JSON.stringify(out);
    box.replaceChildren(el("h2", { text: "Result" }), el("pre", { class: "result", text: out ?? "" }));
  } else if (st === "failed" || st === "cancelled") {
    box.replaceChildren(el("h2", { text: st === "failed" ? "Error" : "Cancelled" }), el("pre", { class: "result error", text: runField.error(r) || "" }));
  } else box.replaceChildren();
}

const evField = (e, k, alt) => e[k] ?? e[alt];
function renderTimeline(events) {
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
      case "run_completed": cls = "ok"; text = "run completed"; break;
      case "run_failed": cls = "bad"; text = "run failed"; break;
      case "run_cancelled": cls = "bad"; text = "run cancelled"; break;
    }
    const head = el("div", { text });
    if (type === "child_started") head.append(el("a", { href: `#/runs/${encodeURIComponent(name)}`, class: "child-link", text: name }));
    const li = el("li", { class: cls, "data-type": type }, head, el("div", { class: "when", text: fmtTime(at) }));
    if (err) li.append(el("div", { class: "err", text: err }));
    return li;
  });
  $("#timeline").replaceChildren(...items);
}

// b64bytes decodes an event's data, which Go's JSON encodes as base64 when
// it is not JSON itself.
function b64bytes(d) {
  if (d == null) return new Uint8Array();
  if (typeof d !== "string") return new TextEncoder().encode(JSON.stringify(d));
  try { return Uint8Array.from(atob(d), (c) => c.charCodeAt(0)); } catch { return new TextEncoder().encode(d); }
}

// renderGantt draws each step (every attempt from its start to its outcome)
// as a bar on one time axis, so steps that ran at once (weir.StepAsync) sit side by
// side, with their durations; a step still running reaches to now.
function renderGantt(events, ended) {
  const steps = new Map(); // op -> {name, start, end, state}
  let t0 = null, tEnd = null;
  for (const e of events) {
    const type = evField(e, "type", "Type"), op = evField(e, "op", "Op");
    const at = new Date(evField(e, "at", "At")).getTime();
    t0 = t0 ?? at; tEnd = at;
    if (!op || !type.startsWith("step_")) continue;
    const s = steps.get(op) ?? { name: evField(e, "name", "Name"), start: at, end: null, state: "running", attempts: 0 };
    if (type === "step_started") s.attempts = Math.max(s.attempts, evField(e, "attempt", "Attempt"));
    if (type === "step_completed") { s.end = at; s.state = "ok"; s.attempts = Math.max(s.attempts, evField(e, "attempt", "Attempt")); }
    if (type === "step_failed") {
      s.attempts = Math.max(s.attempts, evField(e, "attempt", "Attempt"));
      if (evField(e, "final", "Final")) { s.end = at; s.state = "bad"; } else s.state = "retry";
    }
    steps.set(op, s);
  }
  const box = $("#gantt");
  if (steps.size < 2) { box.replaceChildren(); return; }
  const now = ended ? tEnd : Date.now();
  const span = Math.max(1, now - t0);
  const rows = [...steps.entries()].map(([op, s]) => {
    const end = s.end ?? now, ms = Math.max(0, end - s.start);
    // Through the CSSOM: the UI's CSP allows no inline style attribute.
    const bar = el("div", { class: `bar ${s.state}` });
    bar.style.left = `${(100 * (s.start - t0)) / span}%`;
    bar.style.width = `${Math.max(0.5, (100 * ms) / span)}%`;
    return el("div", { class: "gantt-row", "data-op": String(op) },
      el("span", { class: "gantt-label", text: `${s.name} · ${s.attempts > 1 ? `${s.attempts} attempts · ` : ""}${ms} ms` }),
      el("span", { class: "gantt-track" }, bar));
  });
  box.replaceChildren(el("h2", { text: "Steps" }), ...rows);
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
