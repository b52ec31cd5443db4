"""The exactly-once writer against a real weir server."""

from __future__ import annotations

import urllib.parse

from harness import ServerCase, per_store
from proxy import Proxy

import weir


class StepFailed(Exception):
    """A step's attempt failing (the model dropped, say)."""


class WriterTests(ServerCase):
    def live(self, path: str) -> list[weir.Record]:
        return self.records(path, "live")

    def test_identical_retry_is_adopted(self) -> None:
        p = self.stream("text/plain")
        first: list[weir.Ack] = []  # set in the block assertRaises ends
        with self.assertRaises(StepFailed):
            with self.client.writer(p, "step/gen", 1, content_type="text/plain", keep_acks=True) as w:
                w.write("Hello", ",", " world")
                first = w.flush()
                raise StepFailed
        self.assertEqual([a.outcome for a in first], ["appended"] * 3)
        self.assertEqual(self.data(p), [], "an open attempt's chunks are not committed")
        with self.client.writer(p, "step/gen", 2, content_type="text/plain", keep_acks=True) as w:
            w.write("Hello", ",", " world", "!")
            acks = w.flush()
        self.assertEqual([a.outcome for a in acks], ["adopted"] * 3 + ["appended"])
        self.assertEqual([a.offset for a in acks[:3]], [a.offset for a in first])
        self.assertEqual([a.seq for a in acks], [0, 1, 2, 3])
        self.assertEqual(self.data(p), [b"Hello", b",", b" world", b"!"])
        # Even the live view has each chunk once: adopted chunks add no record.
        kinds = [(r.kind, r.attempt, r.seq) for r in self.live(p)]
        self.assertEqual(kinds, [("data", 1, 0), ("data", 1, 1), ("data", 1, 2), ("data", 2, 3), ("commit", 2, 0)])

    def test_divergent_retry_aborts_the_rest(self) -> None:
        p = self.stream()
        with self.assertRaises(StepFailed):
            with self.client.writer(p, "step/gen", 1) as w:
                w.write(b"The answer is", b" forty-one", b", give or take")
                raise StepFailed
        with self.client.writer(p, "step/gen", 2, keep_acks=True) as w:
            w.write(b"The answer is", b" forty-two")
            acks = w.flush()
        self.assertEqual([a.outcome for a in acks], ["adopted", "appended"])
        self.assertEqual(self.data(p), [b"The answer is", b" forty-two"])
        live = self.records(p, "live", apply_aborts=True)
        self.assertEqual([r.kind for r in live], ["data", "data", "data", "abort", "data", "commit"])
        abort = live[3]
        self.assertEqual((abort.writer, abort.attempt, abort.from_seq), ("step/gen", 2, 1))
        self.assertEqual(abort.voided, (live[1].offset, live[2].offset))
        # The live view with its aborts applied is the committed view.
        void = {o for r in live for o in r.voided}
        self.assertEqual([r.data for r in live if r.kind == "data" and r.offset not in void], self.data(p))

    def test_step_that_fails_for_good_is_aborted(self) -> None:
        p = self.stream()
        self.client.append(p, "before ")
        for attempt in (1, 2):
            with self.assertRaises(StepFailed):
                with self.client.writer(p, "step/gen", attempt) as w:
                    w.write(b"partial ", b"output")
                    w.flush()
                    raise StepFailed
        self.assertEqual(self.client.writer(p, "step/gen", 2).abort(), "done")
        self.assertEqual(self.client.writer(p, "step/gen", 2).abort(), "already")
        self.client.append(p, "after")
        self.assertEqual(self.data(p), [b"before ", b"after"])
        live = self.live(p)
        self.assertIn(("abort", 0), [(r.kind, r.from_seq) for r in live])
        w = self.client.writer(p, "step/gen", 3)
        with self.assertRaises(weir.WriterFinishedError) as cm:
            w.write(b"again")
        self.assertEqual((cm.exception.status, cm.exception.code), (409, "writer_finished"))
        # The refusal finishes this writer object too.
        with self.assertRaises(weir.WriterFinishedError):
            w.flush()

    def test_zombie_attempt_is_fenced(self) -> None:
        p = self.stream()
        old = self.client.writer(p, "step/3", 1)
        old.write(b"old")
        new = self.client.writer(p, "step/3", 2)
        new.write(b"new")
        with self.assertRaises(weir.FencedError) as cm:
            old.write(b"zombie")
        self.assertEqual(cm.exception.current_attempt, 2)
        self.assertEqual(cm.exception.status, 403)
        with self.assertRaises(weir.FencedError):
            old.commit()
        with self.assertRaises(weir.FencedError):
            self.client.writer(p, "step/3", 1).commit()
        self.assertEqual(new.commit(), "done")
        self.assertEqual(self.data(p), [b"new"])
        self.assertNotIn(b"zombie", [r.data for r in self.live(p)])

    def test_reply_lost_after_the_server_committed(self) -> None:
        """A batch whose reply is cut after the server committed it is sent
        again by the client: acknowledged as a retransmit, never appended twice."""
        proxy = Proxy("127.0.0.1", urllib.parse.urlsplit(self.server.url).port or 0)
        self.addCleanup(proxy.close)
        via = self.new_client(proxy.url)
        p = self.stream("text/plain")
        w = via.writer(p, "job-7", 1, content_type="text/plain", keep_acks=True)
        w.write("p1", "p2")
        self.assertEqual([a.outcome for a in w.flush()], ["appended"] * 2)
        for i, mode in enumerate(("first_byte", "full_reply")):
            with self.subTest(mode=mode):
                proxy.cut_replies(1, mode)
                w.write(f"p{3 + 2 * i}", f"p{4 + 2 * i}")
                acks = w.flush()
                self.assertEqual(proxy.cuts, i + 1, "the proxy cut the reply")
                self.assertEqual([a.outcome for a in acks], ["retransmit"] * 2)
                self.assertEqual(w.requests, 2 + i)
        self.assertGreaterEqual(via._t.retries, 2)
        self.assertEqual(w.commit(), "done")
        want = [b"p1", b"p2", b"p3", b"p4", b"p5", b"p6"]
        self.assertEqual(self.data(p), want)
        self.assertEqual([r.data for r in self.live(p) if r.kind == "data"], want)
        self.assertEqual(self.server.metric("weir_stream_chunks_total", 'outcome="retransmit"') >= 4, True)

    def test_failed_request_is_sent_again_with_the_same_seqs(self) -> None:
        proxy = Proxy("127.0.0.1", urllib.parse.urlsplit(self.server.url).port or 0)
        self.addCleanup(proxy.close)
        via = self.new_client(proxy.url, retry_for=0.3)
        p = self.stream()
        w = via.writer(p, "job-8", 1, keep_acks=True)
        w.write(b"a")
        # Requests never reach the server: the write fails, its chunk stays.
        proxy.drop_requests = True
        with self.assertRaises(weir.WeirConnectionError):
            w.write(b"b")
        self.assertGreater(proxy.drops, 1, "the client retried before giving up")
        self.assertEqual((w.buffered, w.next_seq), (1, 2))
        proxy.drop_requests = False
        # Replies are lost every time: the server has the chunk, the client does not know.
        proxy.cut_replies(1000)
        with self.assertRaises(weir.WeirConnectionError):
            w.write(b"c")
        proxy.stop_cutting()
        w.write(b"d")
        self.assertEqual([(a.seq, a.outcome) for a in w.flush()],
                         [(0, "appended"), (1, "retransmit"), (2, "retransmit"), (3, "appended")])
        w.commit()
        self.assertEqual(self.data(p, "live"), [b"a", b"b", b"c", b"d"])
        self.assertEqual(self.data(p), [b"a", b"b", b"c", b"d"])

    def test_batching(self) -> None:
        p = self.stream()
        # Batches fill up: sent at once, in the caller's thread.
        w = self.client.writer(p, "batcher", 1, linger=60, max_batch_chunks=10, keep_acks=True)
        for i in range(25):
            w.write(b"%d," % i)
        self.assertEqual((w.requests, w.buffered), (2, 5))
        self.assertEqual(len(w.flush()), 25)
        self.assertEqual(w.requests, 3)
        # Byte limits too (each chunk costs 4 bytes of framing).
        w2 = self.client.writer(p, "bytes", 1, linger=60, max_batch_bytes=3 * 104)
        w2.write(*[b"x" * 100] * 7)
        self.assertEqual((w2.requests, w2.buffered), (3, 0))
        # Linger: the background thread sends what waited long enough.
        w3 = self.client.writer(p, "linger", 1, linger=0.01)
        for i in range(200):
            w3.write(b"t%d " % i)
        self.assertEqual(w3.flush(), [], "acks are kept only with keep_acks=True")
        w3.commit()
        self.assertLess(w3.requests, 200)
        self.assertEqual(w3.outcomes["appended"], 200)
        assert w3.last_ack is not None
        self.assertEqual((w3.last_ack.seq, w3.last_ack.outcome), (199, "appended"))
        w.commit()
        w2.commit()
        data = self.data(p)
        self.assertEqual(len(data), 25 + 7 + 200)
        self.assertEqual(data[:25], [b"%d," % i for i in range(25)])

    def test_start_seq(self) -> None:
        p = self.stream()
        w = self.client.writer(p, "resumable", 1)
        w.write(b"a", b"b")
        w.close()  # the attempt stays open, as after a crash
        # start_seq=None goes on after what the attempt has.
        w2 = self.client.writer(p, "resumable", 1, start_seq=None)
        self.assertIsNone(w2.next_seq)
        w2.write(b"c")
        self.assertEqual(w2.next_seq, 3)
        self.assertEqual(w2.commit(), "done")
        self.assertEqual(self.data(p), [b"a", b"b", b"c"])
        # A start_seq past what the server has is a gap it cannot fill.
        w3 = self.client.writer(p, "other", 1, start_seq=5)
        with self.assertRaises(weir.GapError) as cm:
            w3.write(b"x")
        self.assertEqual(cm.exception.expected, 0)
        self.assertIn("start_seq=0", str(cm.exception))

    def test_bad_input(self) -> None:
        p = self.stream("application/octet-stream")
        big = b"x" * (weir.MAX_CHUNK_BYTES + 1)
        w = self.client.writer(p, "w", 1)
        with self.assertRaises(weir.TooLargeError) as cm:
            w.write(b"ok", big)
        self.assertEqual(cm.exception.status, 0, "refused before sending")
        w.write(b"ok")  # the writer goes on; nothing of the refused call was written
        with self.assertRaises(weir.TooLargeError) as cm:
            self.client.append(p, big, writer="w-big", attempt=1, seq=0)
        self.assertEqual((cm.exception.status, cm.exception.code), (413, "too_large"))
        # A wrong seq: the server expects 0 from a new writer.
        with self.assertRaises(weir.GapError) as gap:
            self.client.append(p, b"x", writer="w-gap", attempt=1, seq=5)
        self.assertEqual((gap.exception.status, gap.exception.expected), (409, 0))
        # An acknowledged seq with other bytes.
        self.client.append(p, b"a", writer="w-seq", attempt=1, seq=0)
        with self.assertRaises(weir.ChunkConflictError) as cc:
            self.client.append(p, b"b", writer="w-seq", attempt=1, seq=0)
        self.assertEqual(cc.exception.status, 422)
        # Another content type than the stream's.
        with self.assertRaises(weir.ConflictError):
            self.client.append(p, "text", "text/plain")
        with self.assertRaises(ValueError):
            self.client.writer(p, "", 1)
        self.assertEqual(w.commit(), "done")
        self.assertEqual(self.data(p), [b"ok"])

    def test_closed_stream(self) -> None:
        p = self.stream()
        w = self.client.writer(p, "w", 1, keep_acks=True)
        w.write(b"one")
        acks = w.flush()
        self.client.close_stream(p)
        self.client.close_stream(p)  # twice is fine
        # An exact retransmit is acknowledged; anything new is refused.
        again = self.client.append(p, b"one", writer="w", attempt=1, seq=0)
        self.assertEqual([(a.offset, a.outcome) for a in again.acks], [(acks[0].offset, "retransmit")])
        with self.assertRaises(weir.ClosedError) as cm:
            w.write(b"two")
        self.assertTrue(cm.exception.next_offset)
        # The close finished the open writer: its chunk never commits.
        self.assertEqual([r.kind for r in self.records(p)], ["close"])

    def test_json_stream(self) -> None:
        p = self.stream("application/json")
        with self.client.writer(p, "json", 1, content_type="application/json") as w:
            w.write_json({"t": "a"}, [1, 2], "s")
            w.write(b' {"t" : "b"} ')
            with self.assertRaises(ValueError):
                w.write(b"{not json")
        recs = [r for r in self.records(p) if r.kind == "data"]
        self.assertEqual([r.value for r in recs], [{"t": "a"}, [1, 2], "s", {"t": "b"}])
        self.assertEqual(recs[3].data, b'{"t":"b"}')

    def test_attempt_zero_commits_at_append(self) -> None:
        p = self.stream()
        w = self.client.writer(p, "producer", 0)
        w.write(b"now")
        self.assertEqual(self.data(p), [b"now"])
        # Sent again, the same chunk is a retransmit.
        again = self.client.append(p, b"now", writer="producer", attempt=0, seq=0)
        self.assertEqual(again.acks[0].outcome, "retransmit")
        self.assertEqual(w.commit(), "done")

    def test_nothing_written_commits_empty(self) -> None:
        p = self.stream()
        with self.client.writer(p, "quiet", 1) as w:
            pass
        self.assertEqual(w.requests, 0)
        self.assertEqual(self.client.writer(p, "quiet", 2).commit(), "empty")

    def test_token(self) -> None:
        p = self.stream()
        anon = self.new_client(token="")
        with self.assertRaises(weir.UnauthorizedError) as cm:
            anon.writer(p, "w", 1, create=False).write(b"x")
        self.assertEqual(cm.exception.status, 401)
        self.assertNotIn(self.server.token, str(cm.exception))
        wrong = self.new_client(token="wrong")
        with self.assertRaises(weir.UnauthorizedError):
            wrong.append(p, "x", "text/plain")
        # Reads on loopback need no token.
        self.assertEqual(list(anon.read(p)), [])


per_store(WriterTests, globals())
