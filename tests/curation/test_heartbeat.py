"""The progress clock's background lines run in the context of the code that started it."""

from __future__ import annotations

import contextvars
import threading

from curation.heartbeat import LineClock

WHERE = contextvars.ContextVar("WHERE", default="no context")


def test_background_lines_see_the_starting_context():
    # Prefect keeps its settings (the temporary server's API URL) and the run context in
    # ContextVars: a line written from a bare thread saw none of them, so its run logger
    # started a second, stray temporary server and the line never reached the flow's log
    seen: list[str] = []
    written = threading.Event()

    def write(now: float) -> None:
        seen.append(WHERE.get())
        written.set()

    token = WHERE.set("the flow's context")
    try:
        clock = LineClock(0.05, write, name="test-clock")
    finally:
        WHERE.reset(token)
    try:
        assert written.wait(5), "the clock wrote no line from its thread"
    finally:
        clock.stop()
    assert seen and set(seen) == {"the flow's context"}
