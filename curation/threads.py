"""Threads that run in the context of the code that starts them.

A thread starts with an empty :mod:`contextvars` context, and ``concurrent.futures`` pools do
not copy the submitter's either. Prefect keeps its settings (a temporary server's API URL) and
the flow and task run contexts in ContextVars, so a callable a flow handed to the library (a
run logger's method, a progress whose ``print`` Prefect sends to the run's log) called from a
bare thread either started a stray second temporary Prefect server or wrote to stderr alone,
never to the run's log. The library does not import Prefect: every thread it starts that may
call such a callable is made here, under a copy of the starter's context.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any


def context_thread(
    target: Callable[..., Any],
    *,
    args: tuple[Any, ...] = (),
    name: str | None = None,
    daemon: bool | None = None,
) -> threading.Thread:
    """A (not yet started) thread running ``target(*args)`` in a copy of the calling thread's
    context, taken now. One copy per thread: a context runs in one thread at a time."""
    ctx = contextvars.copy_context()
    return threading.Thread(target=ctx.run, args=(target, *args), name=name, daemon=daemon)


__all__ = ["context_thread"]
