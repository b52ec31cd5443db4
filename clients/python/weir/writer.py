"""Exactly-once writers: weir's ``Weir-Writer`` extension (docs/protocol.md).

A :class:`Writer` writes one attempt of one writer to a stream. The writer id is
stable across attempts (a step id, a job id); the attempt grows on every retry
of the same work. Chunks are numbered from 0 within the attempt, in call order,
and requests are sent one after the other, so a request sent again after a
failure carries the same seqs: the server acknowledges what it already has
(``retransmit``) and never appends it twice. A later attempt that writes the
same bytes *adopts* the earlier attempt's chunks; one that writes other bytes
aborts the earlier chunks from the first difference. :meth:`Writer.commit` makes
the attempt's chunks part of the committed view, which readers get by default.
"""

from __future__ import annotations

import json
import operator
import struct
import threading
import time
from collections import Counter
from types import TracebackType
from typing import Any

from ._http import Response, Transport, stream_url_path
from .errors import (
    ConflictError,
    GapError,
    NotFoundError,
    ProtocolError,
    TooLargeError,
    UnknownWriterError,
    WeirError,
    WriterFinishedError,
)
from .types import Ack, compact_json

__all__ = ["Writer", "MAX_CHUNK_BYTES", "MAX_REQUEST_CHUNKS"]

#: The largest chunk the server takes: 4 MiB.
MAX_CHUNK_BYTES = 4 << 20
#: The most chunks one append may carry.
MAX_REQUEST_CHUNKS = 10_000
# The server's body limit (Config.MaxBodyBytes), framing included.
_MAX_BODY_BYTES = 16 << 20
# The largest seq the server parses (a JSON-safe integer).
_MAX_SEQ = (1 << 53) - 1

_u32 = struct.Struct(">I")
_new = tuple.__new__  # makes an Ack at half the cost of Ack(...)
_outcome = operator.itemgetter("outcome")
_OUTCOMES = frozenset(("appended", "adopted", "retransmit"))


