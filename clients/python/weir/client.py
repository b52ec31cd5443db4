"""The client of one weir server: streams (create, append, read, write exactly
once), the runs API (start, get, list, events, cancel, streams), hooks
(deliver a payload to a run's hook, close it, list a run's hooks), messages
to a run and the run events it publishes."""

from __future__ import annotations

import json
import math
import secrets
import struct
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ._http import Response, Transport, stream_url_path
from .errors import NotFoundError, ProtocolError, TooLargeError
from .reader import Reader
from .types import (
    START,
    Ack,
    AppendResult,
    Event,
    Hook,
    HookDelivery,
    Limiter,
    LiveMode,
    MessageSent,
    Migrated,
    Run,
    RunEvent,
    RunPage,
    RunState,
    RunStream,
    Schedule,
    StreamHead,
    View,
)
from .writer import Writer

__all__ = ["Client", "MAX_HOOK_PAYLOAD_BYTES", "MAX_MESSAGE_BYTES", "MAX_EVENT_WAIT"]

#: The largest hook payload the server takes, in bytes of JSON (1 MiB).
MAX_HOOK_PAYLOAD_BYTES = 1 << 20
#: The largest message to a run the server takes, in bytes of JSON (1 MiB).
MAX_MESSAGE_BYTES = 1 << 20
#: The longest wait :meth:`Client.get_event` may ask the server for, in seconds.
MAX_EVENT_WAIT = 60.0

_u32 = struct.Struct(">I")


_NO_INPUT: Any = object()  # fork(): no input given (None is JSON null)


def _seg(s: str, what: str) -> str:
    if not s:
        raise ValueError(f"{what}: empty")
    if s in (".", ".."):
        # quote() leaves dots be, and the server's router would take a bare
        # "." or ".." segment for a directory (a redirect), not a name.
        return s.replace(".", "%2E")
    return urllib.parse.quote(s, safe="")


def _json_body(value: Any, what: str) -> bytes:
    """``value`` as compact JSON with its objects' keys sorted: the same value
    always makes the same body, which is what the server compares a request
    sent again with its idempotency key by."""
    try:
        body = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{what}: {e}") from None
    return body.encode("utf-8")


def _go_duration(seconds: float) -> str:
    """Seconds as a Go duration (``2.5s``, ``0.2s``, ``60s``), to the nanosecond."""
    s = f"{seconds:.9f}".rstrip("0").rstrip(".")
    return (s or "0") + "s"


def _millis(seconds: float, what: str) -> int:
    """Seconds as whole milliseconds, rounded; a nonzero value under half a
    millisecond stays nonzero (1 or -1), for the server to judge."""
    if not math.isfinite(seconds):
        raise ValueError(f"{what}={seconds!r}: a finite number of seconds")
    ms = round(seconds * 1000)
    if ms == 0 and seconds:
        ms = 1 if seconds > 0 else -1
    return ms


