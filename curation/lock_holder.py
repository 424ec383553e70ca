"""Who holds an ``fcntl`` lock file: the holder writes its pid and command line into the file it
locks, so a process that finds it taken can name it ("waiting for process 123 (sluice ...)").

Used by every lock a ``sluice`` command may wait on (the sample store's writer lock, the
embedding cache's per-model prepare lock)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether process ``pid`` of this host still runs (another user's counts as running): the
    test every leftover named by its writer's pid (a lock record, a temporary file) goes
    through before it is removed."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def host_tag() -> str:
    """This host's name as one token of a file name (``[A-Za-z0-9_]`` only): the ``<host>``
    of the ``<host>-<pid>`` a writer puts in its temporary files, so a later process of the
    same host can tell with :func:`alive` whether that writer is gone."""
    import re
    import socket

    return re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())


def command_line() -> str:
    """This process's command line, shortened (``sluice sft generate amc@...``)."""
    prog = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    head = {"sluice": "sluice", "cli.py": "sluice", "-c": "python -c"}.get(prog, prog)
    text = " ".join([head, *sys.argv[1:]])
    return text if len(text) <= 80 else text[:77] + "..."


def lock_holder(fd: int) -> str:
    """'process PID (COMMAND)' as the process holding the lock file ``fd`` recorded it."""
    try:
        rec = json.loads(os.pread(fd, 4096, 0) or b"{}")
        pid, cmd = int(rec["pid"]), str(rec.get("command") or "")
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"
    return f"process {pid}" + (f" ({cmd})" if cmd else "")


def record_holder(fd: int) -> None:
    """Write this process into the lock file ``fd`` it now holds."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "command": command_line()}).encode(), 0)


def clear_holder(fd: int) -> None:
    """Empty the lock file ``fd`` before letting it go: nobody holds it then."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
