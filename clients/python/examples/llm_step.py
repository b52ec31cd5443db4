"""A step that streams LLM tokens, fails halfway, is retried, and is seen once.

Run it against a weir server (``weir server`` listens on 127.0.0.1:4437)::

    WEIR_URL=http://127.0.0.1:4437 WEIR_TOKEN=… python3 examples/llm_step.py
"""

# snippet:llm-step (README.md shows this file from here on)
import threading
import time
import uuid

import weir

ANSWER = ["Exactly", "-once", " means", " each", " token", " reaches", " the", " reader", " once", "."]


class ModelDropped(Exception):
    """The model's connection dropped mid-answer (the step fails)."""


def llm_tokens(attempt: int):
    """A stand-in for a streaming LLM call: a token every 20 ms; attempt 1
    drops after 4 tokens."""
    for i, token in enumerate(ANSWER):
        time.sleep(0.02)
        if attempt == 1 and i == 4:
            raise ModelDropped("the model's stream dropped")
        yield token


def step(client: weir.Client, stream: str, step_id: str, attempt: int) -> None:
    """One attempt of the step: stream every token, commit on success.

    The writer id is the step's, the same on every attempt; the attempt grows.
    On an exception the ``with`` block leaves the attempt open: the next
    attempt re-sends the same tokens, which the server *adopts* (no new
    record), and what it writes beyond them is new.
    """
    w = client.writer(stream, writer=step_id, attempt=attempt, content_type="text/plain", linger=0.01)
    try:
        with w:
            for token in llm_tokens(attempt):
                w.write(token)
    finally:
        print(f"attempt {attempt}: {dict(w.outcomes)}")  # appended, adopted, retransmit


def main() -> None:
    client = weir.Client()  # $WEIR_URL (default http://127.0.0.1:4437) and $WEIR_TOKEN
    stream = f"examples/chat-{uuid.uuid4().hex[:8]}"
    client.create_stream(stream, "text/plain")

    # A reader following the live view while the step runs and is retried.
    seen: list[str] = []
    reader = client.read(stream, view="live", live="sse")
    follower = threading.Thread(target=lambda: seen.extend(r.text for r in reader if r.kind == "data"))
    follower.start()

    for attempt in (1, 2, 3):  # the retry loop a workflow engine would run
        try:
            step(client, stream, "answer-42", attempt)
            break
        except ModelDropped as e:
            print(f"attempt {attempt} failed: {e}; retrying")

    client.close_stream(stream)  # the run is over: followers stop
    follower.join(timeout=30)

    committed = "".join(r.text for r in client.read(stream) if r.kind == "data")
    print("live reader saw:", "".join(seen))
    print("committed view: ", committed)
    assert "".join(seen) == committed == "".join(ANSWER), "each token once"
    client.delete_stream(stream)


if __name__ == "__main__":
    main()
# end snippet