class Client:
    """A client of one weir server. Safe to share between threads.

    Args:
        url: the server's base URL; default ``$WEIR_URL``, else
            ``http://127.0.0.1:4437`` (``weir server``'s default).
        token: the bearer token (``weir server --token``); default ``$WEIR_TOKEN``.
        timeout: seconds for each socket operation of a request: the connect,
            the send, each read of the reply. Live reads use ``live_timeout``.
        retry_for: seconds a request that may be sent again (reads, weir's
            de-duplicated writes, starts with an idempotency key) keeps
            retrying network failures and retryable replies, in all.
        live_timeout: the socket timeout of live reads (long-poll, SSE): above
            the server's ``--long-poll-timeout`` (20 s by default).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        retry_for: float = 30.0,
        live_timeout: float = 35.0,
    ) -> None:
        self._t = Transport(url, token, timeout, retry_for)
        self.live_timeout = live_timeout

    @property
    def url(self) -> str:
        """The server's base URL."""
        return self._t.url

    def close(self) -> None:
        """Closes the idle connections (the client stays usable)."""
        self._t.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Streams.

    def create_stream(
        self,
        path: str,
        content_type: str = "application/octet-stream",
        *,
        ttl: int | None = None,
        expires_at: str | None = None,
        closed: bool = False,
        body: bytes | None = None,
    ) -> bool:
        """Creates a standalone stream at ``/v1/stream/{path}``.

        Returns:
            True if created, False if a stream with the same configuration
            was there.

        Raises:
            ConflictError: a stream with another configuration is there.
        """
        h = {"Content-Type": content_type}
        if ttl is not None:
            h["Stream-TTL"] = str(ttl)
        if expires_at is not None:
            h["Stream-Expires-At"] = expires_at
        if closed:
            h["Stream-Closed"] = "true"
        resp = self._t.request("PUT", stream_url_path(path), headers=h, body=body, idempotent=True)
        return resp.status == 201

    def stream_info(self, path: str) -> StreamHead:
        """What ``HEAD`` says of a stream: content type, tail, closed."""
        resp = self._t.request("HEAD", stream_url_path(path), idempotent=True)
        return StreamHead(
            content_type=resp.headers.get("content-type", ""),
            next_offset=resp.headers.get("stream-next-offset", ""),
            closed=resp.headers.get("stream-closed", "").lower() == "true",
        )

    def append(
        self,
        path: str,
        data: bytes | str | Sequence[bytes],
        content_type: str = "application/octet-stream",
        *,
        writer: str | None = None,
        attempt: int | None = None,
        seq: int | None = None,
        idempotency_key: str | None = None,
        close: bool = False,
    ) -> AppendResult:
        """One append request, as it is: the low level under :class:`Writer`.

        Without ``writer`` it is an anonymous append, committed at once, and
        is sent once unless an ``idempotency_key`` makes its retry a replay.
        With ``writer`` (and ``seq``, the first chunk's), ``data`` may be a
        list of chunks, sent framed; prefer :meth:`writer`, which counts seqs
        and retries for you.
        """
        h = {"Content-Type": content_type}
        chunks = [data.encode() if isinstance(data, str) else data] if isinstance(data, (bytes, str)) else list(data)
        if writer is not None:
            if seq is None:
                raise ValueError("append with a writer needs seq (the first chunk's)")
            h["Weir-Writer"] = writer
            h["Weir-Seq"] = str(seq)
            if attempt is not None:
                h["Weir-Attempt"] = str(attempt)
        elif attempt is not None or seq is not None:
            raise ValueError("attempt and seq need a writer")
        if len(chunks) == 1:
            body = bytes(chunks[0])
        elif writer is None:
            raise ValueError("several chunks need a writer (framing is weir's extension)")
        else:
            h["Weir-Framing"] = "u32be"
            body = b"".join(_u32.pack(len(c)) + bytes(c) for c in chunks)
        if idempotency_key is not None:
            h["Idempotency-Key"] = idempotency_key
        if close:
            h["Stream-Closed"] = "true"
        resp = self._t.request(
            "POST",
            stream_url_path(path),
            headers=h,
            body=body,
            idempotent=writer is not None or idempotency_key is not None,
        )
        assert isinstance(resp, Response)
        acks: tuple[Ack, ...] = ()
        if resp.status == 200 and seq is not None:
            first = seq
            try:
                rep = resp.json()
                acks = tuple(Ack(first + i, int(a["offset"]), a["outcome"]) for i, a in enumerate(rep["acks"]))
            except (ValueError, KeyError, TypeError) as e:
                raise ProtocolError(f"append reply is not weir's acks JSON: {e}") from None
        return AppendResult(
            acks=acks,
            next_offset=resp.headers.get("stream-next-offset", ""),
            closed=resp.headers.get("stream-closed", "").lower() == "true",
            replayed=resp.headers.get("weir-idempotent-replay", "").lower() == "true",
        )

    def close_stream(self, path: str) -> str:
        """Closes a stream (closing twice is fine). Writers still open there are
        finished: their uncommitted chunks never join the committed view.

        Returns:
            The stream's final offset.
        """
        resp = self._t.request(
            "POST", stream_url_path(path), headers={"Stream-Closed": "true"}, idempotent=True
        )
        return resp.headers.get("stream-next-offset", "")

    def delete_stream(self, path: str, *, missing_ok: bool = False) -> None:
        """Deletes a stream and all it holds.

        Raises:
            NotFoundError: there is no such stream, unless ``missing_ok`` (a
                delete retried after its first try went through finds none).
        """
        try:
            self._t.request("DELETE", stream_url_path(path), idempotent=True)
        except NotFoundError:
            if not missing_ok:
                raise

    def writer(
        self,
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
    ) -> Writer:
        """An exactly-once writer of one attempt on a standalone stream; see
        :class:`Writer` for the arguments."""
        return Writer(
            self._t,
            path,
            writer,
            attempt,
            content_type=content_type,
            linger=linger,
            max_batch_chunks=max_batch_chunks,
            max_batch_bytes=max_batch_bytes,
            start_seq=start_seq,
            create=create,
            keep_acks=keep_acks,
        )

    def read(
        self,
        path: str,
        *,
        offset: str = START,
        view: View = "committed",
        live: LiveMode | None = None,
        apply_aborts: bool = False,
    ) -> Reader:
        """Reads a stream from ``offset``; see :class:`Reader`.

        ``view="committed"`` (the default) yields the output of committed
        writers, each chunk once, then the ``close`` record; ``view="live"``
        every record as written. ``live`` follows the stream until it closes.
        """
        return Reader(
            self._t, path, offset=offset, view=view, live=live, apply_aborts=apply_aborts, live_timeout=self.live_timeout
        )

    def read_run(
        self,
        run_id: str,
        name: str,
        *,
        offset: str = START,
        view: View = "committed",
        live: LiveMode | None = None,
        apply_aborts: bool = False,
    ) -> Reader:
        """Reads the stream ``name`` of a run (``runs/{run}/{name}``). When
        following, a stream the run has not created yet is waited for while
        the run goes on; the read ends if the run ends without it."""

        def still_coming() -> bool:
            return not self.get_run(run_id).done

        return Reader(
            self._t,
            f"runs/{run_id}/{name}",
            offset=offset,
            view=view,
            live=live,
            apply_aborts=apply_aborts,
            live_timeout=self.live_timeout,
            wait_for=still_coming,
        )

    # Runs.

    def _json(self, method: str, path: str, *, idempotent: bool, query: Mapping[str, Any] | None = None,
              headers: Mapping[str, str] | None = None, body: Any = None) -> tuple[int, Any]:
        data = None
        h = dict(headers or {})
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        resp = self._t.request(method, path, query=query, headers=h, body=data, idempotent=idempotent)
        assert isinstance(resp, Response)
        try:
            return resp.status, resp.json()
        except ValueError as e:
            raise ProtocolError(f"{method} {path}: the reply is not JSON: {e}") from None

    def start(
        self,
        workflow: str,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        id: str | None = None,
        queue: str | None = None,
        queue_key: str | None = None,
        priority: int = 0,
        dedupe: str | None = None,
        debounce: float | None = None,
        debounce_max: float | None = None,
        version: str | None = None,
    ) -> Run:
        """Starts a run of ``workflow`` with ``input`` (any JSON value).

        With an ``idempotency_key`` (or an ``id``) a retry of this start
        returns the same run, never a second one, so the client retries it
        itself; without either it is sent once. :attr:`Run.created` says
        whether this call created the run.

        **Queues.** With ``queue`` (a limiter's name: :meth:`set_limiter`)
        the run waits in that queue before it starts, :attr:`Run.queued`
        until the limiter admits it; it holds its slot until it ends.
        ``queue_key`` is its fair-share group there (a tenant: the limiter's
        ``per_key`` bounds each), ``priority`` its place (higher starts
        first). With ``dedupe`` a start folds into the run of the queue
        started with the same key while that run is queued or running: the
        reply is that run (its own id, :attr:`Run.created` false) and no new
        one is made. ``debounce`` (seconds, with ``dedupe``; sent to the
        millisecond) starts the run that long after the latest start of its
        key, with that start's input; ``debounce_max`` (seconds) caps that
        wait: the run starts at the latest that long after the first start
        of its key, however many follow. A dedupe key does not make a start safe
        to send again (the run it found may have ended in between): only an
        ``idempotency_key`` or an ``id`` does.

        ``version`` is the application version the run is for: only a
        worker of that version (or one that names it compatible) claims it.
        Default: the server's engine's version.

        Raises:
            UnknownWorkflowError: no such workflow on the server.
            NotFoundError: no limiter is named ``queue``.
            KeyReusedError: the key started a run of another workflow or input.
            RunConflictError: ``id`` names a run of another workflow.
            BadRequestError: a debounce below 0 or over a day; an
                :class:`InvalidError` for queue options without a queue, a
                debounce without a dedupe key, a queue key or dedupe key too
                long.
            ValueError: an idempotency key and an id; a ``debounce`` that is
                NaN or infinite.
        """
        if idempotency_key is not None and id is not None:
            raise ValueError("start: an idempotency key or an id, not both")
        body: dict[str, Any] = {"workflow": workflow}
        if input is not None:
            body["input"] = input
        if id is not None:
            body["id"] = id
        if queue is not None:
            body["queue"] = queue
        if queue_key is not None:
            body["queue_key"] = queue_key
        if priority:
            body["priority"] = priority
        if dedupe is not None:
            body["dedupe"] = dedupe
        if debounce is not None:
            body["debounce_ms"] = _millis(debounce, "start: debounce")
        if debounce_max is not None:
            body["debounce_max_ms"] = _millis(debounce_max, "start: debounce_max")
        if version is not None:
            body["version"] = version
        h = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
        status, d = self._json(
            "POST", "/v1/runs", body=body, headers=h, idempotent=idempotency_key is not None or id is not None
        )
        run = Run.from_json(d)
        run.created = status == 201
        return run

    def get_run(self, run_id: str) -> Run:
        """Returns a run. Raises :class:`NotFoundError` for an unknown one."""
        _, d = self._json("GET", "/v1/runs/" + _seg(run_id, "run id"), idempotent=True)
        return Run.from_json(d)

    def list_runs(
        self,
        *,
        workflow: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        before: str | None = None,
        queue: str | None = None,
        queued: bool = False,
    ) -> RunPage:
        """One page of runs, newest first (``limit``: 1 to 1000, the server's
        default 50); pass its ``next_cursor`` as ``before`` for the next page.
        ``queue``: only runs started in that queue; ``queued``: only those
        still waiting in theirs."""
        q = {"workflow": workflow, "status": status, "limit": limit, "before": before, "queue": queue,
             "queued": "true" if queued else None}
        _, d = self._json("GET", "/v1/runs", query=q, idempotent=True)
        return RunPage(tuple(Run.from_json(r) for r in d.get("runs", [])), d.get("next_cursor") or None)

    def runs(
        self,
        *,
        workflow: str | None = None,
        status: str | None = None,
        page_size: int = 100,
        queue: str | None = None,
        queued: bool = False,
    ) -> Iterator[Run]:
        """Every run matching the filters, newest first, page by page."""
        before = None
        while True:
            page = self.list_runs(workflow=workflow, status=status, limit=page_size, before=before, queue=queue, queued=queued)
            yield from page.runs
            if page.next_cursor is None:
                return
            before = page.next_cursor

    def events(self, run_id: str, *, after: int = 0) -> list[Event]:
        """A run's event log, in order; ``after``: only the events after that seq."""
        out: list[Event] = []
        # The server answers a page at a time ("more", "next_after").
        while True:
            q = {"after": after} if after > 0 else None
            _, d = self._json("GET", f"/v1/runs/{_seg(run_id, 'run id')}/events", query=q, idempotent=True)
            out.extend(Event.from_json(e) for e in d.get("events", []))
            nxt = d.get("next_after", 0)
            if not d.get("more") or not isinstance(nxt, int) or nxt <= after:
                return out
            after = nxt

    def migrate_runs(self, from_version: str, to_version: str, run_ids: Sequence[str] | None = None) -> Migrated:
        """Moves the runs in flight that started on application version
        ``from_version`` (only ``run_ids``, if given) to ``to_version``, whose
        workers then claim them (``POST /v1/runs/migrate``); returns how many
        it moved and their ids, the first 1,000 of them (``more`` if others
        moved too). Do it knowingly: their logs were written by the old code.

        Raises:
            BadRequestError: the same version twice, a version too long.
        """
        body: dict[str, Any] = {"from": from_version, "to": to_version}
        if run_ids:
            body["runs"] = list(run_ids)
        _, d = self._json("POST", "/v1/runs/migrate", idempotent=True, body=body)
        return Migrated.from_json(d)

    def fork(
        self,
        run_id: str,
        *,
        op: int | None = None,
        step: str | None = None,
        id: str | None = None,
        input: Any = _NO_INPUT,
        version: str | None = None,
    ) -> Run:
        """Starts a new run from operation ``op`` of run ``run_id`` (1-based, as
        its event log numbers them) or from its first step named ``step``
        (``POST /v1/runs/{id}/fork``): the operations before it replay their
        recorded outcomes, and the new run's streams begin with their committed
        output. ``input`` replaces the run's input; ``version`` moves the fork
        to another application version. The same ``id`` and fork point again
        return the same fork (so a retry is safe; a random id is made if none
        is given).

        Raises:
            BadRequestError: no fork point, both, or one past the run's end or
                inside a parallel group.
            NotFoundError: no such run.
            RunConflictError: ``id`` is another run's.
        """
        if (op is None) == (step is None):
            raise ValueError("fork: give op or step, one of them")
        body: dict[str, Any] = {"id": id or "run_" + secrets.token_hex(12)}
        if op is not None:
            body["op"] = op
        if step is not None:
            body["step"] = step
        if input is not _NO_INPUT:
            body["input"] = input
        if version:
            body["version"] = version
        _, d = self._json("POST", f"/v1/runs/{_seg(run_id, 'run id')}/fork", idempotent=True, body=body)
        return Run.from_json(d)

    def retry(self, run_id: str, *, step: str | None = None) -> Run:
        """Forks run ``run_id`` from the step whose failure ended it, or from
        its first step named ``step`` (``POST /v1/runs/{id}/retry``); returns
        the new run."""
        body: dict[str, Any] = {"step": step} if step else {}
        _, d = self._json("POST", f"/v1/runs/{_seg(run_id, 'run id')}/retry", idempotent=False, body=body)
        return Run.from_json(d)

    def resume(self, run_id: str) -> Run:
        """Makes a failed or cancelled run run again, with its id and history
        (``POST /v1/runs/{id}/resume``): the steps whose failures ended it run
        again, the rest replays; its streams reopen. Returns it, pending.

        Raises:
            NotResumableError: the run is running, pending or completed.
        """
        _, d = self._json("POST", f"/v1/runs/{_seg(run_id, 'run id')}/resume", idempotent=True)
        return Run.from_json(d)

    def cancel(self, run_id: str) -> Run:
        """Asks for a run to be cancelled; returns it as it is now (it turns
        ``cancelled`` once the engine stopped it: see :meth:`wait`). Cancelling
        an ended run changes nothing."""
        _, d = self._json("POST", f"/v1/runs/{_seg(run_id, 'run id')}/cancel", idempotent=True)
        return Run.from_json(d)

    def run_streams(self, run_id: str) -> list[RunStream]:
        """The streams of a run, by name."""
        _, d = self._json("GET", f"/v1/runs/{_seg(run_id, 'run id')}/streams", idempotent=True)
        return [RunStream.from_json(s) for s in d.get("streams", [])]

    def workflows(self) -> list[str]:
        """The names of the workflows the server can start."""
        _, d = self._json("GET", "/v1/workflows", idempotent=True)
        return [str(w) for w in d.get("workflows", [])]

    def wait(self, run_id: str, *, timeout: float) -> Run:
        """Polls a run until it ends and returns it.

        Raises:
            TimeoutError: it had not ended after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            run = self.get_run(run_id)
            if run.done:
                return run
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"run {run_id} is still {run.status} after {timeout} s")
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.5)

    def health(self) -> None:
        """Returns if the server answers ``/healthz`` with 200; raises otherwise."""
        self._t.request("GET", "/healthz", idempotent=True)

    # Hooks.

    def deliver_hook(
        self, token: str, payload: Any, *, idempotency_key: str | None = None, close: bool = False
    ) -> HookDelivery:
        """Delivers ``payload`` (any JSON value) to the hook holding ``token``
        (``POST /v1/hooks/{token}``): the run waiting on it goes on. Returns
        once the delivery is in the run's log.

        With ``close`` it is the hook's last payload (``?close=true``): the
        delivery closes the hook after it (:attr:`HookDelivery.closed`), the
        run takes the payloads it was sent, then learns the hook is closed,
        and later deliveries are :class:`GoneError`. :meth:`close_hook`
        closes a hook without a payload.

        The payload is sent as compact JSON with its objects' keys sorted, so
        the same value always makes the same body (a dict built in another
        order included): that is what the server compares a re-sent delivery
        by.

        **Retries.** With an ``idempotency_key`` (an id of the event being
        delivered: a webhook's delivery id, an approval's form id), a delivery
        sent again is answered with the first one's reply
        (:attr:`HookDelivery.duplicate`, the same ``seq``) and adds nothing, so
        the client retries it itself on a connection failure (no reply, a cut
        connection, a timeout) or a retryable reply, for up to ``retry_for``.
        **Without a key it is sent once**: a delivery whose reply was lost may
        have landed, and sending it again could deliver the payload twice, so
        a lost reply raises :class:`WeirConnectionError` (only a connection
        that could not be made at all, when nothing was sent, is tried again).

        A run's hook exists only once the run has created it: until then its
        token answers :class:`NotFoundError` (a caller that starts a run and
        delivers at once polls :meth:`hooks`, or retries the 404, with a
        deadline).

        Raises:
            NotFoundError: no hook holds the token (not created yet, or never).
            GoneError: the hook takes no more payloads: disposed of, closed, or
                its run ended.
            KeyReusedError: the key was used for a delivery of another payload
                (or the same payload with another ``close``).
            TooLargeError: a payload over 1 MiB of JSON (raised before sending:
                ``status`` is 0) or over the server's body limit.
            BadRequestError: a token the server refuses (``/``, ``?`` or ``#``
                in it, too long).
            ValueError, TypeError: an empty token or key, or a payload
                :func:`json.dumps` cannot encode (NaN, a set, mixed key types).
        """
        path = "/v1/hooks/" + _seg(token, "hook token")
        if idempotency_key is not None and not idempotency_key:
            raise ValueError("deliver_hook: an empty idempotency key (None for none)")
        data = _json_body(payload, f"deliver_hook({token!r}): the payload is not JSON")
        if len(data) > MAX_HOOK_PAYLOAD_BYTES:
            raise TooLargeError(
                f"a hook payload of {len(data)} bytes: the limit is {MAX_HOOK_PAYLOAD_BYTES} (not sent)",
                method="POST",
                path=path,
            )
        h = {"Content-Type": "application/json"}
        return self._post_hook(path, h, data, idempotency_key, close)

    def close_hook(self, token: str, *, idempotency_key: str | None = None) -> HookDelivery:
        """Closes the hook holding ``token`` without a payload (``POST
        /v1/hooks/{token}?close=true`` with an empty body): the run takes the
        payloads delivered before, then learns the hook is closed; deliveries
        to it are :class:`GoneError` from then on. The reply's
        :attr:`HookDelivery.closed` is true, its ``count`` the payloads the
        hook had received.

        **Retries** as :meth:`deliver_hook`'s: with an ``idempotency_key`` a
        close sent again is answered with the first reply (``duplicate``) and
        the client retries it itself; without one it is sent once (sent again
        after its reply was lost it would be :class:`GoneError`).

        Raises:
            NotFoundError: no hook holds the token (not created yet, or never).
            GoneError: the hook was already closed or disposed of, or its run
                ended.
            KeyReusedError: the key was used for a delivery of a payload.
            BadRequestError: a token the server refuses.
            ValueError: an empty token or key.
        """
        path = "/v1/hooks/" + _seg(token, "hook token")
        if idempotency_key is not None and not idempotency_key:
            raise ValueError("close_hook: an empty idempotency key (None for none)")
        return self._post_hook(path, {}, None, idempotency_key, True)

    def _post_hook(
        self, path: str, h: dict[str, str], data: bytes | None, idempotency_key: str | None, close: bool
    ) -> HookDelivery:
        if idempotency_key is not None:
            h["Idempotency-Key"] = idempotency_key
        q = {"close": "true"} if close else None
        # An empty body (data None) goes with Content-Length: 0.
        resp = self._t.request("POST", path, query=q, headers=h, body=data, idempotent=idempotency_key is not None)
        assert isinstance(resp, Response)
        try:
            d = resp.json()
            if not isinstance(d, dict) or "run_id" not in d:
                raise ValueError("no run_id")
            return HookDelivery.from_json(d)
        except (ValueError, TypeError) as e:
            raise ProtocolError(f"POST {path}: the reply is not a hook delivery's JSON: {e}") from None

    def hooks(self, run_id: str) -> list[Hook]:
        """The hooks of a run, by op (``GET /v1/runs/{id}/hooks``): each one's
        token, the payloads it received, and whether it is disposed of (the
        workflow closed it, or the run ended). A hook shows up once the run
        has created it: poll this (with a deadline) to learn a minted token,
        or that a hook is ready to be delivered to.

        Raises:
            NotFoundError: no such run.
        """
        _, d = self._json("GET", f"/v1/runs/{_seg(run_id, 'run id')}/hooks", idempotent=True)
        return [Hook.from_json(x) for x in d.get("hooks") or []]

    # Limiters.

    def limiters(self) -> list[Limiter]:
        """Every limiter of the server's store, by name, with what it holds now
        (``GET /v1/limiters``, page by page)."""
        return [Limiter.from_json(x) for x in self._pages_by_name("/v1/limiters", "limiters", None)]

    def limiter(self, name: str) -> Limiter:
        """One limiter, with what it holds now (``GET /v1/limiters/{name}``).

        Raises:
            NotFoundError: no such limiter.
        """
        _, d = self._json("GET", f"/v1/limiters/{_seg(name, 'limiter name')}", idempotent=True)
        return Limiter.from_json(d)

    def set_limiter(self, name: str, *, concurrency: int = 0, rate: int = 0, budget: int = 0,
                    period: float | None = None, per_key: int = 0) -> Limiter:
        """Creates limiter ``name`` or changes its bounds (``PUT
        /v1/limiters/{name}``); every process on the store keeps to them from
        its next step. Zero is no bound; ``period`` (seconds) is required with
        a rate or a budget; ``per_key`` bounds the slots one key holds at once
        (a run's ``queue_key`` when it is a queue: :meth:`start`).

        Raises:
            InvalidError: a negative bound, no bound, a rate or budget without a period.
        """
        body: dict[str, Any] = {"concurrency": concurrency, "rate": rate, "budget": budget}
        if per_key:
            body["per_key"] = per_key
        if period is not None:
            body["period"] = _go_duration(period)
        _, d = self._json("PUT", f"/v1/limiters/{_seg(name, 'limiter name')}", idempotent=True, body=body)
        return Limiter.from_json(d)

    # Schedules.

    def schedules(self, *, page: int | None = None) -> list[Schedule]:
        """Every schedule of the server's store, by name (``GET /v1/schedules``),
        asked for ``page`` at a time (the server's default, 100, if None)."""
        return [Schedule.from_json(x) for x in self._pages_by_name("/v1/schedules", "schedules", page)]

    def _pages_by_name(self, path: str, key: str, page: int | None) -> list[Any]:
        """Every item of a list paged by name (``?after=``, ``more`` and
        ``next_after`` in each reply), ``page`` at a time (the server's
        default if None). A cursor that does not move on ends it."""
        out: list[Any] = []
        after = ""
        while True:
            q: dict[str, Any] = {}
            if after:
                q["after"] = after
            if page is not None:
                q["limit"] = page
            _, d = self._json("GET", path, query=q or None, idempotent=True)
            out.extend(d.get(key) or [])
            nxt = d.get("next_after", "")
            if not d.get("more") or not isinstance(nxt, str) or nxt <= after:
                return out
            after = nxt

    def schedule(self, name: str) -> Schedule:
        """One schedule, with what it did (``GET /v1/schedules/{name}``).

        Raises:
            NotFoundError: no such schedule.
        """
        _, d = self._json("GET", f"/v1/schedules/{_seg(name, 'schedule name')}", idempotent=True)
        return Schedule.from_json(d)

    def set_schedule(
        self,
        name: str,
        *,
        workflow: str,
        spec: str,
        input: Any = None,
        tz: str = "",
        overlap: str = "skip",
        backfill: float | None = None,
        paused: bool = False,
    ) -> Schedule:
        """Creates schedule ``name`` or changes it (``PUT /v1/schedules/{name}``):
        each tick of ``spec`` (``0 9 * * MON-FRI``, ``@daily``, ``@every 15m``, read
        in time zone ``tz``) starts one run of ``workflow`` with ``input``.
        ``overlap`` says what a tick does while the last tick's run is in
        flight (``skip``, ``buffer_one``, ``allow``); ``backfill`` (seconds) how
        late a tick may be and still start. A changed schedule keeps the ticks
        it handled; one set ``paused`` starts nothing until set again without.

        Raises:
            BadRequestError: an expression, time zone, overlap, backfill or
                name the server refuses (an :class:`InvalidError`).
        """
        body: dict[str, Any] = {"workflow": workflow, "spec": spec, "overlap": overlap, "paused": paused}
        if input is not None:
            body["input"] = input
        if tz:
            body["tz"] = tz
        if backfill is not None:
            body["backfill"] = _go_duration(backfill)
        _, d = self._json("PUT", f"/v1/schedules/{_seg(name, 'schedule name')}", idempotent=True, body=body)
        return Schedule.from_json(d)

    def pause_schedule(self, name: str) -> Schedule:
        """Pauses a schedule by name, keeping the rest of it (``POST
        /v1/schedules/{name}/pause``): no tick starts until it is resumed,
        and the ticks meanwhile never do.

        Raises:
            NotFoundError: no such schedule (none is made).
        """
        _, d = self._json("POST", f"/v1/schedules/{_seg(name, 'schedule name')}/pause", idempotent=True)
        return Schedule.from_json(d)

    def resume_schedule(self, name: str) -> Schedule:
        """Resumes a paused schedule by name (``POST
        /v1/schedules/{name}/resume``): its ticks start from now.

        Raises:
            NotFoundError: no such schedule (none is made).
        """
        _, d = self._json("POST", f"/v1/schedules/{_seg(name, 'schedule name')}/resume", idempotent=True)
        return Schedule.from_json(d)

    def delete_schedule(self, name: str) -> None:
        """Deletes a schedule (``DELETE /v1/schedules/{name}``); the runs it
        started are kept.

        Raises:
            NotFoundError: no such schedule.
        """
        # 204 and no body; an error reply raises in the transport.
        self._t.request("DELETE", f"/v1/schedules/{_seg(name, 'schedule name')}", idempotent=True)

    # Messages and run events.

    def send_message(
        self, run_id: str, topic: str, message: Any, *, idempotency_key: str | None = None
    ) -> MessageSent:
        """Sends ``message`` (any JSON value) to a run on ``topic`` (``POST
        /v1/runs/{id}/messages/{topic}``). Returns once it is in the run's
        log, where it is kept until the run takes it (``weir.Recv`` in the
        workflow), whatever the run is doing when it comes.

        The message is sent as compact JSON with its objects' keys sorted, as
        :meth:`deliver_hook`'s payloads, so the same value always makes the
        same body: that is what the server compares a re-sent message by.

        **Retries.** With an ``idempotency_key`` (the id of what is sent: a
        chat message's id, a webhook's delivery id) a message sent again is
        answered with the first one's reply (:attr:`MessageSent.duplicate`,
        the same ``seq``) and adds nothing, so the client retries it itself
        on a connection failure or a retryable reply, for up to ``retry_for``.
        **Without a key it is sent once**: a message whose reply was lost may
        have landed, and sending it again could deliver it twice, so a lost
        reply raises :class:`WeirConnectionError`.

        Raises:
            NotFoundError: no such run.
            GoneError: the run ended: it takes no more messages.
            KeyReusedError: the key was used for a message of another topic or
                value.
            TooLargeError: a message over 1 MiB of JSON (raised before sending:
                ``status`` is 0) or over the server's body limit.
            InvalidError: a topic the server refuses (``/``, ``?`` or ``#`` in
                it, over 255 bytes); a :class:`BadRequestError`.
            ValueError, TypeError: an empty run id, topic or key, or a message
                :func:`json.dumps` cannot encode (NaN, a set, mixed key types).
        """
        path = f"/v1/runs/{_seg(run_id, 'run id')}/messages/{_seg(topic, 'topic')}"
        if idempotency_key is not None and not idempotency_key:
            raise ValueError("send_message: an empty idempotency key (None for none)")
        data = _json_body(message, f"send_message({run_id!r}, {topic!r}): the message is not JSON")
        if len(data) > MAX_MESSAGE_BYTES:
            raise TooLargeError(
                f"a message of {len(data)} bytes: the limit is {MAX_MESSAGE_BYTES} (not sent)",
                method="POST",
                path=path,
            )
        h = {"Content-Type": "application/json"}
        if idempotency_key is not None:
            h["Idempotency-Key"] = idempotency_key
        resp = self._t.request("POST", path, headers=h, body=data, idempotent=idempotency_key is not None)
        assert isinstance(resp, Response)
        try:
            d = resp.json()
            if not isinstance(d, dict) or "seq" not in d:
                raise ValueError("no seq")
            return MessageSent.from_json(d)
        except (ValueError, TypeError) as e:
            raise ProtocolError(f"POST {path}: the reply is not a sent message's JSON: {e}") from None

    def get_event(
        self, run_id: str, key: str, *, wait: float | None = None, after: int = 0
    ) -> RunEvent | None:
        """The latest value the run published under ``key`` (``weir.SetEvent``;
        ``GET /v1/runs/{id}/events/{key}``).

        With ``wait`` (seconds, 0 to 60) it waits up to that long for a value
        newer than ``after`` (a :attr:`RunEvent.seq`; 0, the default: any
        value) and returns None if none came in time. Following a key is a
        loop: ``ev = get_event(run, key, wait=30, after=ev.seq if ev else 0)``.
        A waited request's reply is awaited for ``wait`` more than the
        client's ``timeout``; like every read it is retried on a connection
        failure or a retryable reply (and then waits anew).

        Raises:
            NotFoundError: no such run; or the key was never set (without
                ``wait``), or the run ended without a newer value (with it).
            ValueError: an empty run id or key, a ``wait`` out of range, an
                ``after`` below 0 or without ``wait``.
        """
        path = f"/v1/runs/{_seg(run_id, 'run id')}/events/{_seg(key, 'run event key')}"
        if after < 0:
            raise ValueError(f"get_event: after={after}: an event seq, 0 or more")
        q: dict[str, str | int | None] | None = None
        timeout = None
        if wait is not None:
            if not 0 <= wait <= MAX_EVENT_WAIT:  # NaN too
                raise ValueError(f"get_event: wait={wait!r}: from 0 to {MAX_EVENT_WAIT:g} seconds")
            q = {"wait": _go_duration(wait), "after": after or None}
            timeout = self._t.timeout + wait
        elif after:
            raise ValueError("get_event: after goes with wait (a value newer than after, waited for)")
        resp = self._t.request("GET", path, query=q, idempotent=True, timeout=timeout)
        assert isinstance(resp, Response)
        if resp.status == 204 and wait is not None:
            return None  # nothing newer within the wait
        try:
            d = resp.json()
            if not isinstance(d, dict) or "seq" not in d:
                raise ValueError("no seq")
            return RunEvent.from_json(d)
        except (ValueError, TypeError) as e:
            raise ProtocolError(f"GET {path}: the reply is not a run event's JSON: {e}") from None

    def run_state(self, run_id: str) -> RunState:
        """A run's events and messages (``GET /v1/runs/{id}/state``): the run
        events it published (each key's latest value, its first 1,000 keys;
        a value over 4 KiB comes ``elided``, by its ``size``: ``get_event``
        has it) and, by topic, the messages sent to it: how many came and,
        once it ended, how many it took and left (-1 while it goes on).

        Raises:
            NotFoundError: no such run.
        """
        _, d = self._json("GET", f"/v1/runs/{_seg(run_id, 'run id')}/state", idempotent=True)
        if not isinstance(d, dict):
            raise ProtocolError(f"GET /v1/runs/{run_id}/state: the reply is not a run state's JSON object")
        return RunState.from_json(d)
