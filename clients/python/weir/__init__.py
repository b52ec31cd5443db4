"""weir: a Python client of weir server, the durable workflow engine whose
streams are exactly-once.

Standard library only. Write a stream exactly once, read it back, start and
watch runs, deliver payloads to their hooks, send them messages and read the
events they publish::

    import weir

    client = weir.Client("http://127.0.0.1:4437", token="…")
    with client.writer("chat/42", writer="answer-42", attempt=1, content_type="text/plain") as w:
        w.write("Hello", ", world")
    for rec in client.read("chat/42"):
        print(rec.text, end="")

Every error reply raises the class of its ``Weir-Error`` code
(:class:`FencedError`, :class:`GapError`, …; all are :class:`WeirError`).
See ``clients/python/README.md`` and weir's ``docs/protocol.md``.
"""

from ._version import __version__
from .client import MAX_EVENT_WAIT, MAX_HOOK_PAYLOAD_BYTES, MAX_MESSAGE_BYTES, Client
from . import errors
from .errors import *  # noqa: F403: one class per wire code
from .errors import CODES, error_from_reply
from .reader import Reader, Voids
from .types import (
    NOW,
    START,
    Ack,
    AppendResult,
    Event,
    Hook,
    HookDelivery,
    Limiter,
    MessageSent,
    Migrated,
    Schedule,
    Record,
    Run,
    RunEvent,
    RunPage,
    RunState,
    RunStream,
    StreamHead,
    TopicMessages,
    format_offset,
    parse_offset,
)
from .writer import MAX_CHUNK_BYTES, MAX_REQUEST_CHUNKS, Writer

__all__ = [
    "__version__",
    "Client",
    "Writer",
    "Reader",
    "Voids",
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
    "Limiter",
    "Schedule",
    "MessageSent",
    "Migrated",
    "RunEvent",
    "RunState",
    "TopicMessages",
    "START",
    "NOW",
    "MAX_CHUNK_BYTES",
    "MAX_REQUEST_CHUNKS",
    "MAX_HOOK_PAYLOAD_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_EVENT_WAIT",
    "CODES",
    "format_offset",
    "parse_offset",
]
# Every error class, and error_from_reply (a form type checkers follow).
__all__ += errors.__all__
