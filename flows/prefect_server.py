"""The temporary Prefect server of a `sluice run` / `sluice demo` without ``PREFECT_API_URL``.

Prefect starts one by itself when no server is configured, but (Prefect 3.9) as a plain child
process: a ``kill -9`` of sluice (what the OOM killer does) left it running, holding
``prefect.db`` and about 230 MB, and its start-up wait (20 s by default) was too short on a
loaded machine. Sluice starts the same server (uvicorn + Prefect's app factory, UI off) itself:

* the server asks the kernel to SIGKILL it when sluice dies (``PR_SET_PDEATHSIG``), so there is
  no orphan whatever kills sluice;
* sluice waits for ``/api/health`` for ``SLUICE_PREFECT_STARTUP_TIMEOUT`` seconds (default 300),
  and a failure says what to do and where the server's log is;
* the flow talks to it through ``PREFECT_API_URL`` for the duration; the server is stopped after.

Hand-written because Prefect's ``SubprocessASGIServer`` offers no hook for the death signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from curation.errors import ConfigError, SluiceError

STARTUP_TIMEOUT_ENV = "SLUICE_PREFECT_STARTUP_TIMEOUT"
DEFAULT_STARTUP_TIMEOUT_S = 300.0

# Runs in the server process: die with the parent, then hand over to uvicorn.
_LAUNCH = r"""
import ctypes, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):  # the parent died before prctl took effect
    sys.exit(1)
import uvicorn
sys.argv = ["uvicorn", *sys.argv[2:]]
uvicorn.main()
"""


class PrefectServerError(SluiceError):
    """The temporary Prefect server did not start."""


def startup_timeout() -> float:
    raw = os.environ.get(STARTUP_TIMEOUT_ENV)
    if raw is None:
        return DEFAULT_STARTUP_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ConfigError(
            f"{STARTUP_TIMEOUT_ENV}={raw!r} is not a positive number of seconds",
            hint=f"e.g. {STARTUP_TIMEOUT_ENV}=600",
        )
    return value


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def temporary_server(
    log_dir: str | Path | None = None, *, schedules: bool = False
) -> Iterator[str | None]:
    """Start a temporary Prefect server unless ``PREFECT_API_URL`` is set; yield its API URL
    (``None`` when an existing server is used) with Prefect pointed at it.

    ``schedules``: run the server's background services too (the scheduler, late runs), so the
    schedules of deployments served against it create runs (`sluice serve`); Prefect's own
    temporary server runs without them, and a schedule served against it never fires."""
    if os.environ.get("PREFECT_API_URL"):
        yield None
        return
    timeout = startup_timeout()
    import prefect
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():  # a Prefect profile or a test harness names a server
        yield None
        return

    log_path = Path(log_dir or os.environ.get("PREFECT_HOME") or ".") / "temporary-server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_FINAL": "1"}
    if not schedules:
        env["PREFECT__SERVER_EPHEMERAL"] = "1"  # no background services: a run needs none
    proc = None
    url = ""
    with open(log_path, "ab") as log:
        for _ in range(3):  # another process may take the port between probe and bind
            port = _free_port()
            url = f"http://127.0.0.1:{port}/api"
            args = ["--app-dir", str(Path(prefect.__file__).parent.parent), "--factory"]
            args += ["prefect.server.api.server:create_app", "--host", "127.0.0.1"]
            args += ["--port", str(port), "--log-level", "error", "--lifespan", "on"]
            proc = subprocess.Popen(
                [sys.executable, "-c", _LAUNCH, str(os.getpid()), *args],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                # its own session: a Ctrl-C in the terminal reaches sluice, not the server,
                # which sluice stops once the run's last logs and states have reached it
                start_new_session=True,
            )
            if _wait_healthy(proc, url, timeout):
                break
            if proc.poll() is None:
                _stop(proc)
                raise PrefectServerError(
                    f"the temporary Prefect server did not pass its health check within "
                    f"{timeout:g} s (log: {log_path})",
                    hint=f"on a loaded machine set {STARTUP_TIMEOUT_ENV} higher (seconds), or "
                    "run `prefect server start` and set PREFECT_API_URL=http://127.0.0.1:4200/api",
                )
        else:
            raise PrefectServerError(
                f"the temporary Prefect server exited at start-up (code {proc.returncode}; "
                f"log: {log_path})",
                hint="read the log; or run `prefect server start` and set PREFECT_API_URL",
            )
    from prefect.settings import temporary_settings

    try:
        with temporary_settings(updates={PREFECT_API_URL: url}):
            os.environ["PREFECT_API_URL"] = url  # subprocesses (Ray workers) use it too
            try:
                yield url
            finally:
                _drain_prefect_workers()  # logs and events reach the server before it stops
                os.environ.pop("PREFECT_API_URL", None)
    finally:
        _stop(proc)


def _drain_prefect_workers() -> None:
    import importlib

    for module, name in (
        ("prefect.logging.handlers", "APILogWorker"),
        ("prefect.events.worker", "EventsWorker"),
    ):
        with contextlib.suppress(Exception):
            getattr(importlib.import_module(module), name).drain_all(timeout=30)


def _wait_healthy(proc: subprocess.Popen, url: str, timeout: float) -> bool:
    """True once ``/health`` answers 200; False when the process exits or time runs out."""
    import httpx

    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=5.0) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            try:
                if client.get(f"{url}/health").status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
    return False


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
