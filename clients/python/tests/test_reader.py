"""Reading streams: catch-up, live (long-poll, SSE), views, resuming."""

from __future__ import annotations

import urllib.parse
from typing import Any, cast

from harness import Collector, ServerCase, per_store, wait_for
from proxy import Proxy

import weir
from weir.types import LiveMode, View

MODES: tuple[LiveMode, ...] = ("long-poll", "sse")


class StepFailed(Exception):
    pass


class ReaderTests(ServerCase):
    def follow(self, path: str, live: LiveMode, *, view: View = "committed", client: weir.Client | None = None,
               **kw: Any) -> Collector:
        c = Collector((client or self.client).read(path, view=view, live=live, **kw))
        self.addCleanup(c.reader.close)
        c.start()
        return c

    def readers(self, mode: str) -> float:
        return self.server.metric("weir_stream_open_readers", f'mode="{mode}"')

    def test_live_reader_across_a_retry_sees_each_chunk_once(self) -> None:
        for live in MODES:
            with self.subTest(live=live):
                p = self.stream("text/plain")
                before = self.readers(live)
                committed = self.follow(p, live)
                as_written = self.follow(p, live, view="live", apply_aborts=True)
                wait_for(lambda: self.readers(live) >= before + 2, f"both {live} readers waiting at the server")
                with self.assertRaises(StepFailed):
                    with self.client.writer(p, "step/gen", 1, content_type="text/plain") as w:
                        w.write("The", " answer", " is", " 41")
                        w.flush()
                        # The live view has attempt 1's tokens as they are written.
                        self.assertEqual([as_written.next().text for _ in range(4)], ["The", " answer", " is", " 41"])
                        raise StepFailed
                with self.client.writer(p, "step/gen", 2, content_type="text/plain") as w:
                    w.write("The", " answer", " was", " 42", ".")
                self.client.close_stream(p)

                recs = committed.finish()
                self.assertEqual([r.text for r in recs if r.kind == "data"], ["The", " answer", " was", " 42", "."])
                self.assertEqual(recs[-1].kind, "close")
                offsets = [r.offset for r in recs]
                self.assertEqual(offsets, sorted(set(offsets)), "offsets strictly increase")
                self.assertTrue(committed.reader.closed)

                lv = as_written.finish()
                void = {o for r in lv for o in r.voided}
                self.assertEqual(len(void), 2, "the abort voids ' is' and ' 41'")
                self.assertEqual([r.text for r in lv if r.kind == "data" and r.offset not in void],
                                 ["The", " answer", " was", " 42", "."])
                self.assertEqual([r.kind for r in lv].count("abort"), 1)

    def test_resumes_after_a_dropped_connection(self) -> None:
        for live in MODES:
            with self.subTest(live=live):
                proxy = Proxy("127.0.0.1", urllib.parse.urlsplit(self.server.url).port or 0)
                self.addCleanup(proxy.close)
                p = self.stream()
                before = self.readers(live)
                c = self.follow(p, live, client=self.new_client(proxy.url))
                wait_for(lambda: self.readers(live) >= before + 1, f"the {live} reader waiting")
                self.client.append(p, b"a")
                self.assertEqual(c.next().data, b"a")
                self.assertGreaterEqual(proxy.kill_all(), 2)
                wait_for(lambda: proxy.accepted >= 2, "the reader to reconnect")
                self.client.append(p, b"b")
                self.assertEqual(c.next().data, b"b")
                self.client.close_stream(p)
                self.assertEqual([(r.kind, r.data) for r in c.finish()], [("data", b"a"), ("data", b"b"), ("close", b"")])

    def test_resumes_from_an_offset(self) -> None:
        p = self.stream()
        for x in (b"a", b"b", b"c"):
            self.client.append(p, x)
        r = self.client.read(p)
        it = iter(r)
        self.assertEqual(next(it).data, b"a")
        self.assertEqual(r.offset, weir.format_offset(1))
        rest = self.client.read(p, offset=r.offset)
        self.assertEqual([x.data for x in rest], [b"b", b"c"])
        # The committed view stops at a chunk whose attempt is open, and goes
        # on from there once it commits.
        w = self.client.writer(p, "slow", 1)
        w.write(b"pending")
        self.client.append(p, b"d")
        held = self.client.read(p, offset=rest.offset)
        self.assertEqual(list(held), [])
        self.assertEqual(held.offset, weir.format_offset(3))
        w.commit()
        after = self.client.read(p, offset=held.offset)
        self.assertEqual([x.data for x in after], [b"pending", b"d"])
        self.assertEqual(list(self.client.read(p, offset=after.offset)), [])

    def test_offset_now_and_binary_data(self) -> None:
        blob = bytes(range(256)) * 3
        for live in MODES:
            with self.subTest(live=live):
                p = self.stream()
                self.client.append(p, b"old")
                before = self.readers(live)
                c = self.follow(p, live, view="live", offset=weir.NOW)
                wait_for(lambda: self.readers(live) >= before + 1, f"the {live} reader waiting")
                self.client.append(p, blob)
                self.client.close_stream(p)
                recs = c.finish()
                self.assertEqual([(r.kind, r.data) for r in recs], [("data", blob), ("close", b"")])
                self.assertEqual(recs[0].offset, 1)
                # Catch-up: everything, then the end.
                self.assertEqual(self.data(p, "live"), [b"old", blob])

    def test_read_errors(self) -> None:
        with self.assertRaises(weir.NotFoundError) as cm:
            list(self.client.read("py/no/such/stream"))
        self.assertEqual(cm.exception.status, 404)
        p = self.stream()
        with self.assertRaises(weir.BadRequestError):
            list(self.client.read(p, offset="0000000000000000_0000000000000099"))
        with self.assertRaises(ValueError):
            # Not a View on purpose: the check at run time is under test.
            self.client.read(p, view=cast(Any, "everything"))
        with self.assertRaises(ValueError):
            self.client.read("/leading/slash")


per_store(ReaderTests, globals())
