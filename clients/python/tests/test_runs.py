"""The runs API, with the demo workflow ``weir server`` registers."""

from __future__ import annotations

import uuid

from harness import Collector, ServerCase, per_store, wait_for

import weir

TEXT = "Exactly once means every chunk reaches the reader once, even when the step is retried."
TOKENS = ["Exactly"] + [" " + w for w in TEXT.split()[1:]]
MS = 1_000_000  # a Go time.Duration's millisecond


class RunsTests(ServerCase):
    def test_start_is_idempotent_with_a_key(self) -> None:
        key = "order-" + uuid.uuid4().hex
        run = self.client.start("demo.tokens", {"text": "hello there"}, idempotency_key=key)
        self.assertTrue(run.created)
        self.assertEqual((run.workflow, run.input), ("demo.tokens", {"text": "hello there"}))
        again = self.client.start("demo.tokens", {"text": "hello there"}, idempotency_key=key)
        self.assertEqual((again.id, again.created), (run.id, False))
        with self.assertRaises(weir.KeyReusedError) as cm:
            self.client.start("demo.tokens", {"text": "other"}, idempotency_key=key)
        self.assertEqual(cm.exception.status, 422)
        by_id = self.client.start("demo.tokens", {"text": "x"}, id="py-" + uuid.uuid4().hex[:8])
        self.assertTrue(by_id.created)
        with self.assertRaises(ValueError):
            self.client.start("demo.tokens", idempotency_key="k", id="i")

    def test_a_retried_step_streams_each_token_once(self) -> None:
        run = self.client.start("demo.tokens", {"text": TEXT, "fail_after": 4, "delay": 2 * MS})
        # Follow the stream from before it exists until the run closes it.
        committed = Collector(self.client.read_run(run.id, "tokens", live="sse"))
        live = Collector(self.client.read_run(run.id, "tokens", view="live", live="long-poll", apply_aborts=True))
        for c in (committed, live):
            self.addCleanup(c.reader.close)
            c.start()
        done = self.client.wait(run.id, timeout=30)
        self.assertEqual(done.status, "completed", done.error)
        self.assertEqual(done.output, {"tokens": len(TOKENS), "attempts": 2})
        self.assertEqual("".join(r.text for r in committed.finish() if r.kind == "data"), TEXT)
        recs = live.finish()
        self.assertEqual("".join(r.text for r in recs if r.kind == "data"), TEXT, "adopted: once even live")
        self.assertEqual({r.writer for r in recs if r.kind == "data"}, {"step/1"})

        events = self.client.events(run.id)
        types = [e.type for e in events]
        self.assertEqual(types[0], "run_started")
        self.assertIn("step_failed", types)
        self.assertEqual(types[-1], "run_completed")
        failed = next(e for e in events if e.type == "step_failed")
        self.assertEqual((failed.name, failed.attempt, failed.final), ("generate", 1, False))
        self.assertIn("dropped", failed.error)
        self.assertEqual([e.seq for e in self.client.events(run.id, after=2)], [e.seq for e in events[2:]])

        streams = {s.name: s for s in self.client.run_streams(run.id)}
        self.assertTrue(streams["tokens"].closed)
        self.assertEqual(streams["tokens"].path, f"runs/{run.id}/tokens")
        # A run's streams refuse writes over HTTP.
        with self.assertRaises(weir.MethodNotAllowedError):
            self.client.append(streams["tokens"].path, b"x")

    def test_get_list_cancel(self) -> None:
        runs = [self.client.start("demo.tokens", {"text": "a b c"}) for _ in range(3)]
        got = self.client.get_run(runs[0].id)
        self.assertEqual(got.id, runs[0].id)
        self.assertIsNotNone(got.created_at)
        page = self.client.list_runs(workflow="demo.tokens", limit=2)
        self.assertEqual(len(page.runs), 2)
        self.assertIsNotNone(page.next_cursor)
        ids = [r.id for r in self.client.runs(workflow="demo.tokens", page_size=2)]
        self.assertTrue({r.id for r in runs} <= set(ids))
        self.assertEqual(len(ids), len(set(ids)))

        slow = self.client.start("demo.tokens", {"text": "w " * 200, "delay": 500 * MS})
        wait_for(lambda: self.client.get_run(slow.id).status == "running", "the slow run to start")
        self.client.cancel(slow.id)
        done = self.client.wait(slow.id, timeout=20)
        self.assertEqual(done.status, "cancelled")
        self.assertEqual(self.client.cancel(slow.id).status, "cancelled", "cancelling an ended run changes nothing")
        self.assertTrue({"demo.tokens", "demo.approval"} <= set(self.client.workflows()))
        self.client.health()

    def test_resume_and_fork(self) -> None:
        text = "one two three four five six"
        slow = self.client.start("demo.tokens", {"text": text, "delay": 100 * MS})
        wait_for(lambda: self.client.get_run(slow.id).status == "running", "the slow run to start")
        self.client.cancel(slow.id)
        self.assertEqual(self.client.wait(slow.id, timeout=20).status, "cancelled")
        with self.assertRaises(weir.NotFoundError):
            self.client.resume("run_does_not_exist")
        run = self.client.resume(slow.id)
        self.assertEqual((run.id, run.status), (slow.id, "pending"))
        done = self.client.wait(slow.id, timeout=60)
        self.assertEqual(done.status, "completed", done.error)
        with self.assertRaises(weir.NotResumableError) as cm:
            self.client.resume(slow.id)
        self.assertEqual(cm.exception.status, 409)
        # The committed view: the close of the cancel, the reopen, then every
        # token once (the cancelled attempt's were void).
        recs = list(self.client.read_run(slow.id, "tokens", live="long-poll"))
        self.assertEqual([r.kind for r in recs if r.kind != "data"], ["close", "reopen", "close"])
        self.assertEqual("".join(r.text for r in recs if r.kind == "data"), text)
        self.assertIn("run_resumed", [e.type for e in self.client.events(slow.id)])

        fork = self.client.fork(slow.id, op=1, id="py-fork-" + uuid.uuid4().hex[:8])
        self.assertEqual(fork.workflow, "demo.tokens")
        again = self.client.fork(slow.id, op=1, id=fork.id)
        self.assertEqual(again.id, fork.id, "the same fork again is the same run")
        with self.assertRaises(weir.BadRequestError):
            self.client.fork(slow.id, op=9)
        with self.assertRaises(ValueError):
            self.client.fork(slow.id)
        self.assertEqual(self.client.wait(fork.id, timeout=60).status, "completed")
        retried = self.client.retry(slow.id, step="generate")
        self.assertNotEqual(retried.id, slow.id)
        self.assertEqual(self.client.wait(retried.id, timeout=60).status, "completed")

    def test_errors(self) -> None:
        with self.assertRaises(weir.UnknownWorkflowError) as cm:
            self.client.start("no.such.workflow")
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "unknown_workflow"))
        with self.assertRaises(weir.NotFoundError):
            self.client.get_run("run_does_not_exist")
        with self.assertRaises(weir.BadRequestError):
            self.client.list_runs(status="sleepy")
        # A run that ends without a stream: a follower of it ends too.
        run = self.client.start("demo.tokens", {"text": ""})
        self.client.wait(run.id, timeout=20)
        self.assertEqual(list(self.client.read_run(run.id, "nothing-here", live="long-poll")), [])


per_store(RunsTests, globals())
