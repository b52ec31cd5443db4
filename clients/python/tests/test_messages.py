"""Messages to a run and the run events it publishes, with the demo workflow
``demo.chat`` (it sets its run event ``status``, takes messages
``{"text": …}`` on the topic ``user``, answers each on its stream ``reply``
and ends on ``{"text": "bye"}``, its output the number of turns); hooks closed
by their sender, with ``demo.approval``."""

from __future__ import annotations

import json
import time
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor

from harness import Collector, ServerCase, per_store, wait_for
from proxy import Proxy

import weir

MS = 1_000_000  # a Go time.Duration's millisecond
WAIT = 50_000 * MS  # demo.approval's wait when a test delivers: never reached


class MessageTests(ServerCase):
    def chat(self) -> weir.Run:
        """Starts demo.chat (cancelled after the test if still going)."""
        run = self.client.start("demo.chat")
        self.addCleanup(self.client.cancel, run.id)
        return run

    def status(self, run: weir.Run, after: int = 0) -> weir.RunEvent:
        """The run's event ``status`` newer than ``after``, waited for."""

        def newer() -> weir.RunEvent | None:
            return self.client.get_event(run.id, "status", wait=5, after=after)

        return wait_for(newer, f"run {run.id} to set its status after seq {after}", timeout=20)

    def status_is(self, run: weir.Run, value: object, after: int = 0) -> weir.RunEvent:
        """Follows the run's ``status`` until it is ``value``; returns that event."""
        seen: list[object] = []

        def reached() -> weir.RunEvent | None:
            nonlocal after
            ev = self.client.get_event(run.id, "status", wait=5, after=after)
            if ev is None:
                return None
            self.assertGreater(ev.seq, after)
            seen.append(ev.value)
            after = ev.seq
            return ev if ev.value == value else None

        ev = wait_for(reached, f"run {run.id}'s status to be {value} (seen {seen})", timeout=20)
        for v in seen:
            self.assertIn(v.get("state") if isinstance(v, dict) else None, ("waiting", "answering", "done"), seen)
        return ev

    def test_a_conversation(self) -> None:
        run = self.chat()
        reply = Collector(self.client.read_run(run.id, "reply", live="sse"))
        self.addCleanup(reply.reader.close)
        reply.start()

        first = self.status(run)
        self.assertEqual(first.key, "status")
        self.assertEqual(first.value, {"state": "waiting", "turns": 0})
        self.assertIsNotNone(first.at)
        self.assertEqual(self.client.get_event(run.id, "status"), first, "the latest value, without a wait")

        sent = self.client.send_message(run.id, "user", {"text": "hello there"})
        self.assertEqual((sent.run_id, sent.topic, sent.duplicate), (run.id, "user", False))
        self.assertGreater(sent.seq, first.seq)
        waiting = self.status_is(run, {"state": "waiting", "turns": 1}, after=first.seq)
        self.assertGreater(waiting.seq, sent.seq)

        # A topic the run never takes: its messages are left in its log.
        other = self.client.send_message(run.id, "other", ["kept", 1])
        self.assertEqual(other.topic, "other")
        bye = self.client.send_message(run.id, "user", {"text": "bye"}, idempotency_key="bye-" + uuid.uuid4().hex)
        self.assertFalse(bye.duplicate)
        done = self.client.wait(run.id, timeout=30)
        self.assertEqual((done.status, done.output), ("completed", 1), done.error)

        self.assertEqual("".join(r.text for r in reply.finish() if r.kind == "data"), "you said: hello there\n")
        last = self.client.get_event(run.id, "status")
        assert last is not None
        self.assertEqual(last.value, {"state": "done", "turns": 1})
        self.assertGreater(last.seq, waiting.seq)

        state = self.client.run_state(run.id)
        self.assertEqual(state.events, (last,))
        self.assertEqual(
            sorted((m.topic, m.received, m.taken, m.left) for m in state.messages),
            [("other", 1, 0, 1), ("user", 2, 2, 0)],
        )
        types = [e.type for e in self.client.events(run.id)]
        self.assertEqual(types.count("message_received"), 3)

        # The run ended: a wait for a newer value is a 404, not a wait.
        with self.assertRaises(weir.NotFoundError):
            self.client.get_event(run.id, "status", wait=30, after=last.seq)

    def test_a_message_sent_again_with_its_key_is_a_duplicate(self) -> None:
        run = self.chat()
        ready = self.status(run)
        key = "msg-" + uuid.uuid4().hex
        first = self.client.send_message(run.id, "user", {"text": "once", "id": 7}, idempotency_key=key)
        self.assertFalse(first.duplicate)
        # The same value (its dict built in another order), the same key: the
        # first reply, nothing added.
        again = self.client.send_message(run.id, "user", {"id": 7, "text": "once"}, idempotency_key=key)
        self.assertEqual((again.run_id, again.topic, again.seq, again.duplicate), (run.id, "user", first.seq, True))
        for topic, message in (("user", {"text": "twice", "id": 7}), ("other", {"text": "once", "id": 7})):
            with self.assertRaises(weir.KeyReusedError) as cm:
                self.client.send_message(run.id, topic, message, idempotency_key=key)
            self.assertEqual((cm.exception.status, cm.exception.code), (422, "key_reused"))

        # While the run goes on, what it took and left is not known yet.
        state = self.client.run_state(run.id)
        self.assertEqual([(m.topic, m.received, m.taken, m.left) for m in state.messages], [("user", 1, -1, -1)])
        self.status_is(run, {"state": "waiting", "turns": 1}, after=ready.seq)
        self.client.send_message(run.id, "user", {"text": "bye"})
        self.assertEqual(self.client.wait(run.id, timeout=30).output, 1, "one turn: the duplicate added nothing")
        state = self.client.run_state(run.id)
        self.assertEqual([(m.topic, m.received, m.taken, m.left) for m in state.messages], [("user", 2, 2, 0)])
        # The key still answers after the run ended.
        late = self.client.send_message(run.id, "user", {"text": "once", "id": 7}, idempotency_key=key)
        self.assertEqual((late.seq, late.duplicate), (first.seq, True))

    def test_a_lost_reply_is_retried_only_with_a_key(self) -> None:
        proxy = Proxy("127.0.0.1", urllib.parse.urlsplit(self.server.url).port or 0)
        self.addCleanup(proxy.close)
        via = self.new_client(proxy.url)
        run = self.chat()
        ready = self.status(run)

        # With a key: the reply is cut after the server recorded the message;
        # the client sends it again and gets the first reply.
        proxy.cut_replies(1, "full_reply")
        m = via.send_message(run.id, "user", {"text": "one"}, idempotency_key="k-" + uuid.uuid4().hex)
        self.assertEqual(proxy.cuts, 1, "the proxy cut the reply")
        self.assertEqual((m.run_id, m.duplicate), (run.id, True))
        self.assertGreaterEqual(via._t.retries, 1)
        turn = self.status_is(run, {"state": "waiting", "turns": 1}, after=ready.seq)

        # Without one: sent once. The message landed all the same, which is
        # why the client must not send it again.
        retries = via._t.retries
        proxy.cut_replies(1, "full_reply")
        with self.assertRaises(weir.WeirConnectionError) as cm:
            via.send_message(run.id, "user", {"text": "two"})
        self.assertFalse(cm.exception.unsent)
        self.assertEqual((proxy.cuts, via._t.retries), (2, retries), "not sent again")
        self.status_is(run, {"state": "waiting", "turns": 2}, after=turn.seq)
        self.assertEqual([(m.topic, m.received) for m in self.client.run_state(run.id).messages], [("user", 2)])
        self.client.send_message(run.id, "user", {"text": "bye"})
        self.assertEqual(self.client.wait(run.id, timeout=30).output, 2)

    def test_message_errors(self) -> None:
        with self.assertRaises(weir.NotFoundError) as cm:
            self.client.send_message("run_does_not_exist", "user", {"text": "hi"})
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))

        run = self.chat()
        self.status(run)
        # Topics the server refuses: the client escapes them, as any segment.
        for topic in ("a/b", "a?b", "a#b", "x" * 256, ".", ".."):
            # The topic's rule refuses it (invalid_name); . and .. are
            # refused first by the server's path guard (invalid).
            with self.assertRaises(weir.InvalidError, msg=topic) as cm:
                self.client.send_message(run.id, topic, 1)
            want = "invalid" if topic in (".", "..") else "invalid_name"
            self.assertEqual((cm.exception.status, cm.exception.code), (400, want))
            self.assertEqual(isinstance(cm.exception, weir.InvalidNameError), want == "invalid_name")
            self.assertIsInstance(cm.exception, weir.BadRequestError)
        # A 255-byte topic is one, as is any text.
        for topic in ("x" * 255, "ünïcode topic"):
            self.assertEqual(self.client.send_message(run.id, topic, 1).topic, topic)
        for bad in (lambda: self.client.send_message(run.id, "", 1),
                    lambda: self.client.send_message("", "user", 1),
                    lambda: self.client.send_message(run.id, "user", 1, idempotency_key=""),
                    lambda: self.client.send_message(run.id, "user", float("nan"))):
            with self.assertRaises(ValueError):
                bad()
        with self.assertRaises(TypeError):
            self.client.send_message(run.id, "user", {1, 2})

        # The size limit: refused before sending, and by the server.
        big = "x" * (weir.MAX_MESSAGE_BYTES - 1)  # 1 MiB + 1 byte, quoted
        with self.assertRaises(weir.TooLargeError) as cm:
            self.client.send_message(run.id, "big", big)
        self.assertEqual(cm.exception.status, 0, "refused before sending")
        path = f"/v1/runs/{run.id}/messages/big"
        with self.assertRaises(weir.TooLargeError) as cm:
            self.client._t.request("POST", path, headers={"Content-Type": "application/json"},
                                   body=json.dumps(big).encode(), idempotent=False)
        self.assertEqual((cm.exception.status, cm.exception.code), (413, "too_large"))
        with self.assertRaises(weir.InvalidError):
            self.client._t.request("POST", path, headers={"Content-Type": "application/json"},
                                   body=b'{"text":', idempotent=False)
        self.assertNotIn("big", [m.topic for m in self.client.run_state(run.id).messages])
        self.assertEqual(len(json.dumps(big[:-1])), weir.MAX_MESSAGE_BYTES)
        self.assertEqual(self.client.send_message(run.id, "big", big[:-1]).topic, "big", "exactly 1 MiB")

        # An ended run takes no more messages, with a key or without.
        self.client.send_message(run.id, "user", {"text": "bye"})
        self.assertEqual(self.client.wait(run.id, timeout=30).output, 0)
        for kw in ({}, {"idempotency_key": "late-" + uuid.uuid4().hex}):
            with self.assertRaises(weir.GoneError) as cm:
                self.client.send_message(run.id, "user", {"text": "late"}, **kw)
            self.assertEqual((cm.exception.status, cm.exception.code), (410, "gone"))
        left = {m.topic: (m.received, m.taken, m.left) for m in self.client.run_state(run.id).messages}
        self.assertEqual(left["user"], (1, 1, 0))
        self.assertEqual(left["big"], (1, 0, 1))

    def test_run_events(self) -> None:
        with self.assertRaises(weir.NotFoundError) as cm:
            self.client.get_event("run_does_not_exist", "status")
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))
        with self.assertRaises(weir.NotFoundError):
            self.client.run_state("run_does_not_exist")

        run = self.chat()
        first = self.status(run)
        with self.assertRaises(weir.NotFoundError) as cm:
            self.client.get_event(run.id, "never-set")
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))

        # Nothing newer within the wait: None, after about the wait.
        t0 = time.monotonic()
        self.assertIsNone(self.client.get_event(run.id, "status", wait=0.2, after=first.seq))
        self.assertGreaterEqual(time.monotonic() - t0, 0.15)
        # A wait longer than the client's timeout: the reply is awaited for it.
        short = self.new_client(timeout=0.5, retry_for=0)
        t0 = time.monotonic()
        self.assertIsNone(short.get_event(run.id, "status", wait=1.5, after=first.seq))
        self.assertGreaterEqual(time.monotonic() - t0, 1.4)
        # A wait for a key not set yet comes back empty too.
        self.assertIsNone(self.client.get_event(run.id, "never-set", wait=0.2))

        # A waiter for the next value gets it when the run sets it.
        with ThreadPoolExecutor(1) as pool:
            waiter = pool.submit(self.client.get_event, run.id, "status", wait=30, after=first.seq)
            self.client.send_message(run.id, "user", {"text": "go on"})
            nxt = waiter.result(timeout=40)
        assert nxt is not None
        self.assertGreater(nxt.seq, first.seq)
        self.assertIn(nxt.value, ({"state": "answering", "turns": 1}, {"state": "waiting", "turns": 1}))

        for bad in (lambda: self.client.get_event(run.id, "status", wait=-1),
                    lambda: self.client.get_event(run.id, "status", wait=60.5),
                    lambda: self.client.get_event(run.id, "status", wait=float("nan")),
                    lambda: self.client.get_event(run.id, "status", after=1),
                    lambda: self.client.get_event(run.id, "status", wait=1, after=-1),
                    lambda: self.client.get_event(run.id, ""),
                    lambda: self.client.get_event("", "status")):
            with self.assertRaises(ValueError):
                bad()
        with self.assertRaises(weir.InvalidError):
            self.client.get_event(run.id, "a/b")

        state = self.client.run_state(run.id)
        self.assertEqual([e.key for e in state.events], ["status"])
        self.assertGreaterEqual(state.events[0].seq, nxt.seq)


