// Reads weir run streams with the Durable Streams npm client
// (@durable-streams/client, a client that knows nothing of weir) while the
// runs go on, and checks that every chunk arrives exactly once: a step of the
// demo workflow streams tokens, fails midway and is retried.
//
//   WEIR_URL=http://127.0.0.1:4437 [WEIR_TOKEN=…] node exactly-once.mjs
//
// Prints one line per check and "N passed, M failed"; exits non-zero on any
// failure.
import { stream } from "@durable-streams/client";

const base = (process.env.WEIR_URL || "http://127.0.0.1:4437").replace(/\/$/, "");
const headers = process.env.WEIR_TOKEN ? { Authorization: `Bearer ${process.env.WEIR_TOKEN}` } : {};
const timeoutMs = 30_000;

let passed = 0, failed = 0;
function check(name, got, want) {
  if (got === want) {
    passed++;
    console.log(`ok   ${name}`);
  } else {
    failed++;
    console.log(`FAIL ${name}\n     got:  ${JSON.stringify(got)}\n     want: ${JSON.stringify(want)}`);
  }
}

// tokenize splits like internal/demo.Tokenize: words keeping their leading space.
const tokenize = (text) => text.split(/\s+/).filter(Boolean).map((w, i) => (i ? " " + w : w));

async function api(method, path, body) {
  const res = await fetch(base + path, {
    method,
    headers: { ...headers, ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text.trim()}`);
  return JSON.parse(text);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// startRun starts the demo workflow and waits for its stream "tokens" to
// exist, so the readers below start while the step is still writing.
async function startRun(input) {
  const run = await api("POST", "/v1/runs", { workflow: "demo.tokens", input });
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const { streams } = await api("GET", `/v1/runs/${run.id}/streams`);
    if (streams.some((s) => s.name === "tokens")) return run;
    await sleep(5);
  }
  throw new Error(`run ${run.id}: no stream "tokens" after ${timeoutMs} ms`);
}

// readToClose reads a stream from its start with the Durable Streams client,
// following it live (long-poll or SSE) until the server says it is closed.
async function readToClose(runId, live, view) {
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(new Error("timeout")), timeoutMs);
  const res = await stream({
    url: `${base}/v1/stream/runs/${encodeURIComponent(runId)}/tokens`,
    offset: "-1",
    live,
    headers,
    params: view ? { view } : undefined,
    signal: ctrl.signal,
    warnOnHttp: false,
    sseResilience: { logWarnings: false },
  });
  if (live === false) {
    // Catch-up only: everything up to the current end.
    try {
      const body = await res.body();
      return { text: Buffer.from(body).toString("utf8"), closed: res.streamClosed };
    } finally {
      clearTimeout(timer);
    }
  }
  const parts = [];
  let offsets = [];
  try {
    await new Promise((resolve, reject) => {
      ctrl.signal.addEventListener("abort", () => reject(new Error(`read of ${runId} (${live}, ${view || "default view"}) timed out`)));
      res.subscribeBytes(async (chunk) => {
        if (chunk.data.length) parts.push(Buffer.from(chunk.data));
        offsets.push(chunk.offset);
        if (chunk.streamClosed) resolve();
      });
      // Not resolved by res.closed: the client resolves it as soon as it
      // has fetched the response that says Stream-Closed, before the
      // subscriber has that response's data. weir often sends the last
      // chunks and the close in one response (the run's end commits its
      // last step and closes its streams in one transaction).
      res.closed.catch(reject);
    });
  } finally {
    clearTimeout(timer);
    res.cancel();
  }
  for (let i = 1; i < offsets.length; i++) {
    if (offsets[i] < offsets[i - 1]) throw new Error(`offsets went back: ${offsets[i - 1]} then ${offsets[i]}`);
  }
  return { text: Buffer.concat(parts).toString("utf8"), closed: res.streamClosed };
}

async function main() {
  const health = await fetch(base + "/healthz");
  if (!health.ok) throw new Error(`${base}/healthz: ${health.status}`);
  const delay = 25_000_000; // ns (Go's time.Duration): 25 ms between tokens

  // 1. The retry writes the same tokens: they are adopted, so even the live
  //    view has each chunk once.
  const same = "Exactly once means every chunk reaches the reader once, even when the step that wrote it is retried.";
  let run = await startRun({ text: same, fail_after: 6, delay });
  let reads = await Promise.all([
    readToClose(run.id, "long-poll"),
    readToClose(run.id, "sse"),
    readToClose(run.id, "long-poll", "live"),
    readToClose(run.id, "sse", "live"),
  ]);
  check("identical retry, default (committed) view, long-poll", reads[0].text, same);
  check("identical retry, default (committed) view, SSE", reads[1].text, same);
  check("identical retry, live view, long-poll", reads[2].text, same);
  check("identical retry, live view, SSE", reads[3].text, same);
  check("the Durable Streams client saw the stream closed", reads.every((r) => r.closed), true);
  // A reader that comes after the run ended catches up in one go.
  check("identical retry, read after the run ended", (await readToClose(run.id, false)).text, same);

  // 2. The retry writes other tokens: the committed view (a Durable Streams
  //    client's default) holds only the successful attempt's output; the live
  //    view has attempt 1's tokens up to the divergence once, then the retry's.
  const first = "The answer to the question is forty-one, give or take.";
  // (attempt 1 fails after failAfter tokens; the retry streams retry instead)
  const retry = "The answer to the question is forty-two, as computed.";
  const failAfter = 8;
  run = await startRun({ text: first, retry_text: retry, fail_after: failAfter, delay });
  const liveRead = readToClose(run.id, "long-poll", "live").then(
    (r) => ({ text: r.text }),
    (err) => ({ err }),
  );
  reads = await Promise.all([
    readToClose(run.id, "long-poll"),
    readToClose(run.id, "sse"),
    readToClose(run.id, "long-poll", "committed"),
  ]);
  const b = tokenize(retry);
  check("diverging retry, default (committed) view, long-poll", reads[0].text, retry);
  check("diverging retry, default (committed) view, SSE", reads[1].text, retry);
  check("diverging retry, view=committed", reads[2].text, retry);
  // A byte reader of the live view cannot be told to drop the void bytes it
  // already got: the server stops it with a 409 at the abort, not later.
  const lr = await liveRead;
  check("diverging retry, live view: the byte reader is stopped with 409 at the abort",
    lr.err ? `${lr.err.status ?? ""} ${/abort/.test(String(lr.err.message))}` : `no error, read ${JSON.stringify(lr.text)}`,
    "409 true");

  const done = await api("GET", `/v1/runs/${run.id}`);
  check("the run completed after 2 attempts", JSON.stringify(done.output), JSON.stringify({ tokens: b.length, attempts: 2 }));
}

try {
  await main();
} catch (err) {
  failed++;
  console.log(`FAIL ${err.stack || err}`);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
