"""Hooks: payloads delivered to a run's hook, with the demo workflow
``demo.approval`` (it creates a hook, waits for one payload, writes a note to
its stream ``approval`` and returns ``{token, approved, payload}``)."""

from __future__ import annotations

import json
import urllib.parse
import uuid

from harness import ServerCase, per_store, wait_for
from proxy import Proxy

import weir

MS = 1_000_000  # a Go time.Duration's millisecond
WAIT = 50_000 * MS  # demo.approval's wait when a test delivers: never reached


class HookTests(ServerCase):
    def approval(self, token: str | None = None, timeout: int = WAIT) -> tuple[weir.Run, str]:
        """Starts demo.approval on a fresh token (cancelled after the test if
        still waiting)."""
        token = token or "py-" + uuid.uuid4().hex[:12]
        run = self.client.start("demo.approval", {"token": token, "timeout": timeout})
        self.addCleanup(self.client.cancel, run.id)
        return run, token

    def hook_of(self, run: weir.Run, token: str) -> weir.Hook:
        """Polls the run's hooks until it has created the one of ``token``."""
        return wait_for(
            lambda: next((h for h in self.client.hooks(run.id) if h.token == token), None),
            f"run {run.id} to create its hook {token!r}",
            timeout=20,
        )

    def deliver_when_ready(self, token: str, payload: object, *, idempotency_key: str | None = None) -> weir.HookDelivery:
        """Delivers as soon as the hook exists: until the run has created it,
        the token answers 404 (and nothing was delivered)."""

        def once() -> weir.HookDelivery | None:
            try:
                return self.client.deliver_hook(token, payload, idempotency_key=idempotency_key)
            except weir.NotFoundError:
                return None

        return wait_for(once, f"the hook {token!r} to take a delivery (404 until its run creates it)", timeout=20)

    def test_a_delivery_resumes_the_run(self) -> None:
        run, token = self.approval()
        payload = {"approved_by": "ann", "note": "ship it ✓", "n": [1, 2.5, None, True]}
        d = self.deliver_when_ready(token, payload)
        self.assertEqual((d.run_id, d.count, d.duplicate), (run.id, 1, False))
        done = self.client.wait(run.id, timeout=30)
        self.assertEqual(done.status, "completed", done.error)
        self.assertEqual(done.output, {"token": token, "approved": True, "payload": payload})

        # Two parallel steps note where the answer goes; then the answer.
        notes = [r.text for r in self.client.read_run(run.id, "approval")
                 if r.kind == "data" and not r.text.startswith("asked by ")]
        self.assertEqual(len(notes), 1, notes)
        head, _, rest = notes[0].partition(" ")
        self.assertEqual((head, json.loads(rest)), ("received", payload))

        events = self.client.events(run.id)
        received = [e for e in events if e.type == "hook_received"]
        self.assertEqual([(e.seq, e.op, e.name, e.data) for e in received], [(d.seq, d.op, token, payload)])
        self.assertIn("hook_created", [e.type for e in events])

        hooks = self.client.hooks(run.id)
        self.assertEqual([(h.token, h.op, h.received, h.disposed) for h in hooks], [(token, d.op, 1, True)])
        self.assertIsNotNone(hooks[0].created_at)

        # The run ended: its hook takes nothing more, with a key or without.
        for key in (None, "late-" + uuid.uuid4().hex):
            with self.assertRaises(weir.GoneError) as cm:
                self.client.deliver_hook(token, {"approved_by": "bob"}, idempotency_key=key)
            self.assertEqual((cm.exception.status, cm.exception.code), (410, "gone"))

    def test_a_delivery_sent_again_with_its_key_is_a_duplicate(self) -> None:
        run, token = self.approval()
        hook = self.hook_of(run, token)
        self.assertEqual((hook.received, hook.disposed), (0, False))
        key = "form-" + uuid.uuid4().hex
        first = self.client.deliver_hook(token, {"by": "ann", "ok": True}, idempotency_key=key)
        self.assertFalse(first.duplicate)
        # The same value (its dict built in another order), the same key: the
        # first reply, nothing added.
        again = self.client.deliver_hook(token, {"ok": True, "by": "ann"}, idempotency_key=key)
        self.assertTrue(again.duplicate)
        self.assertEqual((again.run_id, again.op, again.seq, again.count), (first.run_id, first.op, first.seq, 1))
        with self.assertRaises(weir.KeyReusedError) as cm:
            self.client.deliver_hook(token, {"by": "bob", "ok": False}, idempotency_key=key)
        self.assertEqual((cm.exception.status, cm.exception.code), (422, "key_reused"))

        done = self.client.wait(run.id, timeout=30)
        self.assertEqual(done.output, {"token": token, "approved": True, "payload": {"by": "ann", "ok": True}})
        self.assertEqual([h.received for h in self.client.hooks(run.id)], [1])
        self.assertEqual(len([e for e in self.client.events(run.id) if e.type == "hook_received"]), 1)
        # The key still answers after the run ended.
        self.assertTrue(self.client.deliver_hook(token, {"by": "ann", "ok": True}, idempotency_key=key).duplicate)

    def test_a_lost_reply_is_retried_only_with_a_key(self) -> None:
        proxy = Proxy("127.0.0.1", urllib.parse.urlsplit(self.server.url).port or 0)
        self.addCleanup(proxy.close)
        via = self.new_client(proxy.url)

        # With a key: the reply is cut after the server recorded the delivery;
        # the client sends it again and gets the first reply.
        run, token = self.approval()
        self.hook_of(run, token)
        proxy.cut_replies(1, "full_reply")
        d = via.deliver_hook(token, "yes", idempotency_key="k-" + uuid.uuid4().hex)
        self.assertEqual(proxy.cuts, 1, "the proxy cut the reply")
        self.assertEqual((d.run_id, d.count, d.duplicate), (run.id, 1, True))
        self.assertGreaterEqual(via._t.retries, 1)
        self.assertEqual(self.client.wait(run.id, timeout=30).output["payload"], "yes")

        # Without one: sent once. The delivery landed all the same, which is
        # why the client must not send it again.
        run, token = self.approval()
        self.hook_of(run, token)
        retries = via._t.retries
        proxy.cut_replies(1, "full_reply")
        with self.assertRaises(weir.WeirConnectionError) as cm:
            via.deliver_hook(token, "yes")
        self.assertFalse(cm.exception.unsent)
        self.assertEqual((proxy.cuts, via._t.retries), (2, retries), "not sent again")
        done = self.client.wait(run.id, timeout=30)
        self.assertEqual(done.output, {"token": token, "approved": True, "payload": "yes"})
        self.assertEqual([h.received for h in self.client.hooks(run.id)], [1])

    def test_payload_limits(self) -> None:
        run, token = self.approval()
        self.hook_of(run, token)
        big = "x" * (weir.MAX_HOOK_PAYLOAD_BYTES - 1)  # 1 MiB + 1 byte, quoted
        with self.assertRaises(weir.TooLargeError) as cm:
            self.client.deliver_hook(token, big)
        self.assertEqual(cm.exception.status, 0, "refused before sending")
        # The server refuses it too.
        raw = json.dumps(big).encode()
        with self.assertRaises(weir.TooLargeError) as cm:
            self.client._t.request("POST", f"/v1/hooks/{token}", headers={"Content-Type": "application/json"},
                                   body=raw, idempotent=False)
        self.assertEqual((cm.exception.status, cm.exception.code), (413, "too_large"))
        with self.assertRaises(weir.UnsupportedMediaTypeError):
            self.client._t.request("POST", f"/v1/hooks/{token}", headers={"Content-Type": "text/plain"},
                                   body=b'"yes"', idempotent=False)
        with self.assertRaises(weir.BadRequestError):
            self.client._t.request("POST", f"/v1/hooks/{token}", headers={"Content-Type": "application/json"},
                                   body=b'{"by":', idempotent=False)
        # Nothing of that reached the hook; exactly 1 MiB does.
        self.assertEqual([h.received for h in self.client.hooks(run.id)], [0])
        self.assertEqual(len(json.dumps(big[:-1])), weir.MAX_HOOK_PAYLOAD_BYTES)
        d = self.client.deliver_hook(token, big[:-1])
        self.assertEqual(d.count, 1)
        done = self.client.wait(run.id, timeout=30)
        self.assertEqual((done.status, len(done.output["payload"])), ("completed", weir.MAX_HOOK_PAYLOAD_BYTES - 2))

    def test_errors(self) -> None:
        with self.assertRaises(weir.NotFoundError) as cm:
            self.client.deliver_hook("py-no-such-" + uuid.uuid4().hex, {"x": 1})
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))
        with self.assertRaises(weir.NotFoundError):
            self.client.hooks("run_does_not_exist")
        with self.assertRaises(weir.BadRequestError):
            self.client.deliver_hook("a?b", 1)
        for bad in (lambda: self.client.deliver_hook("", 1),
                    lambda: self.client.deliver_hook("t", 1, idempotency_key=""),
                    lambda: self.client.deliver_hook("t", float("nan"))):
            with self.assertRaises(ValueError):
                bad()
        with self.assertRaises(TypeError):
            self.client.deliver_hook("t", {1, 2})

        # No payload in time: the run ends without one, and its hook is gone.
        run, token = self.approval(timeout=20 * MS)
        done = self.client.wait(run.id, timeout=30)
        self.assertEqual(done.output, {"token": token, "approved": False})
        self.assertEqual([r.text for r in self.client.read_run(run.id, "approval")
                          if r.kind == "data" and not r.text.startswith("asked by ")],
                         ["no answer within 20ms"])
        self.assertEqual([(h.token, h.received, h.disposed) for h in self.client.hooks(run.id)], [(token, 0, True)])
        with self.assertRaises(weir.GoneError):
            self.client.deliver_hook(token, "too late")

        # A token a live hook of another run holds: the second run fails
        # (hook_in_use is raised to the workflow, not to a deliverer).
        first, token = self.approval()
        self.hook_of(first, token)
        second, _ = self.approval(token)
        failed = self.client.wait(second.id, timeout=30)
        self.assertEqual(failed.status, "failed")
        self.assertIn("hook token in use", failed.error)
        self.assertEqual(self.client.hooks(second.id), [])
        d = self.client.deliver_hook(token, "for the first")
        self.assertEqual(d.run_id, first.id)
        self.assertTrue(self.client.wait(first.id, timeout=30).output["approved"])
        # Once the first run ended, its token is free for another.
        third, _ = self.approval(token)
        self.assertEqual(self.hook_of(third, token).received, 0)
        self.assertEqual(self.client.deliver_hook(token, "third").run_id, third.id)


per_store(HookTests, globals())
