"""A TCP proxy in front of the test server that loses replies on cue.

It forwards bytes both ways, connection by connection. Armed with
:meth:`Proxy.cut_replies`, it reads the server's reply to the next request
(its first bytes, or all of it) and closes both sides instead of forwarding
it: the server has done the work and answered, and the client never hears.
With :attr:`Proxy.drop_requests` it closes a connection on the first bytes of
a request, before the server gets any. :meth:`Proxy.kill_all` cuts every open
connection at once.
"""

from __future__ import annotations

import socket
import threading
from typing import Literal

CutMode = Literal["first_byte", "full_reply"]

_TIMEOUT = 30.0  # no pump blocks longer: an idle kept-alive connection ends


def _reply_complete(buf: bytes) -> bool:
    """Whether buf holds a whole HTTP reply (Content-Length or chunked)."""
    head, sep, body = buf.partition(b"\r\n\r\n")
    if not sep:
        return False
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    if status in (204, 304) or 100 <= status < 200:
        return True
    if headers.get("transfer-encoding", "").lower() == "chunked":
        return body.endswith(b"0\r\n\r\n")
    return len(body) >= int(headers.get("content-length", "0"))


class Proxy:
    """Forwards 127.0.0.1:<port> to the server at host:port."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._ls = socket.create_server(("127.0.0.1", 0))
        self._ls.settimeout(0.1)
        self.port: int = self._ls.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._cut = threading.Condition(self._lock)
        self._mode: CutMode = "first_byte"
        self._cuts_left = 0
        #: Replies lost so far.
        self.cuts = 0
        #: Close connections on a request's first bytes, before the server gets any.
        self.drop_requests = False
        #: Requests dropped so far.
        self.drops = 0
        #: Connections accepted so far.
        self.accepted = 0
        self._socks: set[socket.socket] = set()
        self._stopped = False
        self._thread = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)
        self._thread.start()

    def cut_replies(self, n: int = 1, mode: CutMode = "first_byte") -> None:
        """Loses the server's next n replies: after their first byte came
        (``first_byte``), or all of it (``full_reply``)."""
        with self._lock:
            self._mode, self._cuts_left = mode, n

    def stop_cutting(self) -> None:
        """Forwards every reply again."""
        with self._lock:
            self._cuts_left = 0

    def kill_all(self) -> int:
        """Closes every open connection; returns how many sockets it closed."""
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            self._close(s)
        return len(socks)

    def open_connections(self) -> int:
        """Client connections open now."""
        with self._lock:
            return len(self._socks) // 2

    def close(self) -> None:
        """Stops accepting and closes everything."""
        self._stopped = True
        self._thread.join(timeout=5)
        self._ls.close()
        self.kill_all()

    def _close(self, s: socket.socket) -> None:
        with self._lock:
            self._socks.discard(s)
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                c, _ = self._ls.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                u = socket.create_connection(self._target, timeout=_TIMEOUT)
            except OSError:
                c.close()
                continue
            c.settimeout(_TIMEOUT)
            with self._lock:
                self.accepted += 1
                self._socks.update((c, u))
            threading.Thread(target=self._requests, args=(c, u), daemon=True).start()
            threading.Thread(target=self._replies, args=(c, u), daemon=True).start()

    def _requests(self, c: socket.socket, u: socket.socket) -> None:
        try:
            while True:
                data = c.recv(1 << 16)
                if not data:
                    break
                if self.drop_requests:
                    with self._lock:
                        self.drops += 1
                    break
                u.sendall(data)
        except OSError:
            pass
        self._close(c)
        self._close(u)

    def _replies(self, c: socket.socket, u: socket.socket) -> None:
        buf = b""
        try:
            while True:
                data = u.recv(1 << 16)
                if not data:
                    break
                with self._lock:
                    cutting, mode = self._cuts_left > 0, self._mode
                if not cutting:
                    c.sendall(data)
                    continue
                buf += data
                if mode == "first_byte" or _reply_complete(buf):
                    with self._lock:
                        self._cuts_left -= 1
                        self.cuts += 1
                    break
        except OSError:
            pass
        self._close(c)
        self._close(u)