def _is_json_type(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


class Writer:
    """One attempt of a writer on a standalone stream, exactly once.

    Use it as a context manager: it commits when the block succeeds, and on an
    exception leaves the attempt open (uncommitted) for the next attempt to
    adopt or abort; what it had buffered and not sent is dropped, since the
    next attempt writes it again::

        with client.writer("chat/42", writer="answer-42", attempt=attempt,
                           content_type="text/plain", linger=0.02) as w:
            for token in tokens():
                w.write(token)

    Batching: with ``linger == 0`` every :meth:`write` call is one request,
    sent before it returns. With ``linger > 0`` chunks are buffered and a
    background thread sends them once the oldest has waited ``linger``
    seconds, or at once when a batch is full (``max_batch_chunks``,
    ``max_batch_bytes``); an error it meets is raised by the next call,
    which then takes none of its own chunks (call it again to write them).
    :meth:`flush` sends everything now. A batch refused as too large
    (``413``: a proxy in front of the server with a body limit below
    ``max_batch_bytes``, say) is split and sent again, same seqs, since
    nothing of a refused request is stored; a single chunk refused so raises.

    Retries: a request that fails on the network or with a retryable reply is
    sent again with the same seqs until the client's ``retry_for`` runs out;
    if it still fails, the call raises (:class:`~weir.WeirConnectionError`,
    :class:`~weir.UnavailableError` …) and its chunks stay buffered, to be sent
    again, same seqs, by the next call. So a writer never leaves a gap of its
    own. A refusal (fenced, writer finished, chunk conflict, closed stream,
    too large, gap) finishes the writer: the error is raised again by every
    later call but :meth:`abort` and :meth:`close`.

    Args:
        transport: the client's HTTP layer (use :meth:`weir.Client.writer`).
        path: the stream's path under ``/v1/stream/`` (a standalone stream).
        writer: the writer id, 1 to 1024 bytes, the same on every attempt.
        attempt: the attempt, from 1; higher on every retry. 0 means
            committed at append (no commit; :meth:`commit` only flushes).
        content_type: the stream's content type. For ``application/json``
            each chunk is one JSON value.
        linger: seconds a chunk may wait for more to batch with (0: none).
        max_batch_chunks, max_batch_bytes: the most chunks and bytes (framing
            included) one request carries.
        start_seq: the seq of the first chunk this object writes: 0 for an
            attempt written from the start; ``n`` to go on after the ``n`` chunks
            an earlier object of the same attempt had acknowledged. ``None``:
            go on after whatever the attempt has on the stream, asked of the
            server (the first request learns it from the ``gap`` reply; safe
            because no chunk of this object had a seq yet).
        create: create the stream (``PUT``) before the first append if it is
            missing.
        keep_acks: keep each chunk's :class:`~weir.Ack` (seq, offset,
            outcome) for :meth:`flush` to return. Off by default: a writer of
            a million chunks would hold a million acks until it flushes, and
            making them costs a third of a batch's CPU. Without them,
            :meth:`flush` returns ``[]``, and :attr:`outcomes` and
            :attr:`last_ack` still count.
    """

    def __init__(
        self,
        transport: Transport,
        path: str,
        writer: str,
        attempt: int,
        *,
        content_type: str = "application/octet-stream",
        linger: float = 0.0,
        max_batch_chunks: int = 1000,
        max_batch_bytes: int = 8 << 20,
        start_seq: int | None = 0,
        create: bool = True,
        keep_acks: bool = False,
    ) -> None:
        if not writer or len(writer.encode("utf-8")) > 1024:
            raise ValueError("writer: an id of 1 to 1024 bytes, the same on every attempt")
        if not isinstance(attempt, int) or attempt < 0:
            raise ValueError("attempt: an integer >= 1 (0: committed at append)")
        if linger < 0:
            raise ValueError("linger: seconds >= 0")
        if not 1 <= max_batch_chunks <= MAX_REQUEST_CHUNKS:
            raise ValueError(f"max_batch_chunks: 1 to {MAX_REQUEST_CHUNKS}")
        if not 5 <= max_batch_bytes <= _MAX_BODY_BYTES:
            raise ValueError(f"max_batch_bytes: 5 to {_MAX_BODY_BYTES}")
        if start_seq is not None and not 0 <= start_seq <= _MAX_SEQ:
            raise ValueError("start_seq: an integer >= 0, or None")
        self._t = transport
        self.path = path
        self.writer = writer
        self.attempt = attempt
        self.content_type = content_type
        self._url = stream_url_path(path)
        self._json = _is_json_type(content_type)
        self._linger = linger
        self._max_chunks = max_batch_chunks
        self._max_bytes = max_batch_bytes
        self._create = create
        self._created = False

        self._cond = threading.Condition()
        self._send_lock = threading.Lock()
        # Every chunk not yet acknowledged, in seq order from _seq. A batch in
        # flight stays at the front until its reply comes: a failed request
        # leaves it there, so the next request starts at the same seq again.
        self._buf: list[bytes] = []
        self._buf_bytes = 0  # _buf's bytes, framing included (4 a chunk)
        self._drops = 0  # times _buf was dropped: a batch in flight then is gone from it
        self._seq: int | None = start_seq
        self._since: float | None = None  # when the oldest unsent chunk was buffered
        self._error: WeirError | None = None  # a background failure, raised once
        self._broken: WeirError | None = None  # a refusal, raised for good
        self._finished = ""  # "committed" or "aborted"
        self._closed = False
        self._flusher: threading.Thread | None = None
        self._flusher_idle = False  # it waits for chunks, untimed: notify it
        self._closed_flusher = False
        self._acks: list[Ack] = []  # since the last flush, if keep_acks
        self._keep_acks = keep_acks
        #: The last chunk acknowledged (None before the first).
        self.last_ack: Ack | None = None
        self._sent_any = False
        #: Chunks acknowledged, by outcome (appended, adopted, retransmit).
        self.outcomes: Counter[str] = Counter()
        #: Append requests that got a reply (a retried request counts once).
        self.requests = 0
        #: The stream's next offset after the last append.
        self.next_offset: str | None = None

    # Writing.

    @property
    def next_seq(self) -> int | None:
        """The seq the next chunk gets (None before the server said where a
        ``start_seq=None`` writer goes on)."""
        with self._cond:
            return None if self._seq is None else self._seq + len(self._buf)

    @property
    def buffered(self) -> int:
        """Chunks written and not yet acknowledged."""
        with self._cond:
            return len(self._buf)

    def write(self, *chunks: bytes | bytearray | memoryview | str) -> None:
        """Writes chunks, each one record, after every earlier write.

        ``str`` is encoded as UTF-8; empty chunks are skipped (the server has
        none, and an attempt that skips them does so on every attempt). On a
        JSON stream each chunk is the text of one JSON value (see
        :meth:`write_json`).

        Raises:
            TooLargeError: a chunk over 4 MiB (nothing of this call is written).
            ValueError: a chunk that is not JSON, on a JSON stream.
            WeirError: with ``linger == 0``, the append's error; else an error
                of an earlier background send.
        """
        if len(chunks) == 1 and not self._json and type(chunks[0]) is bytes and 0 < len(chunks[0]) <= MAX_CHUNK_BYTES:
            self._write1(chunks[0])  # the common case, a token at a time: a third cheaper
            return
        out: list[bytes] = []
        for c in chunks:
            b = c if type(c) is bytes else c.encode("utf-8") if isinstance(c, str) else bytes(c)
            n = len(b)
            if n == 0:
                continue
            if n > MAX_CHUNK_BYTES:
                raise TooLargeError(
                    f"a chunk of {n} bytes: the limit is {MAX_CHUNK_BYTES} (not sent)",
                    method="POST",
                    path=self._url,
                )
            if self._json:
                try:
                    json.loads(b)
                except ValueError as e:
                    raise ValueError(f"a JSON stream's chunk must be one JSON value: {e}") from None
            out.append(b)
        self._write(out)

    def write_json(self, *values: Any) -> None:
        """Writes each value as one JSON chunk (on a JSON stream)."""
        if not self._json:
            raise ValueError(f"write_json: stream {self.path!r} is {self.content_type}, not application/json")
        self.write(*(compact_json(v) for v in values))

    def _write(self, chunks: list[bytes]) -> None:
        with self._cond:
            self._check()
            if not chunks:
                return
            if self._since is None:
                self._since = time.monotonic()
            self._buf.extend(chunks)
            self._buf_bytes += sum(map(len, chunks)) + 4 * len(chunks)
            full = len(self._buf) >= self._max_chunks or self._buf_bytes >= self._max_bytes
            if self._linger > 0 and not full:
                if self._flusher is None:
                    self._start_flusher()
                elif self._flusher_idle:
                    self._cond.notify_all()
                return
        self._send_all()

    def _write1(self, b: bytes) -> None:
        """_write of one chunk, already checked."""
        with self._cond:
            if self._broken is not None or self._finished or self._closed or self._error is not None:
                self._check()
            if self._since is None:
                self._since = time.monotonic()
            buf = self._buf
            buf.append(b)
            self._buf_bytes += len(b) + 4
            if self._linger > 0 and len(buf) < self._max_chunks and self._buf_bytes < self._max_bytes:
                if self._flusher is None:
                    self._start_flusher()
                elif self._flusher_idle:
                    self._cond.notify_all()
                return
        self._send_all()

    def _drop_buffer(self) -> None:
        """Forgets every chunk not acknowledged. Called with _cond held."""
        self._buf.clear()
        self._buf_bytes = 0
        self._since = None
        self._drops += 1

    def _check(self) -> None:
        """Raises what stops this call: a refusal, a finished or closed writer,
        or (once) a background send's failure. Called with _cond held."""
        if self._broken is not None:
            raise self._broken
        if self._finished:
            raise WriterFinishedError(
                f"writer {self.writer!r} attempt {self.attempt}: this object {self._finished} (nothing sent)",
                path=self._url,
            )
        if self._closed:
            raise ValueError("the writer is closed")
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def flush(self) -> list[Ack]:
        """Sends every buffered chunk and waits for its acks.

        Returns:
            With ``keep_acks=True``, the acks received since the previous
            :meth:`flush` (or since the writer began), in seq order; else ``[]``.
        """
        with self._cond:
            self._check()
        self._send_all()
        with self._cond:
            acks, self._acks = self._acks, []
        return acks

    def commit(self) -> str:
        """Flushes, then commits the attempt: its chunks join the committed
        view; chunks of earlier attempts past what this one wrote are aborted.

        Returns:
            ``done``; ``already`` if the attempt was committed before;
            ``empty`` if this writer never wrote on the stream (nothing to commit).
        """
        self.flush()
        if self.attempt == 0:
            self._finish("committed")
            return "done"
        res = self._finish_request("Weir-Commit")
        self._finish("committed")
        return res

    def abort(self) -> str:
        """Aborts the writer for good: none of its chunks, of any attempt,
        will join the committed view, and it takes no more writes on the
        stream. Buffered chunks are dropped, not sent.

        Returns:
            ``done``, ``already`` or ``empty``, as :meth:`commit`.
        """
        if self.attempt == 0:
            raise ValueError("abort: attempt 0 commits at append; there is nothing to abort")
        self._stop(drop=True)
        with self._send_lock:
            res = self._finish_request("Weir-Abort")
        self._finish("aborted")
        return res

    def close(self) -> None:
        """Stops the writer without committing: the attempt stays open for the
        next one; chunks not yet sent are dropped."""
        self._stop(drop=True)
        with self._cond:
            self._closed = True

    def __enter__(self) -> Writer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is None:
                self.commit()
        finally:
            self.close()

    # Sending.

    def _finish(self, how: str) -> None:
        self._stop(drop=True)
        with self._cond:
            self._finished = how

    def _stop(self, *, drop: bool) -> None:
        with self._cond:
            self._closed_flusher = True
            if drop:
                self._drop_buffer()
            self._cond.notify_all()
            t, self._flusher = self._flusher, None
        if t is not None and t is not threading.current_thread():
            t.join(timeout=self._t.retry_for + 2 * self._t.timeout + 1)

    def _start_flusher(self) -> None:
        if self._flusher is None:
            self._closed_flusher = False
            self._flusher = threading.Thread(target=self._flush_loop, name=f"weir-writer {self.writer}", daemon=True)
            self._flusher.start()

    def _flush_loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed_flusher:
                        return
                    waiting = self._buf and self._error is None and self._broken is None
                    if not waiting:
                        self._flusher_idle = True
                        self._cond.wait()
                        self._flusher_idle = False
                        continue
                    due = (self._since or 0.0) + self._linger
                    now = time.monotonic()
                    if now >= due:
                        break
                    self._cond.wait(due - now)
            try:
                self._send_all()
            except WeirError as e:
                with self._cond:
                    if self._broken is None:
                        self._error = e

    def _send_all(self) -> None:
        with self._send_lock:
            while True:
                with self._cond:
                    if self._broken is not None:
                        raise self._broken
                    if not self._buf:
                        return
                    batch = self._take()
                    seq = self._seq
                    drops = self._drops
                try:
                    acks, first = self._send(seq, batch)
                except TooLargeError as e:
                    if len(batch) > 1 and e.status == 413 and type(e) is TooLargeError:
                        # Over a limit on the way (a proxy's body limit):
                        # nothing of the request was stored, so the same
                        # seqs go again in smaller batches.
                        with self._cond:
                            self._max_chunks = max(1, len(batch) // 2)
                            self._max_bytes = max(5, sum(len(c) + 4 for c in batch) // 2)
                        continue
                    with self._cond:
                        self._broken = e
                        self._drop_buffer()
                    raise
                except WeirError as e:
                    if not e.retryable:
                        with self._cond:
                            self._broken = e
                            self._drop_buffer()
                    raise
                with self._cond:
                    self._seq = first + len(batch)
                    if drops == self._drops:  # else close() dropped the buffer, batch and all
                        del self._buf[: len(batch)]
                        self._buf_bytes -= sum(map(len, batch)) + 4 * len(batch)
                    if self._keep_acks:
                        self._acks.extend([_new(Ack, (first + i, a["offset"], a["outcome"])) for i, a in enumerate(acks)])
                    last = acks[-1]
                    self.last_ack = _new(Ack, (first + len(acks) - 1, last["offset"], last["outcome"]))
                    self.outcomes.update(map(_outcome, acks))

    def _take(self) -> list[bytes]:
        """The next batch: the front of the buffer, within the limits."""
        if len(self._buf) <= self._max_chunks and self._buf_bytes <= self._max_bytes:
            self._since = None
            return self._buf[:]
        n, size = 0, 0
        for c in self._buf:
            if n > 0 and (n == self._max_chunks or size + len(c) + 4 > self._max_bytes):
                break
            n += 1
            size += len(c) + 4
        if n == len(self._buf):
            self._since = None
        return self._buf[:n]

    def _ensure_stream(self) -> None:
        if self._created or not self._create:
            return
        try:
            self._t.request(
                "PUT", self._url, headers={"Content-Type": self.content_type}, idempotent=True
            )
        except ConflictError:
            pass  # it exists with another configuration: the appends will tell
        self._created = True

    def _send(self, seq: int | None, batch: list[bytes]) -> tuple[list[dict[str, Any]], int]:
        """Sends one batch at seq (None: ask the server where the attempt goes
        on); returns its acks and the seq it went at."""
        self._ensure_stream()
        if seq is None:
            seq = self._probe(batch[0])
        try:
            resp = self._append(seq, batch)
        except GapError as e:
            raise GapError(
                f"{e.message}: the server lacks seqs {e.expected}..{seq - 1} of writer {self.writer!r} "
                f"attempt {self.attempt}, which this writer does not hold (start_seq={seq} is past them); "
                f"write them again with a writer at start_seq={e.expected}",
                status=e.status,
                method=e.method,
                path=e.path,
                headers=e.headers,
            ) from None
        return self._acks_of(resp, len(batch)), seq

    def _probe(self, chunk: bytes) -> int:
        """Learns the attempt's next seq: an append at the last seq the server
        parses is refused whole, with ``gap`` and the seq it expects."""
        try:
            self._append(_MAX_SEQ, [chunk])
        except GapError as e:
            if e.expected is None:
                raise ProtocolError("a gap reply without Weir-Expected-Seq", method=e.method, path=e.path) from e
            with self._cond:
                self._seq = e.expected
            return e.expected
        raise ProtocolError(f"the server took a chunk at seq {_MAX_SEQ}: the attempt has no seqs left", path=self._url)

    def _append(self, seq: int, batch: list[bytes]) -> Response:
        headers = {
            "Content-Type": self.content_type,
            "Weir-Writer": self.writer,
            "Weir-Attempt": str(self.attempt),
            "Weir-Seq": str(seq),
        }
        if self._json:
            body = b"[" + b",".join(batch) + b"]"
        elif len(batch) == 1:
            body = batch[0]  # without framing a body is one chunk: 4 bytes saved
        else:
            headers["Weir-Framing"] = "u32be"
            body = b"".join(_u32.pack(len(c)) + c for c in batch)
        self._sent_any = True
        resp = self._t.request("POST", self._url, headers=headers, body=body, idempotent=True)
        assert isinstance(resp, Response)
        self.requests += 1
        return resp

    def _acks_of(self, resp: Response, n: int) -> list[dict[str, Any]]:
        """The reply's acks (JSON objects), checked: n of them."""
        try:
            rep = resp.json()
            acks = rep["acks"]
            self.next_offset = rep.get("next_offset")
            # The last ack checked in full, every ack's outcome when counted.
            if not isinstance(acks, list) or (acks and (type(acks[-1]["offset"]) is not int
                                                        or acks[-1]["outcome"] not in _OUTCOMES)):
                raise TypeError("an ack without an integer offset and a known outcome")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ProtocolError(f"append reply is not weir's acks JSON: {e}", path=self._url) from None
        if len(acks) != n:
            raise ProtocolError(f"append of {n} chunks got {len(acks)} acks", path=self._url)
        return acks

    def _finish_request(self, header: str) -> str:
        try:
            resp = self._t.request(
                "POST",
                self._url,
                headers={"Weir-Writer": self.writer, "Weir-Attempt": str(self.attempt), header: "true"},
                idempotent=True,
            )
        except (UnknownWriterError, NotFoundError):
            if self._sent_any:
                raise
            return "empty"
        assert isinstance(resp, Response)
        return resp.headers.get("weir-result", "done")
