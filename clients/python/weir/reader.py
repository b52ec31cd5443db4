"""Reading streams: catch-up, then live by long-poll or SSE, resumable.

A :class:`Reader` always asks for ``format=ndjson``: every record comes with
its offset, its kind and its writer, so the reader resumes exactly after the
last record it handed out, whatever the view. In the committed view (the
default) it yields the data of committed writers, each chunk once, and the
``close`` record; in the live view it yields every record as written, aborts
and commits included, for callers that apply aborts themselves
(``apply_aborts`` tells each abort which records it voids).
"""

from __future__ import annotations

import base64
import dataclasses
import http.client
import json
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

from ._http import StreamingResponse, Transport, stream_url_path
from .errors import NotFoundError, ProtocolError, UnavailableError, WeirConnectionError, WeirError
from .types import START, LiveMode, Record, View, compact_json, format_offset

__all__ = ["Reader", "Voids"]

# One NDJSON line: a 4 MiB chunk in base64 inside JSON, and room.
_MAX_LINE = 16 << 20


class Voids:
    """Tells a live reader which data records it already got are now void.

    Feed it every record in offset order; an abort or close returns the offsets
    of the data records it saw that the record voids (the rules of
    ``stream.Voids`` in weir's Go code).
    """

    def __init__(self) -> None:
        self._seen: dict[str, list[tuple[int, int]]] = {}  # writer -> [(seq, offset)] still open

    def push(self, rec: Record) -> tuple[int, ...]:
        """Records ``rec``; returns the offsets it voids."""
        if rec.kind == "data":
            if rec.attempt > 0:
                self._seen.setdefault(rec.writer, []).append((rec.seq, rec.offset))
        elif rec.kind == "commit":
            self._seen.pop(rec.writer, None)
        elif rec.kind == "abort":
            seen = self._seen.get(rec.writer, [])
            void = tuple(off for seq, off in seen if seq >= rec.from_seq)
            if seen:
                self._seen[rec.writer] = [(s, o) for s, o in seen if s < rec.from_seq]
            return void
        elif rec.kind == "close":
            void = tuple(off for seen in self._seen.values() for _, off in seen)
            self._seen.clear()
            return tuple(sorted(void))
        return ()


def _decode(line: bytes, encoding: str) -> Record:
    try:
        w = json.loads(line)
        kind = w["kind"]
        offset = int(w["offset"])
    except (ValueError, KeyError, TypeError) as e:
        raise ProtocolError(f"an NDJSON record that is not one: {e}: {line[:200]!r}") from None
    if kind not in ("data", "abort", "commit", "close", "reopen"):
        raise ProtocolError(f"NDJSON record at {offset}: unknown kind {kind!r}")
    data, value = b"", None
    if kind == "data":
        enc = w.get("encoding") or encoding
        raw = w.get("data")
        if enc == "json":
            value, data = raw, compact_json(raw)
        elif enc == "text" and isinstance(raw, str):
            data = raw.encode("utf-8")
        elif isinstance(raw, str):
            try:
                data = base64.b64decode(raw, validate=True)
            except ValueError as e:
                raise ProtocolError(f"NDJSON record at {offset}: data is not base64: {e}") from None
        else:
            raise ProtocolError(f"NDJSON record at {offset}: data is not a string")
    return Record(
        offset=offset,
        next_offset=w.get("next_offset") or format_offset(offset + 1),
        kind=kind,
        writer=w.get("writer", ""),
        attempt=int(w.get("attempt", 0)),
        seq=int(w.get("seq", 0)),
        data=data,
        value=value,
        from_seq=int(w.get("from", 0)),
        count=int(w.get("count", 0)),
    )


