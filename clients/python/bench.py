#!/usr/bin/env python3
"""How much weir's Python client costs over bare ``http.client``, against a
real ``weir server``, from one Python process.

Workloads (each on a fresh stream, 100-byte chunks by default):

``writer, single``
    sequential exactly-once appends of one chunk each (``Weir-Writer``,
    ``Weir-Attempt: 1``, ``Weir-Seq: i``), one request at a time, then a commit.
    Client: ``Writer(linger=0)`` and ``write(chunk)`` per chunk. Baseline: the
    same requests by hand on one kept-alive ``http.client`` connection.
``writer, batched``
    the same chunks, ``--batch`` to a request, ``u32be`` framed. Client:
    ``Writer(linger=1, max_batch_chunks=batch)`` and ``write(chunk)`` per
    chunk (the client batches). Baseline: framed requests by hand.
``writer, batched, write(*chunks)``
    the same, the client handed each batch in one call (``write(*chunks)``,
    ``linger=0``): the client's cost without one Python call per chunk.
``append, single``
    plain Durable Streams appends (no weir header), one chunk each. Client:
    ``Client.append``. Baselines: by hand with ``http.client``, and weir's Go
    client (``weir bench http --url``, run by this script in the same sitting).

Every workload runs ``--rounds`` times, the order of client and baseline
reversed every other round; figures are the median round, latencies over
all rounds. ``client CPU`` is this process's CPU time per request
(``time.process_time``): what the client itself costs, whatever the server's
(and the least disturbed by other load on the machine). Ratios are the weir
client's over bare http.client's: chunks/s (above 1: faster), CPU (above 1:
the client's own cost).

Run (a fresh server on a temporary SQLite file, or PostgreSQL with --store)::

    cd /work/main && go build -o /tmp/weir ./cmd/weir
    python3 clients/python/bench.py --weir /tmp/weir
    python3 clients/python/bench.py --weir /tmp/weir --store 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
    python3 clients/python/bench.py --url http://127.0.0.1:4437   # a server already running, no Go figure
    python3 clients/python/bench.py --stub                          # the writer's own CPU, no server
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # this tree's weir, not an installed one

import weir  # noqa: E402

_u32 = struct.Struct(">I")


@dataclass
class Round:
    """One measured run of one side of a workload."""

    requests: int
    chunks: int
    seconds: float
    cpu: float
    latencies: list[float] = field(default_factory=list)  # seconds, per request

    @property
    def req_per_sec(self) -> float:
        return self.requests / self.seconds

    @property
    def chunks_per_sec(self) -> float:
        return self.chunks / self.seconds

    @property
    def cpu_us_per_req(self) -> float:
        return self.cpu / self.requests * 1e6


def chunk(i: int, size: int) -> bytes:
    """A chunk of ``size`` bytes that differs from its neighbours."""
    head = b"%08d " % i
    return (head + b"h" * size)[:size]


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))] * 1000 if s else 0.0


class Raw:
    """Bare http.client: one kept-alive connection, requests by hand."""

    def __init__(self, url: str, token: str) -> None:
        u = urllib.parse.urlsplit(url)
        self.conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=30)
        self.auth = {"Authorization": f"Bearer {token}"} if token else {}

    def do(self, method: str, path: str, body: bytes | None, headers: dict[str, str], want: int) -> bytes:
        self.conn.request(method, path, body=body, headers={**self.auth, **headers})
        r = self.conn.getresponse()
        data = r.read()
        if r.status != want:
            raise RuntimeError(f"{method} {path}: {r.status} {data[:200]!r}")
        return data

    def close(self) -> None:
        self.conn.close()


def new_stream(url: str, token: str) -> str:
    path = f"bench/py-{uuid.uuid4().hex[:12]}"
    c = weir.Client(url, token=token)
    c.create_stream(path)
    c.close()
    return path


def measure(fn: Callable[[list[float]], tuple[int, int]]) -> Round:
    lat: list[float] = []
    cpu0, t0 = time.process_time(), time.perf_counter()
    reqs, chunks = fn(lat)
    return Round(reqs, chunks, time.perf_counter() - t0, time.process_time() - cpu0, lat)


# The workloads: each side returns (requests, chunks) and appends latencies.


def raw_writer_single(url: str, token: str, n: int, size: int) -> Round:
    path = "/v1/stream/" + new_stream(url, token)
    raw = Raw(url, token)
    data = [chunk(i, size) for i in range(n)]

    def run(lat: list[float]) -> tuple[int, int]:
        base = {"Content-Type": "application/octet-stream", "Weir-Writer": "bench", "Weir-Attempt": "1"}
        for i in range(n):
            t = time.perf_counter()
            body = raw.do("POST", path, data[i], {**base, "Weir-Seq": str(i)}, 200)
            lat.append(time.perf_counter() - t)
            if not body.startswith(b'{"acks"'):
                raise RuntimeError(f"unexpected reply {body[:100]!r}")
        raw.do("POST", path, None, {"Weir-Writer": "bench", "Weir-Attempt": "1", "Weir-Commit": "true"}, 204)
        return n + 1, n

    try:
        return measure(run)
    finally:
        raw.close()


def client_writer_single(url: str, token: str, n: int, size: int) -> Round:
    path = new_stream(url, token)
    client = weir.Client(url, token=token)
    data = [chunk(i, size) for i in range(n)]

    def run(lat: list[float]) -> tuple[int, int]:
        w = client.writer(path, "bench", 1, create=False)
        for i in range(n):
            t = time.perf_counter()
            w.write(data[i])
            lat.append(time.perf_counter() - t)
        w.commit()
        assert w.outcomes["appended"] == n
        return w.requests + 1, n

    try:
        return measure(run)
    finally:
        client.close()


def raw_writer_batched(url: str, token: str, n: int, size: int, batch: int) -> Round:
    path = "/v1/stream/" + new_stream(url, token)
    raw = Raw(url, token)
    data = [chunk(i, size) for i in range(n)]

    def run(lat: list[float]) -> tuple[int, int]:
        base = {
            "Content-Type": "application/octet-stream",
            "Weir-Writer": "bench",
            "Weir-Attempt": "1",
            "Weir-Framing": "u32be",
        }
        reqs = 0
        for s in range(0, n, batch):
            t = time.perf_counter()
            body = b"".join(_u32.pack(len(c)) + c for c in data[s : s + batch])
            raw.do("POST", path, body, {**base, "Weir-Seq": str(s)}, 200)
            lat.append(time.perf_counter() - t)
            reqs += 1
        raw.do("POST", path, None, {"Weir-Writer": "bench", "Weir-Attempt": "1", "Weir-Commit": "true"}, 204)
        return reqs + 1, n

    try:
        return measure(run)
    finally:
        raw.close()


def client_writer_batched(url: str, token: str, n: int, size: int, batch: int) -> Round:
    path = new_stream(url, token)
    client = weir.Client(url, token=token)
    data = [chunk(i, size) for i in range(n)]

    def run(lat: list[float]) -> tuple[int, int]:
        # A linger long enough that batches fill by count: each full batch is
        # sent by the write() that filled it (its latency is that write's).
        w = client.writer(path, "bench", 1, linger=1.0, max_batch_chunks=batch, create=False)
        for i in range(n):
            t = time.perf_counter()
            w.write(data[i])
            d = time.perf_counter() - t
            if (i + 1) % batch == 0:
                lat.append(d)
        w.commit()
        assert w.outcomes["appended"] == n, w.outcomes
        return w.requests + 1, n

    try:
        return measure(run)
    finally:
        client.close()


def client_writer_batched_calls(url: str, token: str, n: int, size: int, batch: int) -> Round:
    """The client handed each batch in one call: ``write(*chunks)``."""
    path = new_stream(url, token)
    client = weir.Client(url, token=token)
    data = [chunk(i, size) for i in range(n)]

    def run(lat: list[float]) -> tuple[int, int]:
        w = client.writer(path, "bench", 1, max_batch_chunks=batch, create=False)
        for s in range(0, n, batch):
            t = time.perf_counter()
            w.write(*data[s : s + batch])
            lat.append(time.perf_counter() - t)
        w.commit()
        assert w.outcomes["appended"] == n, w.outcomes
        return w.requests + 1, n

    try:
        return measure(run)
    finally:
        client.close()


def raw_append_single(url: str, token: str, n: int, size: int) -> Round:
    path = "/v1/stream/" + new_stream(url, token)
    raw = Raw(url, token)
    data = [chunk(i, size) for i in range(n)]

    def run(lat: list[float]) -> tuple[int, int]:
        h = {"Content-Type": "application/octet-stream"}
        for i in range(n):
            t = time.perf_counter()
            raw.do("POST", path, data[i], h, 204)
            lat.append(time.perf_counter() - t)
        return n, n

    try:
        return measure(run)
    finally:
        raw.close()


def client_append_single(url: str, token: str, n: int, size: int) -> Round:
    path = new_stream(url, token)
    client = weir.Client(url, token=token)
    data = [chunk(i, size) for i in range(n)]

    def run(lat: list[float]) -> tuple[int, int]:
        for i in range(n):
            t = time.perf_counter()
            client.append(path, data[i])
            lat.append(time.perf_counter() - t)
        return n, n

    try:
        return measure(run)
    finally:
        client.close()


def go_append_single(weir_bin: str, url: str, n: int, size: int) -> Round:
    """weir's Go client (``weir bench http``): the same plain appends."""
    out = subprocess.run(
        [weir_bin, "bench", "http", "--url", url + "/v1/stream/bench", "--requests", str(n),
         "--chunk-size", str(size), "--json", "--quiet"],
        capture_output=True, timeout=300, check=True,
    ).stdout
    r = json.loads(out.splitlines()[0])
    p50, p99 = r.get("p50_ms", 0.0) / 1000, r.get("p99_ms", 0.0) / 1000
    # Only p50 and p99 come back: two latencies stand for the run.
    return Round(int(r["ops"]), int(r["ops"]), float(r["seconds"]), float("nan"), [p50] * 98 + [p99] * 2)


