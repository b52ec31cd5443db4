"""What needs no server: the error table, offsets, values, voids, the build backend."""

from __future__ import annotations

import http.server
import importlib.util
import json
import re
import struct
import tarfile
import tempfile
import threading
import unittest
import zipfile
from pathlib import Path
from typing import Any, Literal

import weir
from weir.client import _millis
from weir.types import _time

RecordKind = Literal["data", "abort", "commit", "close", "reopen"]  # weir.Record.kind

HERE = Path(__file__).resolve().parent
CLIENT = HERE.parent
REPO = CLIENT.parent.parent


class ErrorTableTests(unittest.TestCase):
    @unittest.skipUnless((REPO / "api" / "errors.go").exists(), "not in weir's repository")
    def test_a_class_per_wire_code_of_the_server(self) -> None:
        """Every code of api.Errors (the Go table) has its class, retryable
        where the server says so."""
        src = (REPO / "api" / "errors.go").read_text()
        rows = re.findall(r'\{Err: [^}]*Code: "([a-z_]+)", Status: http\.Status\w+[^}]*\}', src)
        retryable = set(re.findall(r'Code: "([a-z_]+)"[^}]*Retryable: true', src)) | {"internal"}
        self.assertGreater(len(rows), 30, "the Go table was found")
        missing = set(rows) - set(weir.CODES)
        self.assertFalse(missing, "wire codes of api/errors.go without a class in weir/errors.py")
        for code, cls in weir.CODES.items():
            self.assertEqual(cls.retryable, code in retryable, code)
            self.assertTrue(cls.__doc__, code)

    def test_error_from_reply(self) -> None:
        e = weir.error_from_reply(403, {"Weir-Error": "fenced", "Weir-Attempt": "3"}, b"fenced: attempt 2 of w\nmore",
                                  method="POST", path="/v1/stream/s")
        assert isinstance(e, weir.FencedError), e
        self.assertEqual((e.current_attempt, e.message), (3, "fenced: attempt 2 of w"))
        self.assertEqual(str(e), "POST /v1/stream/s: fenced: attempt 2 of w (HTTP 403 fenced)")
        gap = weir.error_from_reply(409, {"weir-error": "gap", "weir-expected-seq": "7"}, b"gap")
        assert isinstance(gap, weir.GapError), gap
        self.assertEqual((type(gap), gap.expected), (weir.GapError, 7))
        # Without a code: by status and headers.
        self.assertIsInstance(weir.error_from_reply(409, {"Stream-Closed": "true"}, b""), weir.ClosedError)
        self.assertIsInstance(weir.error_from_reply(409, {"Weir-Expected-Seq": "1"}, b""), weir.GapError)
        self.assertIsInstance(weir.error_from_reply(400, {"Weir-Error": "invalid"}, b""), weir.BadRequestError)
        self.assertIsInstance(weir.error_from_reply(503, {"Weir-Error": "store_closed"}, b""), weir.UnavailableError)
        self.assertIsInstance(weir.error_from_reply(403, {}, b""), weir.ForbiddenError)
        self.assertIsInstance(weir.error_from_reply(403, {"Weir-Attempt": "2"}, b""), weir.FencedError)
        busy = weir.error_from_reply(503, {"Weir-Error": "busy", "Retry-After": "1"}, b"busy")
        assert isinstance(busy, weir.BusyError), busy
        self.assertEqual((type(busy), busy.retry_after, busy.retryable), (weir.BusyError, 1, True))
        self.assertIsInstance(busy, weir.UnavailableError)
        in_use = weir.error_from_reply(409, {"Weir-Error": "hook_in_use"}, b"create hook: hook token in use")
        self.assertEqual((type(in_use), in_use.status, in_use.retryable), (weir.HookInUseError, 409, False))
        bad = weir.error_from_reply(502, {}, b"")
        self.assertTrue(bad.retryable)
        self.assertEqual(weir.error_from_reply(418, {"Weir-Error": "from_the_future"}, b"tea").message, "tea")


