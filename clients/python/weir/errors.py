"""Errors of weir's client: one class per ``Weir-Error`` wire code.

Every error reply of weir server is a status, one line of text and a stable
code in the ``Weir-Error`` header (``docs/protocol.md``, the table at the
top). :func:`error_from_reply` turns a reply into the class of its code, so
callers catch what they can act on::

    try:
        w.write(b"late")
    except weir.FencedError as e:
        print("a newer attempt runs:", e.current_attempt)

The status and the code are the contract; the wording of :attr:`WeirError.message`
may change. Replies without a code (from a proxy, say) map by status.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "WeirError",
    "WeirConnectionError",
    "ProtocolError",
    "BadRequestError",
    "UnavailableError",
    "FencedError",
    "StaleEpochError",
    "InFlightError",
    "ConflictError",
    "GoneError",
    "UnknownWorkflowError",
    "WorldConflictError",
    "RunExpiredError",
    "TooEarlyError",
    "RunNotFoundError",
    "HookNotFoundError",
    "StepNotFoundError",
    "WaitNotFoundError",
    "RunNotSupportedError",
    "InvalidEventError",
    "UnsignedError",
    "NoDeliveryError",
    "UnknownWriterError",
    "NotFoundError",
    "ChunkConflictError",
    "KeyReusedError",
    "GapError",
    "ClosedError",
    "WriterFinishedError",
    "WriterModeError",
    "RunConflictError",
    "NotResumableError",
    "HookInUseError",
    "LimiterInUseError",
    "LeaseLostError",
    "ProducerGapError",
    "StreamSeqError",
    "TooLargeError",
    "StreamFullError",
    "QuotaError",
    "InvalidNameError",
    "ProducerEpochSeqError",
    "InvalidError",
    "UnauthorizedError",
    "MethodNotAllowedError",
    "ForbiddenError",
    "UnsupportedMediaTypeError",
    "BusyError",
    "StoreClosedError",
    "EngineClosedError",
    "InternalError",
    "error_from_reply",
]


def _header_int(headers: Mapping[str, str], name: str) -> int | None:
    v = headers.get(name)
    if v is None:
        return None
    try:
        return int(v.strip())
    except ValueError:
        return None


class WeirError(Exception):
    """A request to weir server failed.

    Attributes:
        status: the HTTP status (0 when no reply came).
        code: the ``Weir-Error`` wire code (for a reply without one, that of
            the class its status maps to; "" for local errors).
        message: the server's one-line reason, or what went wrong locally.
        method, path: the request.
        headers: the reply's headers (lower-cased names), e.g. ``weir-attempt``.
    """

    #: The wire code this class stands for ("" for the groups and local errors).
    code_name: str = ""
    #: Whether the same request, sent again later, may succeed.
    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        code: str = "",
        method: str = "",
        path: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code or self.code_name
        self.method = method
        self.path = path
        self.headers: dict[str, str] = {k.lower(): v for k, v in (headers or {}).items()}

    def __str__(self) -> str:
        where = f"{self.method} {self.path}: " if self.method else ""
        if self.status:
            tag = f"HTTP {self.status}" + (f" {self.code}" if self.code else "")
            return f"{where}{self.message} ({tag})"
        return f"{where}{self.message}"


class WeirConnectionError(WeirError):
    """No reply: the server could not be reached, the connection dropped, or a
    socket operation timed out, and retrying (where the request allowed it) did
    not help before the client's ``retry_for`` ran out. ``__cause__`` holds the
    last network error.

    Attributes:
        unsent: the connection could not be made: the request never left.
    """

    retryable = True
    unsent = False


class ProtocolError(WeirError):
    """A reply that does not follow weir's protocol (malformed JSON, a missing
    header): a bug of the server, a proxy in the way, or a client too old."""


# Groups: a class per status family where callers may want any of them.


class BadRequestError(WeirError):
    """400: a request that can never succeed as it is (``bad_request``; the
    other 400 codes subclass it)."""

    code_name = "bad_request"


class UnavailableError(WeirError):
    """503: the server is stopping or its store is closed: try again later or
    elsewhere (the client retries these itself for requests it may resend)."""

    retryable = True


# One class per wire code, in the order of docs/protocol.md.


class FencedError(WeirError):
    """403 ``fenced``: a zombie attempt; a newer attempt of the writer began.

    Attributes:
        current_attempt: the writer's current attempt (``Weir-Attempt``), or None.
    """

    code_name = "fenced"

    @property
    def current_attempt(self) -> int | None:
        """The writer's current attempt (``Weir-Attempt``), or None."""
        return _header_int(self.headers, "weir-attempt")