def stub(size: int, batch: int, batches: int = 2000) -> None:
    """The writer's own CPU cost, no network: a stub transport that answers
    every append with canned acks (what ``--stub`` prints)."""
    from weir._http import Response, Transport
    from weir.writer import Writer

    def acks(n: int) -> bytes:
        return json.dumps({"acks": [{"offset": i, "outcome": "appended"} for i in range(n)], "next_offset": "x"}).encode()

    class Stub:
        retry_for, timeout = 1.0, 1.0

        def __init__(self, body: bytes) -> None:
            self.body = body

        def request(self, *args: object, **kw: object) -> Response:
            return Response(200, {}, self.body)

    def transport(body: bytes) -> Transport:
        # A stand-in: Writer uses only request(), retry_for and timeout.
        return cast(Transport, Stub(body))

    data = [chunk(i, size) for i in range(batch)]
    print(f"weir {weir.__file__}, Python {sys.version.split()[0]}, no network: client CPU only")
    for mode in ("write(*chunks)", "one write() a chunk"):
        w = Writer(transport(acks(batch)), "p", "w", 1, create=False, max_batch_chunks=batch,
                   linger=1.0 if mode != "write(*chunks)" else 0.0)
        t = time.process_time()
        for _ in range(batches):
            if mode == "write(*chunks)":
                w.write(*data)
            else:
                for d in data:
                    w.write(d)
        w.flush()
        print(f"  {batch}-chunk batch, {mode}: {(time.process_time() - t) / batches * 1e6:.1f} µs")
        w.close()
    w = Writer(transport(acks(1)), "p", "w", 1, create=False)
    n = batches * 20
    t = time.process_time()
    for i in range(n):
        w.write(data[i % batch])
    print(f"  one-chunk write() and its request: {(time.process_time() - t) / n * 1e6:.2f} µs")


