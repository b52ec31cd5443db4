"""The HTTP layer: kept-alive connections, timeouts, retries, error mapping.

Only :mod:`http.client`: every request has a socket timeout (connect and each
read and write), and a request that may be sent again (a read, or a write weir
de-duplicates) is retried on network failures and retryable replies, backing
off from 50 ms to 2 s, for up to ``retry_for`` seconds in all.
"""

from __future__ import annotations

import functools
import http.client
import os
import random
import select
import socket
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .errors import WeirConnectionError, WeirError, error_from_reply

__all__ = ["Transport", "Response", "StreamingResponse", "stream_url_path"]

#: Where ``weir server`` listens by default.
DEFAULT_URL = "http://127.0.0.1:4437"

# Idle connections kept per client: a writer or a reader holds one at a time.
_MAX_IDLE = 8


# Bodies up to this size go out in one send with their headers.
_COALESCE_BYTES = 64 << 10


if TYPE_CHECKING:
    # _OneSend is only ever mixed into an HTTPConnection (below): its send()
    # overrides that one, and calls it.
    _OneSendBase = http.client.HTTPConnection
else:
    _OneSendBase = object


class _OneSend(_OneSendBase):
    """http.client sends a request's headers and its body in two writes: two
    packets (TCP_NODELAY), two wakeups of the server. For a small body this
    holds the headers back and sends them with it, ~15% more requests a
    second on loopback. ``hold`` is set just before ``request`` with a
    bytes body, whose ``_send_output`` calls ``send`` exactly twice."""

    hold = False
    _held: bytes | None = None

    def send(self, data: Any) -> None:
        if self.hold:
            self.hold = False
            self._held = data
            return
        if self._held is not None:
            held, self._held = self._held, None
            if isinstance(data, bytes):
                data = held + data
            else:
                super().send(held)
        super().send(data)

    def reset_hold(self) -> None:
        """Forgets held headers (after a failed request)."""
        self.hold = False
        self._held = None


class _HTTPConnection(_OneSend, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_OneSend, http.client.HTTPSConnection):
    pass


@functools.lru_cache(maxsize=1024)
def stream_url_path(path: str) -> str:
    """``/v1/stream/`` and a stream's path, escaped segment by segment."""
    if not path or path.startswith("/"):
        raise ValueError(f"stream path {path!r}: want segments like 'chat/42' (no leading '/')")
    return "/v1/stream/" + "/".join(urllib.parse.quote(seg, safe="") for seg in path.split("/"))


@dataclass
class Response:
    """A reply read whole."""

    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        """The body decoded as JSON."""
        import json

        return json.loads(self.body)


