"""Queues: runs started in a limiter (``queue=``) wait their turn there, and
starts with a dedupe key fold into the run of their key, with ``demo.approval``
(a run that waits on its hook, holding its queue's slot, until cancelled)."""

from __future__ import annotations

import uuid

from harness import ServerCase, per_store, wait_for

import weir

MINUTE = 60 * 10**9  # demo.approval's longest wait, in nanoseconds


class QueueTests(ServerCase):
    def test_a_queue_holds_runs_and_folds_starts(self) -> None:
        lim = self.client.set_limiter("q", concurrency=1)
        self.assertEqual((lim.name, lim.concurrency, lim.per_key, lim.queued), ("q", 1, 0, 0))
        started: list[str] = []

        def cancel_all() -> None:
            for run_id in started:
                self.client.cancel(run_id)
            for run_id in started:
                self.assertEqual(self.client.wait(run_id, timeout=30).status, "cancelled")

        self.addCleanup(cancel_all)

        # The first run is admitted and holds the queue's one slot: it waits
        # on its hook for a minute.
        first = self.client.start("demo.approval", {"timeout": MINUTE}, queue="q")
        started.append(first.id)
        self.assertTrue(first.created)
        self.assertEqual(first.queue, "q")
        wait_for(lambda: not self.client.get_run(first.id).queued, "the first run to be admitted")

        # The second waits in the queue behind it.
        dedupe = "order-" + uuid.uuid4().hex[:8]
        second = self.client.start("demo.approval", {"timeout": MINUTE}, queue="q", queue_key="tenant-a",
                                   priority=5, dedupe=dedupe)
        started.append(second.id)
        self.assertTrue(second.created)
        self.assertNotEqual(second.id, first.id)
        self.assertTrue(second.queued, "a second run of a queue of concurrency 1 waits")
        got = self.client.get_run(second.id)
        self.assertEqual((got.status, got.queued, got.queue, got.queue_key, got.priority, got.dedupe),
                         ("pending", True, "q", "tenant-a", 5, dedupe))
        self.assertEqual(self.client.limiter("q").queued, 1)

        # A third start with the same dedupe key is the second run (200, its id).
        third = self.client.start("demo.approval", {"timeout": MINUTE}, queue="q", dedupe=dedupe)
        self.assertEqual((third.id, third.created, third.queued), (second.id, False, True))
        self.assertEqual(self.client.limiter("q").queued, 1, "a folded start adds no run")
        self.assertEqual([r.id for r in self.client.runs(queue="q", queued=True)], [second.id])
        self.assertEqual({r.id for r in self.client.runs(queue="q")}, {first.id, second.id})

        with self.assertRaises(weir.NotFoundError):
            self.client.start("demo.approval", {"timeout": MINUTE}, queue="py-none-" + uuid.uuid4().hex[:6])
        with self.assertRaises(weir.BadRequestError):
            self.client.start("demo.approval", {"timeout": MINUTE}, queue="q", dedupe=dedupe, debounce=-1)

    def test_per_key_and_debounce_are_sent(self) -> None:
        name = "py-" + uuid.uuid4().hex[:10]
        lim = self.client.set_limiter(name, concurrency=2, per_key=1)
        self.assertEqual((lim.concurrency, lim.per_key), (2, 1))
        self.assertEqual(self.client.limiter(name).per_key, 1)
        # A debounced start waits its debounce in the queue, then starts with
        # its input; the limiter bounds nothing else here.
        dedupe = "d-" + uuid.uuid4().hex[:8]
        run = self.client.start("demo.tokens", {"text": "a b"}, queue=name, dedupe=dedupe, debounce=1.0, debounce_max=1.5)
        self.assertTrue(run.queued)
        again = self.client.start("demo.tokens", {"text": "c d e"}, queue=name, dedupe=dedupe, debounce=1.0, debounce_max=1.5)
        self.assertEqual((again.id, again.created), (run.id, False))
        done = self.client.wait(run.id, timeout=30)
        self.assertEqual(done.status, "completed", done.error)
        self.assertEqual(done.input, {"text": "c d e"}, "a debounced run starts with its latest start's input")
        with self.assertRaises(weir.InvalidError):
            self.client.start("demo.tokens", {"text": "x"}, dedupe="no-queue")
        with self.assertRaises(weir.BadRequestError):
            self.client.start("demo.tokens", {"text": "x"}, queue=name, dedupe=dedupe, debounce=1.0, debounce_max=0.5)


per_store(QueueTests, globals())
