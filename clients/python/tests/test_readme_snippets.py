"""The README's Python snippets, type-checked by pyright (CI: clients/python/tools).

Each function holds one snippet of README.md between its ``snippet:<name>``
and ``end snippet`` lines; internal/doccheck (``go test``) fails if the
README's copy differs. None of them is called: they need a live server
(test_examples.py runs the hooks and messages examples, and
examples/llm_step.py, against one).
"""

from __future__ import annotations

import weir


def writing(attempt: int) -> None:
    """README.md, "Writing"."""
    # snippet:writing
    client = weir.Client("http://127.0.0.1:4437", token="…")   # or $WEIR_URL and $WEIR_TOKEN
    w = client.writer("chat/42", writer="step-7", attempt=attempt, content_type="text/plain",
                      linger=0.02, max_batch_chunks=1000, max_batch_bytes=8 << 20)
    w.write("Hello", ", ")         # str is UTF-8; bytes, bytearray and memoryview as they are
    w.write(b"world")
    w.commit()                     # the attempt's chunks join the committed view
    # end snippet


def reading(client: weir.Client, saved: str) -> None:
    """README.md, "Reading"."""
    # snippet:reading
    for rec in client.read("chat/42"):                         # the committed view, to its current end
        print(rec.offset, rec.kind, rec.text)
    for rec in client.read("chat/42", live="sse"):             # then follow it until it is closed
        ...
    reader = client.read("chat/42", view="live", live="long-poll", apply_aborts=True, offset=saved)
    # end snippet


def runs(client: weir.Client) -> None:
    """README.md, "Runs"."""
    # snippet:runs
    run = client.start("demo.tokens", {"text": "hello"}, idempotency_key="order-981")  # a retry returns the same run
    run.created                    # True if this call created it (201), False if the key found it (200)
    client.get_run(run.id); client.wait(run.id, timeout=60)
    client.list_runs(workflow="demo.tokens", status="completed", limit=50)   # a page; .next_cursor
    for r in client.runs(workflow="demo.tokens"): ...                        # every page
    client.events(run.id, after=0)  # the event log (weir.Event)
    client.cancel(run.id)
    client.run_streams(run.id); client.workflows(); client.health()
    client.fork(run.id, step="draft", id="run-2")   # a new run from step "draft": the steps before it replay
    client.retry(run.id)                            # a fork from the step that failed the run
    client.resume(run.id)                           # a failed or cancelled run runs again (NotResumableError: 409)
    # end snippet


def hooks() -> None:
    """README.md, "Hooks": a script of its own (test_examples.py runs the README's copy)."""
    # snippet:hooks
    import time
    import uuid

    import weir

    client = weir.Client()  # $WEIR_URL and $WEIR_TOKEN
    token = f"order-{uuid.uuid4().hex[:8]}"  # the hook's name: an order id, a ticket id
    run = client.start("demo.approval", {"token": token, "timeout": 60 * 10**9})

    # The run creates its hook a moment after it starts: until then the token is a 404.
    deadline = time.monotonic() + 10
    while not any(h.token == token for h in client.hooks(run.id)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run.id} has no hook {token!r}")
        time.sleep(0.05)

    d = client.deliver_hook(token, {"by": "ann", "ok": True}, idempotency_key="form-981")
    print(d)
    again = client.deliver_hook(token, {"by": "ann", "ok": True}, idempotency_key="form-981")
    print("sent again:", again.duplicate, again.seq == d.seq)  # the first reply; nothing added
    print(client.wait(run.id, timeout=10).output)
    # end snippet


def hooks_close(client: weir.Client, token: str, other_token: str) -> None:
    """README.md, "Hooks": closing one."""
    # snippet:hooks-close
    d = client.deliver_hook(token, {"by": "ann", "ok": True}, idempotency_key="form-981", close=True)
    d.closed                       # True: the hook takes nothing more (a delivery now is GoneError)
    client.close_hook(other_token, idempotency_key="form-982-withdrawn")   # closed without a payload
    # end snippet


def messages() -> None:
    """README.md, "Messages and run events": a script of its own (test_examples.py runs the README's copy)."""
    # snippet:messages
    import weir

    client = weir.Client()  # $WEIR_URL and $WEIR_TOKEN
    run = client.start("demo.chat")

    # A message waits in the run's log until the run takes it: send them all at once.
    for i, text in enumerate(["hello there", "how are you?", "bye"]):
        sent = client.send_message(run.id, "user", {"text": text}, idempotency_key=f"{run.id}-{i}")
        print(sent)

    # Follow the run event "status": each call waits up to 30 s for a value newer than the last.
    status = None
    while status is None or status.value["state"] != "done":
        newer = client.get_event(run.id, "status", wait=30, after=status.seq if status else 0)
        if newer is None:
            raise TimeoutError(f"run {run.id}: no new status in 30 s")
        status = newer
    print(status.value)
    print(client.wait(run.id, timeout=10).output)
    print("".join(r.text for r in client.read_run(run.id, "reply")), end="")
    print(client.run_state(run.id).messages)
    # end snippet


def limiters(client: weir.Client) -> None:
    """README.md, "Limiters"."""
    # snippet:limiters
    client.set_limiter("openai", concurrency=8, rate=500, budget=200_000, period=60)
    lim = client.limiter("openai")     # Limiter: its bounds, and held, waiting, taken, spent now
    [l.name for l in client.limiters()]
    # end snippet


def queues(client: weir.Client) -> None:
    """README.md, "Queues"."""
    # snippet:queues
    client.set_limiter("emails", concurrency=4, per_key=1)
    run = client.start("send.digest", {"user": 42}, queue="emails", queue_key="tenant-7", priority=10)
    run.queued                     # True while it waits its turn; run.queue, run.queue_key, run.priority
    client.limiter("emails").queued    # runs waiting in the queue now

    # Dedupe: while a run of the queue with this key is queued or running, a start returns
    # that run (its own id, created False, HTTP 200) instead of a new one.
    again = client.start("send.digest", {"user": 42}, queue="emails", dedupe="digest-42")
    # Debounce (seconds, with dedupe; sent as debounce_ms): the run starts 5 s after the latest
    # start of its key, with that start's input.
    client.start("reindex", {"doc": 9}, queue="emails", dedupe="doc-9", debounce=5)
    # end snippet