class ValueTests(unittest.TestCase):
    def test_offsets(self) -> None:
        self.assertEqual(weir.format_offset(42), "0000000000000000_0000000000000042")
        self.assertEqual(weir.parse_offset("0000000000000000_0000000000000042"), 42)
        for bad in ("-1", "now", "1_2", "0000000000000000-1", "x_1"):
            with self.assertRaises(ValueError, msg=bad):
                weir.parse_offset(bad)
        with self.assertRaises(ValueError):
            weir.format_offset(-1)

    def test_times(self) -> None:
        t = _time("2026-11-29T10:02:48.127456789Z")
        assert t is not None
        off = t.utcoffset()
        assert off is not None, "an aware time"
        self.assertEqual((t.year, t.microsecond, off.total_seconds()), (2026, 127456, 0))
        self.assertIsNone(_time(None))

    def test_hook_values(self) -> None:
        d = weir.HookDelivery.from_json({"run_id": "run_1", "op": 1, "seq": 4, "count": 1})
        self.assertEqual(d, weir.HookDelivery("run_1", 1, 4, 1, False))
        self.assertTrue(weir.HookDelivery.from_json({"run_id": "run_1", "op": 1, "seq": 4, "count": 1,
                                                     "duplicate": True}).duplicate)
        h = weir.Hook.from_json({"token": "t", "op": 2, "received": 1, "disposed": True,
                                 "created_at": "2026-12-01T12:54:59.49Z"})
        self.assertEqual((h.token, h.op, h.received, h.disposed), ("t", 2, 1, True))
        assert h.created_at is not None
        self.assertEqual(h.created_at.microsecond, 490000)

    def test_queue_values(self) -> None:
        r = weir.Run.from_json({"id": "run_1", "workflow": "w", "status": "pending", "queue": "q",
                                "queue_key": "tenant-a", "priority": 5, "dedupe": "order-1", "queued": True})
        self.assertEqual((r.queue, r.queue_key, r.priority, r.dedupe, r.queued), ("q", "tenant-a", 5, "order-1", True))
        r = weir.Run.from_json({"id": "run_2", "workflow": "w", "status": "running"})
        self.assertEqual((r.queue, r.queue_key, r.priority, r.dedupe, r.queued), ("", "", 0, "", False))
        lim = weir.Limiter.from_json({"name": "q", "concurrency": 4, "per_key": 1,
                                      "state": {"held": 4, "waiting": 0, "taken": 0, "spent": 0, "queued": 7}})
        self.assertEqual((lim.per_key, lim.held, lim.queued), (1, 4, 7))
        # A debounce goes in whole milliseconds; one under a millisecond stays nonzero.
        self.assertEqual([_millis(s, "d") for s in (0, 0.25, 1.5, 0.0001, -0.0001, -2)], [0, 250, 1500, 1, -1, -2000])
        for bad in (float("nan"), float("inf")):
            with self.assertRaises(ValueError):
                _millis(bad, "d")

    def test_migrated(self) -> None:
        # The server lists at most 1,000 of the runs a migration moved, and
        # says how many moved and whether it left some out.
        m = weir.Migrated.from_json({"count": 1001, "migrated": ["a", "b"], "more": True})
        self.assertEqual((m.count, m.migrated, m.more), (1001, ("a", "b"), True))
        m = weir.Migrated.from_json({"count": 0, "migrated": []})
        self.assertEqual(m, weir.Migrated(count=0, migrated=()))

    def test_voids(self) -> None:
        v = weir.Voids()

        def rec(kind: RecordKind, offset: int, writer: str = "w", attempt: int = 1, seq: int = 0,
                from_seq: int = 0, count: int = 0) -> weir.Record:
            return weir.Record(offset, weir.format_offset(offset + 1), kind, writer, attempt, seq,
                               from_seq=from_seq, count=count)

        for i in range(3):
            self.assertEqual(v.push(rec("data", i, seq=i)), ())
        self.assertEqual(v.push(rec("data", 3, writer="anon", attempt=0)), ())
        self.assertEqual(v.push(rec("abort", 4, attempt=2, from_seq=1)), (1, 2))
        self.assertEqual(v.push(rec("data", 5, writer="x", seq=0)), ())
        self.assertEqual(v.push(rec("commit", 6, attempt=2, count=1)), ())
        self.assertEqual(v.push(rec("close", 7, writer="")), (5,))