class Reader:
    """Iterates the records of a stream from an offset.

    Iterate it once; :attr:`offset` is always where to resume after the last
    record handed out (give it to :meth:`weir.Client.read` as ``offset`` in
    another process, say). A dropped connection, a server restart or the end
    of a long SSE response is resumed from there by the reader itself, for up
    to the client's ``retry_for`` seconds without progress.

    Args:
        transport: the client's HTTP layer (use :meth:`weir.Client.read`).
        path: the stream's path under ``/v1/stream/``.
        offset: where to start: ``"-1"`` (the start), ``"now"`` (the tail), or
            a :attr:`Record.next_offset` / :attr:`offset` from an earlier read.
        view: ``committed`` (the output of committed writers, each chunk once)
            or ``live`` (every record as written, aborts included).
        live: None to stop at the stream's current end; ``long-poll`` or
            ``sse`` to follow it until it is closed.
        apply_aborts: in the live view, set :attr:`Record.voided` on each
            abort and close record.
        live_timeout: the socket timeout of live requests, above the server's
            ``--long-poll-timeout`` (20 s by default), since an idle live
            response sends nothing for that long.
        wait_for: called on a 404 when following; True means "the stream may
            still come, ask again" (a run's stream its run has not written yet).
    """

    def __init__(
        self,
        transport: Transport,
        path: str,
        *,
        offset: str = START,
        view: View = "committed",
        live: LiveMode | None = None,
        apply_aborts: bool = False,
        live_timeout: float = 35.0,
        wait_for: Callable[[], bool] | None = None,
    ) -> None:
        if view not in ("committed", "live"):
            raise ValueError(f"view {view!r}: committed or live")
        if live not in (None, "long-poll", "sse"):
            raise ValueError(f"live {live!r}: None, 'long-poll' or 'sse'")
        self._t = transport
        self.path = path
        self._url = stream_url_path(path)
        #: Where to resume: the offset after the last record handed out.
        self.offset = offset or START
        self.view: View = view
        self.live: LiveMode | None = live
        self._voids = Voids() if apply_aborts and view == "live" else None
        self._live_timeout = live_timeout
        self._wait_for = wait_for
        #: The stream was seen closed, and everything before the close was read.
        self.closed = False
        #: Requests sent again after a failure (reconnects).
        self.reconnects = 0
        self._resp: StreamingResponse | None = None
        self._stopped = False
        self._cursor: str | None = None  # the last Stream-Cursor, echoed (for caches)

    def __iter__(self) -> Iterator[Record]:
        return self._records()

    def close(self) -> None:
        """Ends the read: drops its connection (from any thread); the
        iteration stops instead of resuming."""
        self._stopped = True
        resp = self._resp
        if resp is not None:
            resp.abort()  # the iterating thread sees the body end, and stops

    def _release(self) -> None:
        resp, self._resp = self._resp, None
        if resp is not None:
            resp.close()

    def _records(self) -> Iterator[Record]:
        live_now = False  # the first request catches up; then it follows
        last_progress = time.monotonic()
        delay = 0.05
        while not self._stopped:
            try:
                up_to_date = yield from self._one(self.live if live_now else None)
            except NotFoundError:
                if self.live is None or self._wait_for is None:
                    raise
                if not self._wait_for():
                    return  # it will never come (its run ended without it)
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
                continue
            except WeirError as e:
                if self._stopped:
                    return
                if not e.retryable or time.monotonic() - last_progress > self._t.retry_for:
                    raise
                self.reconnects += 1
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            finally:
                self._release()
            last_progress = time.monotonic()
            delay = 0.05
            if self.closed or (up_to_date and self.live is None):
                return
            if up_to_date:
                live_now = True

    def _query(self, mode: LiveMode | None) -> dict[str, str | int | None]:
        return {
            "offset": self.offset,
            "format": "ndjson",
            "view": self.view,
            "live": mode,
            "cursor": self._cursor if mode else None,
        }

    def _emit(self, rec: Record, next_offset: str | None) -> Record:
        """Bookkeeping before a record goes out: the resume offset, voids, close."""
        if next_offset is not None:
            # The last record of a reply resumes where the reply said: in the
            # committed view that may be past it (commit records are not sent).
            rec = _with(rec, next_offset=next_offset)
        if self._voids is not None:
            void = self._voids.push(rec)
            if void:
                rec = _with(rec, voided=void)
        self.offset = rec.next_offset
        if rec.kind == "close":
            self.closed = True
        elif rec.kind == "reopen":
            # A resumed run's stream goes on after its close.
            self.closed = False
        return rec

    def _one(self, mode: LiveMode | None) -> Generator[Record, None, bool]:
        """Sends one read and yields its records; returns whether the view
        was up to date at its end."""
        timeout = self._live_timeout if mode else None
        headers = {"Accept": "text/event-stream"} if mode == "sse" else None
        resp = self._t.request(
            "GET", self._url, query=self._query(mode), headers=headers, idempotent=True, timeout=timeout, stream=True
        )
        assert isinstance(resp, StreamingResponse)
        self._resp = resp
        self._cursor = resp.headers.get("stream-cursor") or self._cursor
        if mode == "sse":
            return (yield from self._sse(resp))
        if resp.status == 204:
            # A long-poll that saw nothing new: resume where it says.
            resp.read()
            return self._advance(resp.headers)
        try:
            body = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise _dropped(self._url, e) from e
        enc = resp.headers.get("weir-data-encoding", "base64")
        lines = [ln for ln in body.split(b"\n") if ln.strip()]
        recs = [_decode(ln, enc) for ln in lines]
        next_offset = resp.headers.get("stream-next-offset")
        up_to_date = self._flag(resp.headers, "stream-up-to-date")
        closed = self._flag(resp.headers, "stream-closed")
        for i, rec in enumerate(recs):
            yield self._emit(rec, next_offset if i == len(recs) - 1 else None)
        if next_offset:
            self.offset = next_offset
        if closed and up_to_date:
            self.closed = True
        return up_to_date

    @staticmethod
    def _flag(headers: dict[str, str], name: str) -> bool:
        return headers.get(name, "").lower() == "true"

    def _advance(self, headers: dict[str, str]) -> bool:
        if headers.get("stream-next-offset"):
            self.offset = headers["stream-next-offset"]
        closed = self._flag(headers, "stream-closed")
        if closed:
            self.closed = True
        return self._flag(headers, "stream-up-to-date") or closed

    def _sse(self, resp: StreamingResponse) -> Generator[Record, None, bool]:
        """Reads one SSE response: data events carry NDJSON records, which go
        out at the control event after them (it says where to resume)."""
        enc = resp.headers.get("weir-data-encoding", "base64")
        event, data, pending = "", [], []
        up_to_date = False
        while True:
            try:
                raw = resp.readline(_MAX_LINE)
            except (OSError, http.client.HTTPException) as e:
                raise _dropped(self._url, e) from e
            if not raw:
                # The server ended the response (its SSE time limit, a
                # restart): records after the last control event come again.
                return up_to_date
            line = raw.rstrip(b"\r\n")
            if line:
                if line.startswith(b":"):
                    continue  # a keep-alive comment
                name, _, value = line.partition(b":")
                if value.startswith(b" "):
                    value = value[1:]
                if name == b"event":
                    event = value.decode()
                elif name == b"data":
                    data.append(value)
                continue
            if not event and not data:
                continue
            ev, payload = event or "message", data
            event, data = "", []
            if ev == "data":
                pending.extend(_decode(ln, enc) for ln in payload if ln.strip())
            elif ev == "control":
                ctl = _json(b"\n".join(payload), "SSE control event")
                next_offset = ctl.get("streamNextOffset")
                if ctl.get("streamCursor"):
                    self._cursor = str(ctl["streamCursor"])
                for i, rec in enumerate(pending):
                    yield self._emit(rec, next_offset if i == len(pending) - 1 else None)
                pending = []
                if next_offset:
                    self.offset = next_offset
                up_to_date = bool(ctl.get("upToDate") or ctl.get("streamClosed"))
                if ctl.get("streamClosed"):
                    self.closed = True
                    return True
            elif ev == "error":
                msg = _json(b"\n".join(payload), "SSE error event").get("error", "")
                # The server met an error mid-read (its store, a drain): the
                # read resumes from the last control event, like a drop.
                raise UnavailableError(f"the server ended the read: {msg}", path=self._url)


def _json(b: bytes, what: str) -> dict[str, Any]:
    try:
        v = json.loads(b)
    except ValueError as e:
        raise ProtocolError(f"{what} is not JSON: {e}") from None
    if not isinstance(v, dict):
        raise ProtocolError(f"{what} is not a JSON object")
    return v


def _with(rec: Record, **changes: Any) -> Record:
    return dataclasses.replace(rec, **changes)


def _dropped(path: str, e: Exception) -> WeirError:
    what = "timed out" if isinstance(e, TimeoutError) else f"{type(e).__name__}: {e}"
    return WeirConnectionError(f"the read's connection dropped ({what})", method="GET", path=path)