class HookCloseTests(ServerCase):
    def approval(self) -> tuple[weir.Run, str]:
        """Starts demo.approval on a fresh token and waits for its hook."""
        token = "py-" + uuid.uuid4().hex[:12]
        run = self.client.start("demo.approval", {"token": token, "timeout": WAIT})
        self.addCleanup(self.client.cancel, run.id)
        wait_for(lambda: any(h.token == token for h in self.client.hooks(run.id)),
                 f"run {run.id} to create its hook {token!r}", timeout=20)
        return run, token

    def test_a_delivery_closes_its_hook(self) -> None:
        run, token = self.approval()
        key = "last-" + uuid.uuid4().hex
        d = self.client.deliver_hook(token, {"ok": True}, idempotency_key=key, close=True)
        self.assertEqual((d.run_id, d.count, d.duplicate, d.closed), (run.id, 1, False, True))
        again = self.client.deliver_hook(token, {"ok": True}, idempotency_key=key, close=True)
        self.assertEqual((again.seq, again.count, again.duplicate, again.closed), (d.seq, 1, True, True))
        # The same payload and key without the close is another request.
        with self.assertRaises(weir.KeyReusedError):
            self.client.deliver_hook(token, {"ok": True}, idempotency_key=key)
        for send in (lambda: self.client.deliver_hook(token, {"ok": False}),
                     lambda: self.client.deliver_hook(token, 2, close=True),
                     lambda: self.client.close_hook(token)):
            with self.assertRaises(weir.GoneError) as cm:
                send()
            self.assertEqual((cm.exception.status, cm.exception.code), (410, "gone"))
        done = self.client.wait(run.id, timeout=30)
        self.assertEqual(done.output, {"token": token, "approved": True, "payload": {"ok": True}})
        self.assertEqual([(h.received, h.disposed) for h in self.client.hooks(run.id)], [(1, True)])

    def test_close_hook(self) -> None:
        run, token = self.approval()
        key = "close-" + uuid.uuid4().hex
        c = self.client.close_hook(token, idempotency_key=key)
        self.assertEqual((c.run_id, c.count, c.duplicate, c.closed), (run.id, 0, False, True))
        again = self.client.close_hook(token, idempotency_key=key)
        self.assertEqual((again.seq, again.duplicate, again.closed), (c.seq, True, True))
        with self.assertRaises(weir.KeyReusedError):
            self.client.deliver_hook(token, "x", idempotency_key=key, close=True)
        for send in (lambda: self.client.deliver_hook(token, "late"),
                     lambda: self.client.close_hook(token),
                     lambda: self.client.close_hook(token, idempotency_key="other-" + uuid.uuid4().hex)):
            with self.assertRaises(weir.GoneError):
                send()
        # demo.approval waits for one payload: a hook closed without one
        # fails its run.
        done = self.client.wait(run.id, timeout=30)
        self.assertEqual(done.status, "failed")
        self.assertIn("disposed", done.error)
        self.assertEqual([(h.received, h.disposed) for h in self.client.hooks(run.id)], [(0, True)])

        with self.assertRaises(weir.NotFoundError):
            self.client.close_hook("py-no-such-" + uuid.uuid4().hex)
        for bad in (lambda: self.client.close_hook(""), lambda: self.client.close_hook("t", idempotency_key="")):
            with self.assertRaises(ValueError):
                bad()

    def test_a_lost_close_is_retried_with_its_key(self) -> None:
        proxy = Proxy("127.0.0.1", urllib.parse.urlsplit(self.server.url).port or 0)
        self.addCleanup(proxy.close)
        via = self.new_client(proxy.url)
        run, token = self.approval()
        proxy.cut_replies(1, "full_reply")
        c = via.close_hook(token, idempotency_key="k-" + uuid.uuid4().hex)
        self.assertEqual(proxy.cuts, 1, "the proxy cut the reply")
        self.assertEqual((c.run_id, c.duplicate, c.closed), (run.id, True, True))
        # Without a key it is sent once: sent again, it would be a 410.
        run, token = self.approval()
        retries = via._t.retries
        proxy.cut_replies(1, "full_reply")
        with self.assertRaises(weir.WeirConnectionError):
            via.close_hook(token)
        self.assertEqual((proxy.cuts, via._t.retries), (2, retries), "not sent again")
        self.assertEqual([h.disposed for h in self.client.hooks(run.id)], [True])


per_store(MessageTests, globals())
per_store(HookCloseTests, globals())