class StreamingResponse:
    """A 2xx reply whose body the caller reads as it arrives (SSE, long-poll).

    Close it when done: its connection goes back to the pool only if the body
    was read to its end.
    """

    def __init__(
        self, transport: Transport, conn: _HTTPConnection | _HTTPSConnection, resp: http.client.HTTPResponse
    ) -> None:
        self.status = resp.status
        self.headers = {k.lower(): v for k, v in resp.getheaders()}
        self._t = transport
        self._conn: _HTTPConnection | _HTTPSConnection | None = conn
        self._resp = resp

    def readline(self, limit: int) -> bytes:
        """One line of the body (b"" at its end)."""
        return self._resp.readline(limit)

    def read(self) -> bytes:
        """The rest of the body."""
        return self._resp.read()

    def abort(self) -> None:
        """Cuts the connection under a read in progress on another thread
        (which then sees the body end); that thread still calls close()."""
        conn = self._conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        """Releases the connection."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._resp.isclosed() and not self._resp.will_close:
            self._t._release(conn)
        else:
            self._resp.close()
            conn.close()

    def __enter__(self) -> StreamingResponse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Transport:
    """Sends requests to one weir server, over a small pool of kept-alive
    connections. Safe for concurrent use.

    Args:
        url: the server's base URL; default ``$WEIR_URL``, else ``http://127.0.0.1:4437``.
        token: the bearer token; default ``$WEIR_TOKEN``.
        timeout: seconds for each socket operation (connect, send, each read).
        retry_for: seconds a retried request may keep trying, in all.
    """

    def __init__(self, url: str | None, token: str | None, timeout: float, retry_for: float) -> None:
        url = url or os.environ.get("WEIR_URL") or DEFAULT_URL
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"server URL {url!r}: want http(s)://host[:port]")
        if u.query or u.fragment:
            raise ValueError(f"server URL {url!r}: no query or fragment, please")
        if timeout <= 0 or retry_for < 0:
            raise ValueError("timeout must be > 0 and retry_for >= 0")
        self.url = url.rstrip("/")
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port or (443 if self._https else 80)
        self._prefix = u.path.rstrip("/")
        tok = token if token is not None else os.environ.get("WEIR_TOKEN", "")
        self._auth = f"Bearer {tok}" if tok else ""
        self.timeout = timeout
        self.retry_for = retry_for
        self._idle: list[_HTTPConnection | _HTTPSConnection] = []
        self._lock = threading.Lock()
        #: Requests sent again after a failure (for tests and benchmarks).
        self.retries = 0

    # Connections.

    def _connect(self) -> _HTTPConnection | _HTTPSConnection:
        if self._https:
            return _HTTPSConnection(self._host, self._port, timeout=self.timeout)
        return _HTTPConnection(self._host, self._port, timeout=self.timeout)

    def _acquire(self) -> _HTTPConnection | _HTTPSConnection:
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                sock = conn.sock
                # An idle socket that is readable was closed by the server (or
                # holds junk): sending on it could fail after the server got
                # the request, so drop it before sending anything.
                if sock is not None:
                    try:
                        readable, _, _ = select.select([sock], [], [], 0)
                    except (OSError, ValueError):
                        readable = [sock]
                    if not readable:
                        return conn
                conn.close()
        return self._connect()

    def _release(self, conn: _HTTPConnection | _HTTPSConnection) -> None:
        with self._lock:
            if len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Closes the idle connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    # Requests.

    def headers(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        """The headers every request carries, and ``extra``."""
        h = {"User-Agent": f"weir-python/{__version__}"}
        if self._auth:
            h["Authorization"] = self._auth
        if extra:
            h.update(extra)
        return h

    def target(self, path: str, query: Mapping[str, str | int | None] | None = None) -> str:
        """The request target: the base URL's path, ``path`` (escaped) and the query."""
        t = self._prefix + path
        if query:
            q = {k: str(v) for k, v in query.items() if v is not None}
            if q:
                t += "?" + urllib.parse.urlencode(q)
        return t

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | None] | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        idempotent: bool,
        timeout: float | None = None,
        stream: bool = False,
    ) -> Response | StreamingResponse:
        """Sends a request; returns its 2xx reply or raises its error.

        Args:
            idempotent: sending it again is harmless (a read, or a write weir
                de-duplicates): it is retried on network failures and
                retryable replies. Otherwise a request is sent once.
            timeout: this request's socket timeout instead of the client's
                (live reads wait for data longer).
            stream: return a 2xx reply unread, as a :class:`StreamingResponse`.
        """
        target = self.target(path, query)
        h = self.headers(headers)
        start = time.monotonic()
        deadline = start + self.retry_for
        delay = 0.05
        tries = 0
        while True:
            tries += 1
            try:
                return self._once(method, target, h, body, timeout, stream)
            except WeirError as err:
                # A request that never left (no connection) may go again,
                # whatever it is.
                if not err.retryable or not (idempotent or getattr(err, "unsent", False)):
                    raise
                left = deadline - time.monotonic()
                if left <= 0:
                    if tries > 1:
                        err.message += f" (tried {tries} times in {time.monotonic() - start:.1f} s, the client's retry_for)"
                        err.args = (err.message,)
                    raise
                # Jitter so that many clients a restart cut off do not come
                # back in step; a Retry-After (a busy server's) is a floor.
                wait = delay * random.uniform(0.5, 1.0)
                after = err.headers.get("retry-after", "").strip()
                if after.isdigit():
                    wait = max(wait, float(after))
                time.sleep(min(wait, left))
                delay = min(delay * 2, 2.0)
                self.retries += 1

    def _once(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes | None,
        timeout: float | None,
        stream: bool,
    ) -> Response | StreamingResponse:
        conn = self._acquire()
        unsent = False
        try:
            if conn.sock is None:
                unsent = True  # if the connect fails, nothing was sent
                conn.connect()
                unsent = False
            t = timeout or self.timeout
            if conn.timeout != t:  # settimeout costs two system calls: only on a change
                conn.timeout = t
                if conn.sock is not None:
                    conn.sock.settimeout(t)
            try:
                if body and isinstance(conn, _OneSend) and len(body) <= _COALESCE_BYTES:
                    conn.hold = True
                conn.request(method, target, body=body, headers=headers)
            except OSError as send_error:
                conn.reset_hold()
                # The server may refuse a request before reading its body (a
                # body over its limit, a wrong token) and close the
                # connection: the send fails, and its reply is there to read.
                if conn.sock is None:  # not even connected
                    raise
                try:
                    resp = conn.getresponse()
                except (OSError, http.client.HTTPException):
                    raise send_error from None
            else:
                resp = conn.getresponse()
            if stream and 200 <= resp.status < 300:
                return StreamingResponse(self, conn, resp)
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            what = "timed out" if isinstance(e, TimeoutError) else f"{type(e).__name__}: {e}"
            err = WeirConnectionError(
                f"{'could not connect to' if unsent else 'no reply from'} weir server at {self.url} ({what})",
                method=method,
                path=target,
            )
            err.unsent = unsent
            raise err from e
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
        if resp.will_close:
            conn.close()
        else:
            self._release(conn)
        if resp.status >= 400:
            raise error_from_reply(resp.status, hdrs, data, method=method, path=target)
        return Response(resp.status, hdrs, data)