class StaleEpochError(WeirError):
    """403 ``stale_epoch``: an idempotent producer's epoch is older than the
    current one (:attr:`current_epoch`, ``Producer-Epoch``)."""

    code_name = "stale_epoch"

    @property
    def current_epoch(self) -> int | None:
        """The producer's current epoch (``Producer-Epoch``), or None."""
        return _header_int(self.headers, "producer-epoch")


class InFlightError(WeirError):
    """409 ``in_flight``: a request with this ``Idempotency-Key`` is still being
    served; sending it again later gets its reply."""

    code_name = "in_flight"
    retryable = True


class ConflictError(WeirError):
    """409 ``conflict``: the request conflicts with the stream (another
    configuration at the path, another content type)."""

    code_name = "conflict"


class GoneError(WeirError):
    """410 ``gone``: a delivery to a hook that takes no more payloads (the
    workflow disposed of it, its sender closed it, or its run ended), a
    message to a run that ended, or a stream that was deleted while forks
    still reference it."""

    code_name = "gone"


class UnknownWorkflowError(WeirError):
    """404 ``unknown_workflow``: no engine of the server has the workflow."""

    code_name = "unknown_workflow"


class WorldConflictError(WeirError):
    """409 ``world_conflict``: a World event the run's state refuses."""

    code_name = "world_conflict"


class RunExpiredError(WeirError):
    """410 ``run_expired``: a World event that needs a live run, on a run that ended."""

    code_name = "run_expired"


class TooEarlyError(WeirError):
    """425 ``too_early``: ``step_started`` before the step's ``retryAfter``.

    Attributes:
        retry_after: seconds to wait (``Retry-After``), or None.
    """

    code_name = "too_early"
    retryable = True

    @property
    def retry_after(self) -> int | None:
        """Seconds to wait before sending it again (``Retry-After``), or None."""
        return _header_int(self.headers, "retry-after")


class RunNotFoundError(WeirError):
    """404 ``run_not_found``: an unknown World run."""

    code_name = "run_not_found"


class HookNotFoundError(WeirError):
    """404 ``hook_not_found``: an unknown or disposed World hook."""

    code_name = "hook_not_found"


class StepNotFoundError(WeirError):
    """404 ``step_not_found``: an unknown World step."""

    code_name = "step_not_found"


class WaitNotFoundError(WeirError):
    """404 ``wait_not_found``: an unknown World wait."""

    code_name = "wait_not_found"


class RunNotSupportedError(WeirError):
    """422 ``run_not_supported``: a World run of a newer spec than the server's."""

    code_name = "run_not_supported"


class InvalidEventError(BadRequestError):
    """400 ``invalid_event``: a malformed World event."""

    code_name = "invalid_event"


class UnsignedError(WeirError):
    """401 ``unsigned``: a World delivery without a valid, fresh signature."""

    code_name = "unsigned"


class NoDeliveryError(UnavailableError):
    """503 ``no_delivery``: a World queue message to a server without a World
    secret, which could never deliver it (not worth retrying)."""

    code_name = "no_delivery"
    retryable = False


class UnknownWriterError(WeirError):
    """404 ``unknown_writer``: a commit or abort of a writer that never wrote on
    the stream."""

    code_name = "unknown_writer"


class NotFoundError(WeirError):
    """404 ``not_found``: no such run or stream (or it expired), no hook
    holds the token delivered to (a run's hook exists only once the run has
    created it), or a run event its run never set."""

    code_name = "not_found"


class ChunkConflictError(WeirError):
    """422 ``chunk_conflict``: an acknowledged seq was sent again with other
    bytes. Two writers share an id and attempt, or seqs were misnumbered."""

    code_name = "chunk_conflict"


