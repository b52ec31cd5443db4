"""The values weir's client hands out: acks, records, runs, events, hooks,
messages, run events, offsets."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple

__all__ = [
    "START",
    "NOW",
    "View",
    "LiveMode",
    "Outcome",
    "format_offset",
    "parse_offset",
    "Ack",
    "AppendResult",
    "StreamHead",
    "Record",
    "Run",
    "RunPage",
    "Event",
    "RunStream",
    "HookDelivery",
    "Hook",
    "MessageSent",
    "RunEvent",
    "TopicMessages",
    "RunState",
    "Migrated",
]

#: The offset of a stream's start, in requests.
START = "-1"
#: The offset of a stream's tail at the moment of the request.
NOW = "now"

View = Literal["committed", "live"]
LiveMode = Literal["long-poll", "sse"]
Outcome = Literal["appended", "adopted", "retransmit"]


def format_offset(n: int) -> str:
    """Spells weir's record offset ``n`` as a Durable Streams offset: the
    position before record ``n`` (``0000000000000000_0000000000000042``)."""
    if n < 0:
        raise ValueError(f"offset {n}: record offsets are >= 0")
    return f"{0:016d}_{n:016d}"


def parse_offset(s: str) -> int:
    """The inverse of :func:`format_offset`: the record offset ``s`` is before."""
    hi, sep, lo = s.partition("_")
    if not sep or not hi.isdigit() or not lo.isdigit() or int(hi) != 0:
        raise ValueError(f"offset {s!r}: not a weir offset (0000000000000000_NNNNNNNNNNNNNNNN)")
    return int(lo)


def _time(v: Any) -> datetime | None:
    # Go writes RFC 3339 with up to 9 fractional digits; fromisoformat takes
    # "Z" from 3.11 on, and at most 6 digits before it.
    if not isinstance(v, str) or not v:
        return None
    s = v.replace("Z", "+00:00")
    if "." in s:
        head, _, rest = s.partition(".")
        digits = len(rest) - len(rest.lstrip("0123456789"))
        s = head + "." + rest[: min(digits, 6)].ljust(6, "0") + rest[digits:]
    try:
        return datetime.fromisoformat(s)
    except ValueError:
        return None


class Ack(NamedTuple):
    """One chunk acknowledged by the server (a named tuple: a writer makes
    one per chunk, and these are the cheapest to make).

    Attributes:
        seq: the chunk's seq within its writer attempt.
        offset: the record offset it stands at (its Durable Streams offset is
            ``format_offset(offset + 1)``: after it).
        outcome: ``appended`` (a new record), ``adopted`` (an earlier attempt's
            identical record stands for it) or ``retransmit`` (acknowledged
            before: a retried request).
    """

    seq: int
    offset: int
    outcome: Outcome


@dataclass(frozen=True)
class AppendResult:
    """The reply to one append.

    Attributes:
        acks: one per chunk, in request order (empty for anonymous appends,
            whose reply carries none).
        next_offset: the stream's next offset after the append.
        closed: the stream is closed.
        replayed: an ``Idempotency-Key`` replay: the first reply, nothing appended.
    """

    acks: tuple[Ack, ...]
    next_offset: str
    closed: bool = False
    replayed: bool = False


@dataclass(frozen=True)
class StreamHead:
    """What ``HEAD`` says of a stream."""

    content_type: str
    next_offset: str
    closed: bool


@dataclass(frozen=True)
class Record:
    """One record of a stream (``format=ndjson``).

    Attributes:
        offset: weir's record offset, dense from 0.
        next_offset: the offset to resume a read after this record.
        kind: ``data``, ``abort``, ``commit`` or ``close``.
        writer: the writer ("" for anonymous and producer appends, and ``close``).
        attempt: the writer's attempt (0: committed at append).
        seq: a data record's seq within its attempt.
        data: a data record's bytes. For a JSON stream, the value re-encoded
            compactly (see :attr:`value`).
        value: a JSON stream's data record, decoded; None otherwise.
        from_seq: an abort's first void seq: the writer's data with seq >=
            from_seq written by earlier attempts is void (from 0: all of it).
        count: a commit's count: the writer's data with seq < count is committed.
        voided: with ``apply_aborts``, on an abort or close, the offsets of the
            data records this reader already got that are now void.
    """

    offset: int
    next_offset: str
    kind: Literal["data", "abort", "commit", "close", "reopen"]
    writer: str = ""
    attempt: int = 0
    seq: int = 0
    data: bytes = b""
    value: Any = None
    from_seq: int = 0
    count: int = 0
    voided: tuple[int, ...] = ()

    @property
    def text(self) -> str:
        """The data as UTF-8 text."""
        return self.data.decode("utf-8")


@dataclass
class Run:
    """A run, as the runs API shows it (``GET /v1/runs/{id}``).

    Attributes:
        id, workflow, status: ``status`` is pending, running, completed, failed
            or cancelled.
        input, output: JSON values (``output`` once completed).
        error: a failed or cancelled run's error.
        created_at, updated_at, wake_at: times (``wake_at``: a parked run's wake-up).
        cancel_requested: a cancel was asked and the run has not ended yet.
        kind: ``world`` for a Vercel Workflow run on weir's World, else "".
        queue, queue_key, priority, dedupe: what the run was started with
            (:meth:`weir.Client.start`): the queue (a limiter) it waits in, its
            fair-share group there, its priority, its dedupe key; "" and 0 if none.
        queued: it waits in its queue, not admitted yet (its status pending).
        version: the application version it started on ("" if none); a
            worker of that version claims it (:meth:`Client.migrate_runs`).
        created: set by :meth:`weir.Client.start`: this call created the run
            (``201``) rather than finding it (``200``: by its key or id, or
            the queued or running run its dedupe key folded the start into).
        raw: the reply's JSON object, fields this client does not know included.
    """

    id: str
    workflow: str
    status: str
    input: Any = None
    output: Any = None
    error: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    wake_at: datetime | None = None
    cancel_requested: bool = False
    kind: str = ""
    queue: str = ""
    queue_key: str = ""
    priority: int = 0
    dedupe: str = ""
    queued: bool = False
    version: str = ""
    created: bool = False
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    #: The statuses a run never leaves.
    TERMINAL = frozenset({"completed", "failed", "cancelled"})

    @property
    def done(self) -> bool:
        """The run ended (completed, failed or cancelled)."""
        return self.status in self.TERMINAL

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Run:
        """Builds a run from the runs API's JSON object."""
        return cls(
            id=str(d.get("id", "")),
            workflow=str(d.get("workflow", "")),
            status=str(d.get("status", "")),
            input=d.get("input"),
            output=d.get("output"),
            error=str(d.get("error", "")),
            created_at=_time(d.get("created_at")),
            updated_at=_time(d.get("updated_at")),
            wake_at=_time(d.get("wake_at")),
            cancel_requested=bool(d.get("cancel_requested", False)),
            kind=str(d.get("kind", "")),
            queue=str(d.get("queue", "")),
            queue_key=str(d.get("queue_key", "")),
            priority=int(d.get("priority", 0)),
            dedupe=str(d.get("dedupe", "")),
            queued=bool(d.get("queued", False)),
            version=str(d.get("version", "")),
            raw=d,
        )


@dataclass(frozen=True)
class RunPage:
    """A page of runs, newest first; ``next_cursor`` is the ``before`` of the
    next (older) page, None on the last."""

    runs: tuple[Run, ...]
    next_cursor: str | None


@dataclass(frozen=True)
class Event:
    """One entry of a run's event log.

    Attributes:
        seq: dense from 1.
        type: run_started, step_started, step_completed, step_failed,
            sleep_scheduled, sleep_fired, hook_created, hook_received,
            hook_disposed, run_completed, run_failed, run_cancelled.
        op: the durable operation's position in the run; a step's stream writer
            is ``step/{op}``.
        name, attempt: the step's name and attempt; a hook event's ``name`` is
            the hook's token.
        data: a step's or the run's output, a ``hook_received``'s payload (JSON).
        error, final: a failure's message; ``final``: no more attempts.
        at, wake_at: when it happened; when a sleep fires or a failed step is retried.
    """

    seq: int
    type: str
    op: int = 0
    name: str = ""
    attempt: int = 0
    data: Any = None
    error: str = ""
    final: bool = False
    at: datetime | None = None
    wake_at: datetime | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Event:
        """Builds an event from the runs API's JSON object."""
        return cls(
            seq=int(d.get("seq", 0)),
            type=str(d.get("type", "")),
            op=int(d.get("op", 0)),
            name=str(d.get("name", "")),
            attempt=int(d.get("attempt", 0)),
            data=d.get("data"),
            error=str(d.get("error", "")),
            final=bool(d.get("final", False)),
            at=_time(d.get("at")),
            wake_at=_time(d.get("wake_at")),
        )


@dataclass(frozen=True)
class RunStream:
    """One stream of a run (``GET /v1/runs/{id}/streams``).

    Attributes:
        name: the stream's name in its run.
        path: where to read it: ``Client.read(path)`` (``runs/{id}/{name}``).
        content_type: its content type.
        next_offset: its record count (the record offset its next record gets).
        closed: it is closed.
        created_at: when it was created.
    """

    name: str
    path: str
    content_type: str
    next_offset: int
    closed: bool
    created_at: datetime | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunStream:
        """Builds a stream description from the runs API's JSON object."""
        return cls(
            name=str(d.get("name", "")),
            path=str(d.get("path", "")),
            content_type=str(d.get("content_type", "")),
            next_offset=int(d.get("next_offset", 0)),
            closed=bool(d.get("closed", False)),
            created_at=_time(d.get("created_at")),
        )


@dataclass(frozen=True)
class HookDelivery:
    """The reply to a delivery to a hook (``POST /v1/hooks/{token}``).

    Attributes:
        run_id: the run whose hook holds the token.
        op: the hook's operation in that run.
        seq: the ``hook_received`` event's seq in the run's log (the same on a
            duplicate: the first delivery's).
        count: the payloads the hook has received, this one included.
        duplicate: a delivery sent again with its idempotency key: answered
            with the first delivery's reply, and nothing was added.
        closed: the delivery closed the hook (``close=True``, or
            :meth:`weir.Client.close_hook`): it takes no more payloads.
    """

    run_id: str
    op: int
    seq: int
    count: int
    duplicate: bool = False
    closed: bool = False

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> HookDelivery:
        """Builds a delivery's reply from the server's JSON object."""
        return cls(
            run_id=str(d.get("run_id", "")),
            op=int(d.get("op", 0)),
            seq=int(d.get("seq", 0)),
            count=int(d.get("count", 0)),
            duplicate=bool(d.get("duplicate", False)),
            closed=bool(d.get("closed", False)),
        )


@dataclass(frozen=True)
class Hook:
    """One hook of a run (``GET /v1/runs/{id}/hooks``).

    Attributes:
        token: the name deliveries use (``Client.deliver_hook(token, ...)``).
        op: the hook's operation in the run.
        received: the payloads delivered to it so far.
        disposed: it takes no more payloads: the workflow or its sender
            closed it, or the run ended (a delivery to it is :class:`~weir.GoneError`).
        created_at: when the run created it (to the millisecond).
    """

    token: str
    op: int
    received: int
    disposed: bool
    created_at: datetime | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Hook:
        """Builds a hook's description from the runs API's JSON object."""
        return cls(
            token=str(d.get("token", "")),
            op=int(d.get("op", 0)),
            received=int(d.get("received", 0)),
            disposed=bool(d.get("disposed", False)),
            created_at=_time(d.get("created_at")),
        )


@dataclass(frozen=True)
class MessageSent:
    """The reply to a message sent to a run (``POST /v1/runs/{id}/messages/{topic}``).

    Attributes:
        run_id: the run it was sent to.
        topic: its topic.
        seq: its ``message_received`` event's seq in the run's log (the same
            on a duplicate: the first message's).
        duplicate: a message sent again with its idempotency key: answered
            with the first one's reply, and nothing was added.
    """

    run_id: str
    topic: str
    seq: int
    duplicate: bool = False

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MessageSent:
        """Builds a message's reply from the server's JSON object."""
        return cls(
            run_id=str(d.get("run_id", "")),
            topic=str(d.get("topic", "")),
            seq=int(d.get("seq", 0)),
            duplicate=bool(d.get("duplicate", False)),
        )


@dataclass(frozen=True)
class RunEvent:
    """A run event's latest value: what the workflow published under a key
    (``weir.SetEvent``; ``GET /v1/runs/{id}/events/{key}``).

    Attributes:
        key: the event's key.
        value: its latest value (JSON).
        seq: the ``event_set`` event that set it, in the run's log: pass it as
            ``after`` to wait for the next value.
        at: when it was set (to the millisecond).
        size: the value's bytes (0 if the server did not say).
        elided: in a run's state, a value over 4 KiB left out (``value`` is
            None): ``Client.get_event`` has it.
    """

    key: str
    value: Any
    seq: int
    at: datetime | None = None
    size: int = 0
    elided: bool = False

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunEvent:
        """Builds a run event from the runs API's JSON object."""
        return cls(
            key=str(d.get("key", "")),
            value=d.get("value"),
            seq=int(d.get("seq", 0)),
            at=_time(d.get("at")),
            size=int(d.get("size", 0)),
            elided=bool(d.get("elided", False)),
        )


@dataclass(frozen=True)
class TopicMessages:
    """What a run's log says of the messages of one topic.

    Attributes:
        topic: the topic.
        received: the messages sent to the run on it.
        taken, left: once the run ended, how many it took and how many it
            left untaken; -1 while it goes on.
    """

    topic: str
    received: int
    taken: int
    left: int

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicMessages:
        """Builds a topic's counts from the runs API's JSON object."""
        return cls(
            topic=str(d.get("topic", "")),
            received=int(d.get("received", 0)),
            taken=int(d.get("taken", -1)),
            left=int(d.get("left", -1)),
        )


@dataclass(frozen=True)
class RunState:
    """A run's events and messages (``GET /v1/runs/{id}/state``).

    Attributes:
        events: the run events it published, each key's latest value, by
            key: 1,000 at most, a value over 4 KiB elided.
        messages: the messages sent to it, by topic.
        more: keys follow the last of ``events`` (``next_after``).
        next_after: the last key listed, when ``more``.
    """

    events: tuple[RunEvent, ...]
    messages: tuple[TopicMessages, ...]
    more: bool = False
    next_after: str = ""

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunState:
        """Builds a run's state from the runs API's JSON object."""
        return cls(
            events=tuple(RunEvent.from_json(e) for e in d.get("events") or []),
            messages=tuple(TopicMessages.from_json(m) for m in d.get("messages") or []),
            more=bool(d.get("more", False)),
            next_after=str(d.get("next_after", "")),
        )


@dataclass(frozen=True)
class Migrated:
    """What :meth:`weir.Client.migrate_runs` moved (``POST /v1/runs/migrate``).

    Attributes:
        count: how many runs moved.
        migrated: the runs that moved, by id in the order of their bytes: all
            of them, or the first 1,000 (the server lists no more) if ``more``.
        more: more runs moved than ``migrated`` lists.
    """

    count: int
    migrated: tuple[str, ...]
    more: bool = False

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Migrated:
        """Builds a migration's reply from the runs API's JSON object."""
        migrated = tuple(str(x) for x in d.get("migrated") or [])
        return cls(count=int(d.get("count", len(migrated))), migrated=migrated, more=bool(d.get("more", False)))


def compact_json(value: Any) -> bytes:
    """Encodes a JSON value the compact way weir stores JSON chunks."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True)
class Limiter:
    """A limiter: the bounds the steps that take its slots keep to
    (``weir.WithLimiter`` in Go; ``GET /v1/limiters/{name}``), across every
    process on the server's store, and what it holds now.

    Attributes:
        name: its name.
        concurrency: slots held at once; 0: no bound.
        per_key: slots one key holds at once (a queued run's ``queue_key``, a
            tenant); 0: no bound.
        rate: slots taken per ``period``; 0: no bound.
        budget: cost (tokens) charged per ``period``; 0: no bound.
        period: the window of ``rate`` and ``budget``, a Go duration (``1m0s``); "" if none.
        held: slots held now.
        waiting: step attempts in its line now.
        taken: slots taken in its window.
        spent: cost charged in its window.
        queued: runs waiting in it as a queue (started with ``queue``, not
            admitted yet).
    """

    name: str
    concurrency: int = 0
    rate: int = 0
    budget: int = 0
    period: str = ""
    held: int = 0
    waiting: int = 0
    taken: int = 0
    spent: int = 0
    per_key: int = 0
    queued: int = 0

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Limiter:
        """Builds a limiter from the limiters API's JSON object."""
        st = d.get("state") or {}
        return cls(
            name=str(d.get("name", "")),
            concurrency=int(d.get("concurrency", 0)),
            rate=int(d.get("rate", 0)),
            budget=int(d.get("budget", 0)),
            period=str(d.get("period", "")),
            held=int(st.get("held", 0)),
            waiting=int(st.get("waiting", 0)),
            taken=int(st.get("taken", 0)),
            spent=int(st.get("spent", 0)),
            per_key=int(d.get("per_key", 0)),
            queued=int(st.get("queued", 0)),
        )


@dataclass(frozen=True)
class Schedule:
    """A schedule: a run of ``workflow`` at each tick of ``spec``
    (``GET /v1/schedules/{name}``), each tick's run named
    ``sched:<name>:<tick>`` however many workers run.

    Attributes:
        name: its name.
        workflow: the workflow each tick starts a run of.
        input: every run's input (any JSON value).
        spec: a cron expression (``0 9 * * MON-FRI``), a macro (``@daily``)
            or an interval (``@every 15m``).
        tz: the IANA time zone ``spec`` is read in; "" is UTC.
        overlap: ``skip``, ``buffer_one`` or ``allow``: what a tick does
            while the last tick's run is in flight.
        backfill: how late a tick may be and still start, a Go duration; ""
            is the default (a minute).
        paused: no tick starts while it is.
        next_due: when its next tick is due; None while paused.
        last_tick: the last tick that started a run.
        last_run: that run's id.
        started: ticks that started a run.
        skipped: ticks passed over (missed beyond the backfill, or
            overlapping).
    """

    name: str
    workflow: str
    spec: str
    input: Any = None
    tz: str = ""
    overlap: str = "skip"
    backfill: str = ""
    paused: bool = False
    next_due: datetime | None = None
    last_tick: datetime | None = None
    last_run: str = ""
    started: int = 0
    skipped: int = 0

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Schedule:
        """Builds a schedule from the schedules API's JSON object."""
        return cls(
            name=str(d.get("name", "")),
            workflow=str(d.get("workflow", "")),
            spec=str(d.get("spec", "")),
            input=d.get("input"),
            tz=str(d.get("tz", "")),
            overlap=str(d.get("overlap", "skip")),
            backfill=str(d.get("backfill", "")),
            paused=bool(d.get("paused", False)),
            next_due=_time(d.get("next_due")),
            last_tick=_time(d.get("last_tick")),
            last_run=str(d.get("last_run", "")),
            started=int(d.get("started", 0)),
            skipped=int(d.get("skipped", 0)),
        )
