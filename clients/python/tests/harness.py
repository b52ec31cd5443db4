"""Runs a real ``weir server`` for the tests, on SQLite or PostgreSQL.

Environment:
    WEIR_BIN            the weir binary (required: the tests fail without it)
                        ``cd /work/main && go build -o /tmp/weir-py ./cmd/weir``
    WEIR_TEST_STORES    the stores to test, comma-separated: ``sqlite,postgres`` (default)
    WEIR_TEST_POSTGRES  the PostgreSQL database, default
                        ``postgres://postgres@127.0.0.1:5432/test?sslmode=disable``;
                        each server gets a fresh schema, dropped afterwards
"""

from __future__ import annotations

import faulthandler
import os
import queue
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

# No test run may hang: past this, print every thread's stack and exit.
faulthandler.dump_traceback_later(float(os.environ.get("WEIR_TEST_WATCHDOG", "300")), exit=True)

import weir  # noqa: E402
from weir.types import View  # noqa: E402

TOKEN = "test-token-" + secrets.token_hex(8)
STORES = [s.strip() for s in os.environ.get("WEIR_TEST_STORES", "sqlite,postgres").split(",") if s.strip()]
PG = os.environ.get("WEIR_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")


def weir_bin() -> str:
    """The weir binary, from $WEIR_BIN; raises (the test fails) without it."""
    b = os.environ.get("WEIR_BIN", "")
    if not b or not os.access(b, os.X_OK):
        raise RuntimeError(
            f"WEIR_BIN={b!r} is not an executable weir binary: build one with "
            "`go build -o /tmp/weir-py ./cmd/weir` and set WEIR_BIN=/tmp/weir-py"
        )
    return b


def wait_for(cond: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    """Polls ``cond`` until it returns something true, for at most
    ``timeout`` seconds; fails with ``what`` after that."""
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


class Server:
    """One ``weir server`` process on a free loopback port."""

    def __init__(self, store: str, *, token: str = TOKEN, long_poll: str = "2s") -> None:
        if store not in ("sqlite", "postgres"):
            raise ValueError(f"store {store!r}: sqlite or postgres")
        self.kind = store
        self.token = token
        self.long_poll = long_poll
        self.url = ""
        self._dir = tempfile.mkdtemp(prefix="weir-py-test-")
        self._schema = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()

    def store_url(self) -> str:
        if self.kind == "sqlite":
            return f"sqlite:{self._dir}/weir.db"
        self._schema = "weirpy_" + uuid.uuid4().hex[:12]
        sep = "&" if "?" in PG else "?"
        return f"{PG}{sep}schema={self._schema}"

    def start(self) -> None:
        args = [weir_bin(), "server", "--addr", "127.0.0.1:0", "--store", self.store_url(),
                "--long-poll-timeout", self.long_poll, "--shutdown-timeout", "5s"]
        if self.token:
            args += ["--token", self.token]
        self._stderr = open(os.path.join(self._dir, "stderr.log"), "wb")
        self._proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL)
        self._pumper = threading.Thread(target=self._pump, daemon=True)
        self._pumper.start()
        deadline = time.monotonic() + 30
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                self.stop()
                raise RuntimeError(f"weir server ({self.kind}) did not say where it listens:\n{self.stderr()}")
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if m:
                self.url = m.group(1)
                return

    def _pump(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for raw in self._proc.stdout:  # drained to the end, so the pipe never fills
            self._lines.put(raw.decode("utf-8", "replace"))
        self._lines.put(None)

    def stderr(self) -> str:
        try:
            with open(os.path.join(self._dir, "stderr.log"), "rb") as f:
                return f.read()[-4000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self) -> None:
        p, self._proc = self._proc, None
        if p is not None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
            self._pumper.join(timeout=5)
            if p.stdout is not None:
                p.stdout.close()
            self._stderr.close()
        if self._schema and shutil.which("psql"):
            subprocess.run(
                ["psql", PG.split("?")[0], "-q", "-c", f"DROP SCHEMA IF EXISTS {self._schema} CASCADE"],
                capture_output=True, timeout=30, check=False,
            )
            self._schema = ""
        shutil.rmtree(self._dir, ignore_errors=True)

    def metric(self, name: str, labels: str = "") -> float:
        """The value of a /metrics sample (0 if absent)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        want = name + ("{" + labels + "}" if labels else "")
        for line in text.splitlines():
            if line.startswith(want + " "):
                return float(line.split()[-1])
        return 0.0


if TYPE_CHECKING:
    # Type checkers see a ServerCase as the TestCase that per_store makes of
    # it. At run time it stays a mixin: were it a TestCase, unittest would
    # also collect each class built on it (and ServerCase itself, imported
    # into every test module) as a test of the default store.
    _MixinBase = unittest.TestCase
else:
    _MixinBase = object


class ServerCase(_MixinBase):
    """A mixin for test classes that talk to a server of their store: one
    server per class, a client per test. Made into a TestCase per store by
    :func:`per_store`."""

    store = "sqlite"
    server: Server

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = Server(cls.store)
        cls.server.start()
        cls.addClassCleanup(cls.server.stop)

    def setUp(self) -> None:
        self.client = self.new_client()

    def new_client(self, url: str | None = None, **kw: Any) -> weir.Client:
        kw.setdefault("token", self.server.token)
        kw.setdefault("timeout", 5.0)
        kw.setdefault("retry_for", 5.0)
        kw.setdefault("live_timeout", 10.0)
        c = weir.Client(url or self.server.url, **kw)
        self.addCleanup(c.close)
        return c

    def stream(self, content_type: str = "application/octet-stream") -> str:
        """A fresh standalone stream's path."""
        name = self.id().rsplit(".", 1)[-1]
        path = f"py/{name}/{uuid.uuid4().hex[:10]}"
        self.client.create_stream(path, content_type)
        return path

    def records(self, path: str, view: View = "committed", **kw: Any) -> list[weir.Record]:
        """Everything the view has now."""
        return list(self.client.read(path, view=view, **kw))

    def data(self, path: str, view: View = "committed") -> list[bytes]:
        """The data records' bytes the view has now."""
        return [r.data for r in self.records(path, view) if r.kind == "data"]


def per_store(mixin: type, ns: dict[str, Any]) -> None:
    """Defines ``{mixin}_{store}``, a TestCase of mixin, for each store tested."""
    for store in STORES:
        name = f"{mixin.__name__}_{store}"
        ns[name] = type(name, (mixin, unittest.TestCase), {"store": store, "__module__": ns["__name__"]})


class Collector(threading.Thread):
    """Iterates a reader on a thread, records in a queue, errors kept."""

    def __init__(self, reader: weir.Reader) -> None:
        super().__init__(daemon=True)
        self.reader = reader
        self.got: list[weir.Record] = []
        self.q: queue.Queue[weir.Record] = queue.Queue()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for rec in self.reader:
                self.got.append(rec)
                self.q.put(rec)
        except BaseException as e:  # reported by finish()
            self.error = e

    def next(self, timeout: float = 10.0) -> weir.Record:
        """The next record, within timeout."""
        try:
            return self.q.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the reader got no record in {timeout} s (it has {len(self.got)})") from None

    def finish(self, timeout: float = 15.0) -> list[weir.Record]:
        """Waits for the read to end; returns every record."""
        self.join(timeout)
        if self.is_alive():
            self.reader.close()
            raise AssertionError(f"the reader did not end within {timeout} s (it has {len(self.got)})")
        if self.error is not None:
            raise self.error
        return self.got


if sys.version_info < (3, 10):
    raise RuntimeError("weir's Python client needs Python 3.10 or newer")