class KeyReusedError(WeirError):
    """422 ``key_reused``: an ``Idempotency-Key`` sent again with another
    request (another body, workflow or input, another hook payload)."""

    code_name = "key_reused"


class GapError(WeirError):
    """409 ``gap``: the request's first seq is past the writer's next one.

    Attributes:
        expected: the seq the server expects next (``Weir-Expected-Seq``), or None.
    """

    code_name = "gap"

    @property
    def expected(self) -> int | None:
        """The seq the server expects next (``Weir-Expected-Seq``), or None."""
        return _header_int(self.headers, "weir-expected-seq")


class ClosedError(WeirError):
    """409 ``closed``: the stream is closed.

    Attributes:
        next_offset: the closed stream's final offset (``Stream-Next-Offset``), or None.
    """

    code_name = "closed"

    @property
    def next_offset(self) -> str | None:
        """The closed stream's final offset (``Stream-Next-Offset``), or None."""
        return self.headers.get("stream-next-offset")


class WriterFinishedError(WeirError):
    """409 ``writer_finished``: the writer already committed, or was aborted for
    good; it takes no new seq or attempt on this stream."""

    code_name = "writer_finished"


class WriterModeError(WeirError):
    """409 ``writer_mode``: a writer that wrote with attempt 0 (committed at
    append) was used with attempts, or the reverse."""

    code_name = "writer_mode"


class RunConflictError(WeirError):
    """409 ``run_conflict``: the run id is taken by a run of another workflow."""

    code_name = "run_conflict"


class NotResumableError(WeirError):
    """409 ``not_resumable``: a resume of a run that did not fail and was not
    cancelled (it is running, pending or completed)."""

    code_name = "not_resumable"


class HookInUseError(WeirError):
    """409 ``hook_in_use``: a hook's token is held by a live hook of another
    run. Raised to the workflow that creates the hook (its run fails with it),
    not to deliverers; a token is free again once its hook is disposed of or
    its run ended."""

    code_name = "hook_in_use"


class LimiterInUseError(WeirError):
    """409 ``limiter_in_use``: a delete of a limiter a slot is held in,
    someone waits for, or a run is queued in."""

    code_name = "limiter_in_use"


class LeaseLostError(WeirError):
    """409 ``lease_lost``: another worker holds the run."""

    code_name = "lease_lost"


class ProducerGapError(WeirError):
    """409 ``producer_gap``: an idempotent producer skipped seqs.

    Attributes:
        expected, received: ``Producer-Expected-Seq`` and ``Producer-Received-Seq``.
    """

    code_name = "producer_gap"

    @property
    def expected(self) -> int | None:
        """The producer seq the server expects (``Producer-Expected-Seq``), or None."""
        return _header_int(self.headers, "producer-expected-seq")

    @property
    def received(self) -> int | None:
        """The producer seq the server got (``Producer-Received-Seq``), or None."""
        return _header_int(self.headers, "producer-received-seq")


class StreamSeqError(WeirError):
    """409 ``stream_seq``: a ``Stream-Seq`` that does not sort after the last one."""

    code_name = "stream_seq"


class TooLargeError(WeirError):
    """413 ``too_large``: a chunk over 4 MiB, a body over the server's limit
    (16 MiB by default), a request over 10,000 chunks, a hook payload or a
    message to a run over 1 MiB. The writer raises it before sending
    for a chunk it knows is too large, :meth:`weir.Client.deliver_hook` for a
    payload, :meth:`weir.Client.send_message` for a message."""

    code_name = "too_large"


class StreamFullError(WeirError):
    """413 ``stream_full``: the stream holds as many bytes as its limit allows;
    new data is refused (retransmits and adopted chunks are still
    acknowledged) until it is deleted. Not a :class:`TooLargeError`: a smaller
    request does not help."""

    code_name = "stream_full"


class QuotaError(WeirError):
    """507 ``quota``: the server holds as many standalone streams as it may; a
    new one is refused until another is deleted."""

    code_name = "quota"


class ProducerEpochSeqError(BadRequestError):
    """400 ``producer_epoch_seq``: a new producer epoch that does not start at seq 0."""

    code_name = "producer_epoch_seq"