class _Fake(http.server.BaseHTTPRequestHandler):
    """A stand-in for a server behind a proxy with a small body limit: framed
    appends over LIMIT bytes are 413 without a code; others are acked."""

    LIMIT = 100
    protocol_version = "HTTP/1.1"
    bodies: list[int] = []
    next_offset = 0

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_PUT(self) -> None:
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).bodies.append(len(body))
        if len(body) > self.LIMIT:
            self.send_response(413)
            out = b"<html>413 Request Entity Too Large</html>"
        else:
            n, i = 0, 0
            if self.headers.get("Weir-Framing") == "u32be":
                while i < len(body):
                    i += 4 + struct.unpack(">I", body[i : i + 4])[0]
                    n += 1
            else:
                n = 1
            acks = [{"offset": type(self).next_offset + k, "outcome": "appended"} for k in range(n)]
            type(self).next_offset += n
            self.send_response(200)
            out = json.dumps({"acks": acks, "next_offset": weir.format_offset(type(self).next_offset)}).encode()
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


class WriterSplitTests(unittest.TestCase):
    def test_a_batch_refused_as_too_large_is_split(self) -> None:
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
        t = threading.Thread(target=srv.serve_forever, daemon=True)
        t.start()
        self.addCleanup(t.join, 5)
        self.addCleanup(srv.shutdown)
        self.addCleanup(srv.server_close)
        c = weir.Client(f"http://127.0.0.1:{srv.server_address[1]}", timeout=5, retry_for=1)
        self.addCleanup(c.close)
        w = c.writer("s", "w", 1, max_batch_bytes=1000, keep_acks=True)
        w.write(*[b"x" * 16] * 20)  # 400 bytes framed: 413, then 200, then 100 a request
        acks = w.flush()
        self.assertEqual([a.seq for a in acks], list(range(20)))
        self.assertEqual([a.offset for a in acks], list(range(20)))
        self.assertEqual(_Fake.bodies[:3], [400, 200, 100])
        self.assertTrue(all(b <= _Fake.LIMIT for b in _Fake.bodies[3:]))
        with self.assertRaises(weir.TooLargeError) as cm:
            w.write(b"y" * 200)  # one chunk over the limit: raised
        self.assertEqual((cm.exception.status, cm.exception.code), (413, "too_large"))


class BuildTests(unittest.TestCase):
    def test_the_backend_builds_a_wheel_from_the_standard_library(self) -> None:
        spec = importlib.util.spec_from_file_location("weir_backend", CLIENT / "_build" / "backend.py")
        assert spec is not None and spec.loader is not None
        backend = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(backend)
        self.assertEqual(backend.get_requires_for_build_wheel(), [])
        with tempfile.TemporaryDirectory() as d:
            name = backend.build_wheel(d)
            self.assertEqual(name, f"weir_client-{weir.__version__}-py3-none-any.whl")
            with zipfile.ZipFile(Path(d) / name) as z:
                names = set(z.namelist())
                self.assertTrue({"weir/__init__.py", "weir/py.typed", "weir/writer.py"} <= names)
                info = f"weir_client-{weir.__version__}.dist-info"
                self.assertIn(f"{info}/RECORD", names)
                meta = z.read(f"{info}/METADATA").decode()
                self.assertIn("Requires-Python: >=3.10", meta)
                self.assertIn("License-Expression: Apache-2.0", meta)
                self.assertIn(f"{info}/licenses/LICENSE", names)
                self.assertFalse([n for n in names if "__pycache__" in n])
            sdist = backend.build_sdist(d)
            self.assertTrue((Path(d) / sdist).exists())
            with tarfile.open(Path(d) / sdist) as tar:
                members = set(tar.getnames())
            root = f"weir_client-{weir.__version__}"
            self.assertTrue({f"{root}/PKG-INFO", f"{root}/pyproject.toml", f"{root}/LICENSE", f"{root}/weir/__init__.py"} <= members)

    def test_the_backend_reads_pyproject_as_tomllib_does(self) -> None:
        # On 3.10 the backend reads pyproject.toml by hand: it must read what
        # tomllib reads.
        spec = importlib.util.spec_from_file_location("weir_backend", CLIENT / "_build" / "backend.py")
        assert spec is not None and spec.loader is not None
        backend = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(backend)
        text = (CLIENT / "pyproject.toml").read_text(encoding="utf-8")
        try:
            import tomllib
        except ModuleNotFoundError:
            self.skipTest("no tomllib before Python 3.11")
        project = tomllib.loads(text)["project"]
        by_hand = backend._project_by_hand(text)
        self.assertEqual(by_hand, {k: v for k, v in project.items() if isinstance(v, str)})
        self.assertEqual(backend._project(), by_hand)


if __name__ == "__main__":
    unittest.main()

