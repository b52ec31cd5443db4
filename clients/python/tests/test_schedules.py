"""Schedules: a schedule set from Python starts its ticks' runs on the
server (``demo.tokens``), shows what it did, is paused and deleted; bad
input is refused."""

from __future__ import annotations

import uuid

from harness import ServerCase, per_store, wait_for

import weir


class ScheduleTests(ServerCase):
    def test_a_schedule_starts_its_ticks(self) -> None:
        name = "py-" + uuid.uuid4().hex[:10]
        sc = self.client.set_schedule(name, workflow="demo.tokens", spec="@every 200ms", input={"text": "a b"},
                                      overlap="allow", backfill=2.0)
        self.assertEqual((sc.name, sc.workflow, sc.spec, sc.overlap, sc.backfill, sc.input), (name, "demo.tokens", "@every 200ms", "allow", "2s", {"text": "a b"}))
        self.assertIsNotNone(sc.next_due)
        wait_for(lambda: self.client.schedule(name).started >= 2, "two ticks started")
        got = self.client.schedule(name)
        self.assertTrue(got.last_run.startswith(f"sched:{name}:"), got.last_run)
        run = self.client.wait(got.last_run, timeout=30)
        self.assertEqual((run.workflow, run.status), ("demo.tokens", "completed"))
        self.assertIn(name, [s.name for s in self.client.schedules()])

        by_name = self.client.pause_schedule(name)
        self.assertEqual((by_name.paused, by_name.overlap, by_name.input), (True, "allow", {"text": "a b"}))
        self.assertIsNone(by_name.next_due)
        self.assertFalse(self.client.resume_schedule(name).paused)
        with self.assertRaises(weir.NotFoundError):
            self.client.pause_schedule("py-none-" + uuid.uuid4().hex[:8])
        paused = self.client.set_schedule(name, workflow="demo.tokens", spec="@every 200ms", paused=True)
        self.assertTrue(paused.paused)
        self.assertIsNone(paused.next_due)
        self.client.delete_schedule(name)
        with self.assertRaises(weir.NotFoundError):
            self.client.schedule(name)
        with self.assertRaises(weir.NotFoundError):
            self.client.delete_schedule(name)

    def test_the_list_comes_a_page_at_a_time(self) -> None:
        prefix = "py-pg-" + uuid.uuid4().hex[:6]
        names = [f"{prefix}-{i}" for i in range(5)]
        for n in names:
            self.client.set_schedule(n, workflow="demo.tokens", spec="@daily", paused=True)
        try:
            got = [s.name for s in self.client.schedules(page=2) if s.name.startswith(prefix)]
            self.assertEqual(got, names)
            with self.assertRaises(weir.BadRequestError):
                self.client.schedules(page=0)
        finally:
            for n in names:
                self.client.delete_schedule(n)

    def test_bad_input_is_refused(self) -> None:
        bad = [
            lambda: self.client.set_schedule("py-bad", workflow="demo.tokens", spec="61 * * * *"),
            lambda: self.client.set_schedule("py-bad", workflow="demo.tokens", spec="@daily", tz="Nowhere/Land"),
            lambda: self.client.set_schedule("py-bad", workflow="demo.tokens", spec="@daily", overlap="sometimes"),
            lambda: self.client.set_schedule("py-bad", workflow="demo.tokens", spec="@daily", backfill=-1.0),
        ]
        for i, call in enumerate(bad):
            with self.assertRaises(weir.BadRequestError, msg=f"case {i}"):
                call()
        with self.assertRaises(weir.NotFoundError):
            self.client.schedule("py-bad")



class MigrateTests(ServerCase):
    def test_migrate_refuses_the_same_version(self) -> None:
        # The server's runs have no version: there is nothing to move from v9.
        self.assertEqual(self.client.migrate_runs("v9", "v10"), weir.Migrated(count=0, migrated=()))
        with self.assertRaises(weir.BadRequestError):
            self.client.migrate_runs("v1", "v1")
        run = self.client.start("demo.tokens", {"text": "a"})
        self.assertEqual(run.version, "")


per_store(MigrateTests, globals())
per_store(ScheduleTests, globals())