class InvalidError(BadRequestError):
    """400 ``invalid``: parameters that can never succeed (a negative offset …)."""

    code_name = "invalid"


class InvalidNameError(InvalidError):
    """400 ``invalid_name``: a run id, stream name, topic, limiter, queue or
    schedule name its rule refuses (control bytes, ``/ ? # %``, too long, a
    prefix weir mints: ``sched:``, ``idem_``, ``wrun_``)."""

    code_name = "invalid_name"


class UnauthorizedError(WeirError):
    """401 ``unauthorized``: no bearer token, or the wrong one."""

    code_name = "unauthorized"


class MethodNotAllowedError(WeirError):
    """405 ``method_not_allowed``: the path does not take the method (a write
    to a run's stream, say)."""

    code_name = "method_not_allowed"


class ForbiddenError(WeirError):
    """403 ``forbidden``: a request the server refuses whoever sends it: a
    ``Host`` it does not answer to (a loopback server reached by another
    name), or a state-changing request from a web page of another origin."""

    code_name = "forbidden"


class UnsupportedMediaTypeError(WeirError):
    """415 ``unsupported_media_type``: a body of a content type the endpoint
    does not take (the runs API takes ``application/json`` only)."""

    code_name = "unsupported_media_type"


class BusyError(UnavailableError):
    """503 ``busy``: a budget of the server is spent (reads at once, upload
    bytes in flight); the client sends the request again after
    :attr:`retry_after` seconds, where it may.

    Attributes:
        retry_after: seconds to wait (``Retry-After``), or None.
    """

    code_name = "busy"

    @property
    def retry_after(self) -> int | None:
        """Seconds to wait before sending it again (``Retry-After``), or None."""
        return _header_int(self.headers, "retry-after")


class StoreClosedError(UnavailableError):
    """503 ``store_closed``: the server's store is closed (it is stopping)."""

    code_name = "store_closed"


class EngineClosedError(UnavailableError):
    """503 ``engine_closed``: the server's engine is stopping."""

    code_name = "engine_closed"


class InternalError(WeirError):
    """500 ``internal``: a failure of the server (logged there), not of the request."""

    code_name = "internal"
    retryable = True


def _by_code() -> dict[str, type[WeirError]]:
    out: dict[str, type[WeirError]] = {}
    todo: list[type[WeirError]] = [WeirError]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.code_name and cls.__module__ == __name__:
            out[cls.code_name] = cls
    return out


#: Wire code -> class, every row of the server's table.
CODES: dict[str, type[WeirError]] = _by_code()

# A reply with no (or an unknown) code, from an older server or a proxy.
_BY_STATUS: dict[int, type[WeirError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    405: MethodNotAllowedError,
    410: GoneError,
    413: TooLargeError,
    415: UnsupportedMediaTypeError,
    422: ChunkConflictError,
    429: BusyError,
    507: QuotaError,
    500: InternalError,
    503: UnavailableError,
}


def error_from_reply(
    status: int, headers: Mapping[str, str], body: bytes, *, method: str = "", path: str = ""
) -> WeirError:
    """Returns the error a reply with an error status stands for.

    The class is that of the ``Weir-Error`` code; without a known code, that of
    the status (a 409 by its headers: ``Stream-Closed`` is :class:`ClosedError`,
    ``Weir-Expected-Seq`` :class:`GapError`). The message is the body's first line.
    """
    lower = {k.lower(): v for k, v in headers.items()}
    text = body[:4096].decode("utf-8", "replace").strip()
    message = text.splitlines()[0] if text else f"HTTP {status}"
    code = lower.get("weir-error", "").strip()
    cls = CODES.get(code)
    if cls is None:
        if status == 409 and lower.get("stream-closed", "").lower() == "true":
            cls = ClosedError
        elif status == 409 and "weir-expected-seq" in lower:
            cls = GapError
        elif status == 403 and "weir-attempt" in lower:
            cls = FencedError
        elif status in (502, 504):
            cls = UnavailableError
        else:
            cls = _BY_STATUS.get(status, WeirError)
    err = cls(message, status=status, code=code, method=method, path=path, headers=lower)
    if cls is WeirError and status >= 500:
        err.retryable = True
    return err