# The server.


class Server:
    """A ``weir server`` on a free loopback port, no token (loopback)."""

    def __init__(self, weir_bin: str, store: str | None) -> None:
        self.dir = tempfile.mkdtemp(prefix="weir-py-bench-")
        self.schema = ""
        if store is None:
            store = f"sqlite:{self.dir}/bench.db"
        elif store.startswith("postgres"):
            self.schema = "weirpybench_" + uuid.uuid4().hex[:10]
            store += ("&" if "?" in store else "?") + "schema=" + self.schema
        self.store = store
        self.pg = store.split("?")[0] if self.schema else ""
        self.proc = subprocess.Popen(
            [weir_bin, "server", "--addr", "127.0.0.1:0", "--store", store, "--no-demo"],
            stdout=subprocess.PIPE, stderr=open(os.path.join(self.dir, "stderr.log"), "wb"), stdin=subprocess.DEVNULL,
        )
        self.url = ""
        found: list[str] = []

        def pump() -> None:
            assert self.proc.stdout is not None
            for raw in self.proc.stdout:
                m = re.search(rb"listening on (http://127\.0\.0\.1:\d+)", raw)
                if m and not found:
                    found.append(m.group(1).decode())

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        deadline = time.monotonic() + 30
        while not found:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"weir server did not start: see {self.dir}/stderr.log")
            time.sleep(0.01)
        self.url = found[0]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        if self.schema and shutil.which("psql"):
            subprocess.run(["psql", self.pg, "-q", "-c", f"DROP SCHEMA IF EXISTS {self.schema} CASCADE"],
                           capture_output=True, timeout=30, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


# The report.


def summary(rounds: list[Round]) -> dict[str, float]:
    med = sorted(rounds, key=lambda r: r.chunks_per_sec)[len(rounds) // 2]
    lat = [x for r in rounds for x in r.latencies]
    return {
        "req_per_sec": med.req_per_sec,
        "chunks_per_sec": med.chunks_per_sec,
        "p50_ms": pct(lat, 0.50),
        "p99_ms": pct(lat, 0.99),
        "cpu_us_per_req": med.cpu_us_per_req,
        "min_chunks_per_sec": min(r.chunks_per_sec for r in rounds),
        "max_chunks_per_sec": max(r.chunks_per_sec for r in rounds),
    }


def main() -> int:
    # __doc__ is None under python -OO.
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weir", default=os.environ.get("WEIR_BIN", ""), help="the weir binary (default $WEIR_BIN): starts a server and runs the Go figure")
    ap.add_argument("--store", help="the server's store (default: a fresh SQLite file); a postgres:// URL gets a fresh schema")
    ap.add_argument("--url", help="a running server instead (no Go figure unless --weir is given too)")
    ap.add_argument("--token", default=os.environ.get("WEIR_TOKEN", ""), help="the server's token, with --url")
    ap.add_argument("--n", type=int, default=2000, help="chunks per workload side and round (default 2000)")
    ap.add_argument("--batch", type=int, default=100, help="chunks per batched request (default 100)")
    ap.add_argument("--size", type=int, default=100, help="bytes per chunk (default 100)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--stub", action="store_true", help="only the writer's own CPU per batch, against a stub transport (no server)")
    ap.add_argument("--json-out", help="also write the JSON (every figure, each side's range over the rounds) to this file")
    a = ap.parse_args()

    if a.stub:
        stub(a.size, a.batch)
        return 0
    server = None
    if a.url:
        url, token = a.url.rstrip("/"), a.token
    else:
        if not a.weir:
            ap.error("give --weir (or $WEIR_BIN) to start a server, or --url")
        server = Server(a.weir, a.store)
        url, token = server.url, ""
    try:
        n, size, b = a.n, a.size, a.batch
        pairs: list[tuple[str, Callable[[], Round], Callable[[], Round]]] = [
            ("writer, single", lambda: client_writer_single(url, token, n, size), lambda: raw_writer_single(url, token, n, size)),
            ("writer, batched", lambda: client_writer_batched(url, token, n * 10, size, b),
             lambda: raw_writer_batched(url, token, n * 10, size, b)),
            ("writer, batched, write(*chunks)", lambda: client_writer_batched_calls(url, token, n * 10, size, b),
             lambda: raw_writer_batched(url, token, n * 10, size, b)),
            ("append, single", lambda: client_append_single(url, token, n, size), lambda: raw_append_single(url, token, n, size)),
        ]
        results: dict[str, dict[str, list[Round]]] = {name: {"client": [], "raw": []} for name, _, _ in pairs}
        go: list[Round] = []
        for rnd in range(a.rounds):
            for name, client_side, raw_side in pairs:
                order = [("client", client_side), ("raw", raw_side)]
                if rnd % 2:
                    order.reverse()
                for side, fn in order:
                    print(f"round {rnd + 1}/{a.rounds}: {name}, {side}", file=sys.stderr)
                    results[name][side].append(fn())
            if a.weir:
                print(f"round {rnd + 1}/{a.rounds}: append, single, Go", file=sys.stderr)
                go.append(go_append_single(a.weir, url, n, size))

        workloads: dict[str, object] = {}
        out: dict[str, object] = {
            "python": sys.version.split()[0],
            "store": "running server " + url if a.url else (server.store if server else ""),
            "chunk_bytes": size,
            "batch": b,
            "rounds": a.rounds,
            "workloads": workloads,
        }
        rows = []
        for name, _, _ in pairs:
            c, r = summary(results[name]["client"]), summary(results[name]["raw"])
            w = {
                "client": c,
                "raw_http_client": r,
                "ratio_client_to_raw": c["chunks_per_sec"] / r["chunks_per_sec"],
                "cpu_ratio_client_to_raw": c["cpu_us_per_req"] / r["cpu_us_per_req"],
            }
            if name == "append, single" and go:
                g = summary(go)
                g["cpu_us_per_req"] = float("nan")
                w["go_client"] = g
                w["ratio_client_to_go"] = c["chunks_per_sec"] / g["chunks_per_sec"]
                w["ratio_raw_to_go"] = r["chunks_per_sec"] / g["chunks_per_sec"]
            workloads[name] = w
            rows.append((name, w))
        text = json.dumps(out, indent=2, default=lambda x: None).replace("NaN", "null")
        if a.json_out:
            with open(a.json_out, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        if a.json:
            print(text)
            return 0
        print(f"Python {out['python']}, store {out['store']}, {size}-byte chunks, batches of {b}, "
              f"{a.rounds} rounds (median round; latencies over all rounds)\n")
        print("| workload | side | req/s | chunks/s | p50 ms | p99 ms | client CPU µs/req | chunks/s ratio | CPU ratio |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name, w in rows:
            sides = [("weir client", w["client"]), ("bare http.client", w["raw_http_client"])]
            if "go_client" in w:
                sides.append(("Go client (`weir bench http`)", w["go_client"]))
            for label, s in sides:
                ratio = ""
                if label == "weir client":
                    ratio = f"{w['ratio_client_to_raw']:.2f}× of http.client"
                    if "ratio_client_to_go" in w:
                        ratio += f", {w['ratio_client_to_go']:.2f}× of Go"
                elif label == "bare http.client" and "ratio_raw_to_go" in w:
                    ratio = f"{w['ratio_raw_to_go']:.2f}× of Go"
                cpu = s["cpu_us_per_req"]
                cpu_s = "" if cpu != cpu else f"{cpu:.0f}"  # NaN: not measured
                cpu_r = f"{w['cpu_ratio_client_to_raw']:.2f}×" if label == "weir client" else ""
                print(f"| {name} | {label} | {s['req_per_sec']:,.0f} | {s['chunks_per_sec']:,.0f} | "
                      f"{s['p50_ms']:.2f} | {s['p99_ms']:.2f} | {cpu_s} | {ratio} | {cpu_r} |")
        return 0
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
