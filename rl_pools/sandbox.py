"""Run untrusted Python programs in a bubblewrap sandbox and grade them against test cases.

Isolation (see docs/sandbox.md for what is and is not covered):

* ``bwrap --unshare-all``: new user, pid, net, ipc, uts and cgroup namespaces. The network
  namespace has only its own loopback (down), so nothing on the host, not even 127.0.0.1, is
  reachable. ``--die-with-parent`` + the pid namespace: when the sandbox's pid 1 dies the kernel
  kills every process in it, so nothing a program forks survives the run.
* Filesystem: read-only binds of ``/usr`` (and the ``/lib*``, ``/bin`` symlinks) plus the
  interpreter's install prefix when it lives outside ``/usr``; a fresh size-capped tmpfs ``/tmp``
  and a size-capped tmpfs working directory ``/work`` (the cwd, thrown away with the run); the
  program and harness files bound read-only under ``/sandbox``. No ``/etc``, ``/root``,
  ``/home``, project or data directories exist inside.
* Identity: bwrap itself runs as the unprivileged host uid 65534 (when we are root) and the
  program as uid/gid 65534 in its user namespace, with all capabilities dropped. This matters
  for ``RLIMIT_NPROC``: the kernel exempts processes whose *host* uid is root from it, so a
  fork bomb is only stopped when the host uid is not 0.
* Limits (``prlimit`` inside the sandbox, before the program starts): ``RLIMIT_AS`` (memory),
  ``RLIMIT_CPU`` (CPU seconds), ``RLIMIT_NPROC`` (processes/threads), ``RLIMIT_FSIZE`` (file
  size), ``RLIMIT_NOFILE`` and ``RLIMIT_CORE=0``. The parent enforces the wall-clock limit and
  the stdout/stderr caps and kills the whole process group on overrun.

Not done: no seccomp filter, no cgroup accounting (cgroup v1 is writable on our machines, but
rlimits were enough for the attack corpus in tests/rl_pools/test_sandbox_attacks.py).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from curation.errors import ConfigError, SluiceError

#: Every execution / test-run outcome. ``passed`` for a plain run means "exited 0".
STATUSES = (
    "passed",
    "failed",
    "timeout",
    "memory",
    "output_limit",
    "runtime_error",
    "sandbox_error",
)

SANDBOX_UID = 65534  # "nobody": the host uid bwrap runs as when we are root, and the uid inside
_SANDBOX_DIR = "/sandbox"  # read-only: program, harness, test files
_WORK_DIR = "/work"  # writable tmpfs, the cwd
_SETPRIV = "/usr/bin/setpriv"


class SandboxUnavailable(SluiceError):
    """The sandbox cannot run on this machine (bubblewrap or prlimit missing, namespaces off)."""


@dataclass
class SandboxConfig:
    """Limits and options for sandboxed execution. One config feeds the library and the CLI."""

    time_limit_s: float = field(
        default=5.0, metadata={"help": "wall-clock limit per execution (per test), seconds"}
    )
    cpu_limit_s: float | None = field(
        default=None,
        metadata={"help": "CPU-time limit per execution (RLIMIT_CPU); default ceil(time_limit_s)"},
    )
    memory_mb: int = field(
        default=512, metadata={"help": "address-space limit (RLIMIT_AS) of the program, MiB"}
    )
    max_processes: int = field(
        default=32, metadata={"help": "max processes+threads of the sandbox uid (RLIMIT_NPROC)"}
    )
    max_output_bytes: int = field(
        default=1 << 20,
        metadata={"help": "cap on captured stdout and on stderr, bytes each; more -> output_limit"},
    )
    max_file_mb: int = field(
        default=16, metadata={"help": "max size of a file the program writes (RLIMIT_FSIZE), MiB"}
    )
    tmpfs_mb: int = field(
        default=64, metadata={"help": "size of the writable /tmp and /work tmpfs, MiB each"}
    )
    max_open_files: int = field(default=64, metadata={"help": "RLIMIT_NOFILE"})
    total_time_limit_s: float | None = field(
        default=None,
        metadata={"help": "wall-clock budget for all tests of one program; None = no budget"},
    )
    stop_on_first_failure: bool = field(
        default=True, metadata={"help": "stop running a program's tests at the first non-pass"}
    )
    float_tolerance: float | None = field(
        default=None,
        metadata={"help": "compare numeric stdout tokens with this abs/rel tolerance; None=exact"},
    )
    python: str | None = field(
        default=None,
        metadata={"help": "interpreter run inside the sandbox; default /usr/bin/python3"},
    )
    bwrap: str = field(default="/usr/bin/bwrap", metadata={"help": "bubblewrap binary"})

    def __post_init__(self) -> None:
        for name in ("time_limit_s", "memory_mb", "max_processes", "max_output_bytes"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"SandboxConfig.{name} must be > 0, got {getattr(self, name)}")
        if self.cpu_limit_s is not None and self.cpu_limit_s <= 0:
            raise ConfigError(f"SandboxConfig.cpu_limit_s must be > 0, got {self.cpu_limit_s}")
        if self.memory_mb < 32:
            raise ConfigError(
                f"SandboxConfig.memory_mb={self.memory_mb} is too small for Python to start",
                hint="use at least 32 (MiB)",
            )
        if self.total_time_limit_s is not None and self.total_time_limit_s <= 0:
            raise ConfigError("SandboxConfig.total_time_limit_s must be > 0 or None")

    @property
    def effective_cpu_s(self) -> int:
        return int(math.ceil(self.cpu_limit_s or self.time_limit_s))

    def limits(self) -> dict[str, Any]:
        return {
            "time_limit_s": self.time_limit_s,
            "cpu_limit_s": self.effective_cpu_s,
            "memory_mb": self.memory_mb,
            "max_processes": self.max_processes,
            "max_output_bytes": self.max_output_bytes,
            "max_file_mb": self.max_file_mb,
            "tmpfs_mb": self.tmpfs_mb,
        }


@dataclass
class ExecutionResult:
    """One program execution in the sandbox."""

    status: str  # passed (exit 0) | timeout | memory | output_limit | runtime_error | sandbox_error
    exit_code: int | None
    stdout: str
    stderr: str
    wall_s: float
    reason: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    limits: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)


@dataclass
class TestCase:
    """A test: ``stdin`` (input -> expected stdout) or ``functional``.

    Functional tests come in two forms: ``output is None`` -> ``input`` is test code defining
    ``check(candidate)`` (HumanEval/LeetCodeDataset style); otherwise ``input`` is a Python
    call-argument list (``"nums = [2,7], target = 9"`` or ``"1, 2"``) and ``output`` a Python
    literal of the expected return value. ``entry_point`` is an expression evaluated in the
    solution's namespace (``"Solution().twoSum"`` or ``"add"``).
    """

    __test__ = False  # not a pytest class

    kind: str
    input: str
    output: str | None = None
    entry_point: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("stdin", "functional"):
            raise ConfigError(f"test kind must be 'stdin' or 'functional', got {self.kind!r}")
        if self.kind == "functional" and not self.entry_point:
            raise ConfigError("a functional test needs an entry_point (e.g. 'Solution().twoSum')")
        if self.kind == "stdin" and self.output is None:
            raise ConfigError("a stdin test needs an expected output")

    @classmethod
    def from_any(cls, t: TestCase | dict[str, Any]) -> TestCase:
        if isinstance(t, TestCase):
            return t
        return cls(
            kind=t.get("kind") or "stdin",
            input=t.get("input") or "",
            output=t.get("output"),
            entry_point=t.get("entry_point"),
        )


@dataclass
class TestOutcome:
    index: int
    status: str
    wall_s: float
    reason: str = ""
    expected: str | None = None
    got: str | None = None
    stderr: str = ""


@dataclass
class TestRunResult:
    """A program graded against its tests. ``status`` is ``passed`` only if every test passed."""

    status: str
    n_tests: int
    n_passed: int
    wall_s: float
    reason: str = ""
    failed_test: int | None = None
    expected: str | None = None
    got: str | None = None
    tests: list[TestOutcome] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)


# --------------------------------------------------------------------------------------------
# The sandbox itself
# --------------------------------------------------------------------------------------------


def _default_python() -> str:
    for cand in ("/usr/bin/python3",):
        if os.path.exists(cand):
            return cand
    import sys

    return os.path.realpath(sys.executable)


def check_available(config: SandboxConfig | None = None) -> None:
    """Raise :class:`SandboxUnavailable` naming the fix when the sandbox cannot run here."""
    cfg = config or SandboxConfig()
    if not (os.path.exists(cfg.bwrap) and os.access(cfg.bwrap, os.X_OK)):
        raise SandboxUnavailable(
            f"bubblewrap not found at {cfg.bwrap}",
            hint="install it: apt-get install bubblewrap (scripts/setup.sh does this)",
        )
    for tool in ("prlimit",) + (("setpriv",) if os.geteuid() == 0 else ()):
        if not os.path.exists(f"/usr/bin/{tool}"):
            raise SandboxUnavailable(
                f"{tool} not found in /usr/bin", hint="install it: apt-get install util-linux"
            )
    py = cfg.python or _default_python()
    if not os.path.exists(py):
        raise SandboxUnavailable(f"sandbox interpreter {py} does not exist", hint="set python=")


def _bwrap_argv(
    cfg: SandboxConfig, host_dir: str, argv: list[str], env: dict[str, str] | None = None
) -> list[str]:
    py = cfg.python or _default_python()
    args = [
        cfg.bwrap,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--ro-bind", "/usr", "/usr",
    ]  # fmt: skip
    for name in ("lib", "lib64", "lib32", "bin", "sbin"):
        p = Path("/") / name
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            args += ["--ro-bind", str(p), str(p)]
    # An interpreter installed outside /usr (pyenv, conda): bind its prefix read-only. It must be
    # readable by the sandbox uid (a prefix under /root is not: then use /usr/bin/python3).
    prefix = str(Path(os.path.realpath(py)).parent.parent)
    if not prefix.startswith("/usr"):
        args += ["--ro-bind", prefix, prefix]
    size = str(cfg.tmpfs_mb * 1024 * 1024)
    args += [
        "--proc", "/proc",
        "--dev", "/dev",
        "--size", size, "--tmpfs", "/tmp",
        "--size", size, "--tmpfs", _WORK_DIR,
        "--ro-bind", host_dir, _SANDBOX_DIR,
        "--chdir", _WORK_DIR,
        "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin",
        "--setenv", "HOME", _WORK_DIR,
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        "--setenv", "PYTHONHASHSEED", "0",
        *[a for k, v in (env or {}).items() for a in ("--setenv", k, v)],
        "--uid", str(SANDBOX_UID),
        "--gid", str(SANDBOX_UID),
        "--cap-drop", "ALL",
        "--",
        "/usr/bin/prlimit",
        f"--as={cfg.memory_mb * 1024 * 1024}",
        f"--cpu={cfg.effective_cpu_s}:{cfg.effective_cpu_s + 1}",
        f"--nproc={cfg.max_processes}",
        f"--fsize={cfg.max_file_mb * 1024 * 1024}",
        f"--nofile={cfg.max_open_files}",
        "--core=0",
        "--",
        py, "-s",
    ]  # fmt: skip
    return args + argv


def _run_bwrap(
    cfg: SandboxConfig,
    host_dir: str,
    argv: list[str],
    stdin_data: bytes,
    time_limit_s: float,
    env: dict[str, str] | None = None,
) -> ExecutionResult:
    """Start the sandbox, feed stdin, read capped stdout/stderr, enforce the wall clock."""
    cmd = _bwrap_argv(cfg, host_dir, argv, env)
    if os.geteuid() == 0:
        # Drop to the unprivileged host uid before bwrap (see the module docstring: RLIMIT_NPROC).
        # setpriv rather than Popen(user=...): Python only uses vfork without uid changes, and a
        # full fork of a large parent costs more than the extra exec.
        cmd = [
            _SETPRIV,
            f"--reuid={SANDBOX_UID}",
            f"--regid={SANDBOX_UID}",
            "--clear-groups",
            "--",
            *cmd,
        ]
    cap = cfg.max_output_bytes
    # stdin from an anonymous file: no writer thread, no pipe deadlock with huge input.
    stdin_f = tempfile.TemporaryFile()
    stdin_f.write(stdin_data)
    stdin_f.seek(0)
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=stdin_f,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # own process group: killpg reaches bwrap and its init
            close_fds=True,
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
        )
    except OSError as exc:
        stdin_f.close()
        return ExecutionResult(
            "sandbox_error", None, "", "", 0.0, reason=f"could not start bwrap: {exc}",
            limits=cfg.limits(),
        )  # fmt: skip
    stdin_f.close()

    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    over = {out_fd: False, err_fd: False}
    sel = selectors.DefaultSelector()
    for f in (proc.stdout, proc.stderr):
        os.set_blocking(f.fileno(), False)
        sel.register(f.fileno(), selectors.EVENT_READ)
    deadline = t0 + time_limit_s
    killed_for: str | None = None

    def kill() -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    open_fds = 2
    while open_fds:
        remaining = deadline - time.monotonic()
        if remaining <= 0 and killed_for is None:
            killed_for = "timeout"
            kill()
            deadline = time.monotonic() + 5.0  # grace to drain after the kill
            continue
        if remaining <= 0:
            break  # should not happen: the namespace is dead, pipes must be at EOF
        for key, _ in sel.select(timeout=min(remaining, 0.5)):
            fd = key.fd
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                sel.unregister(fd)
                open_fds -= 1
                continue
            buf = bufs[fd]
            room = cap - len(buf)
            if room > 0:
                buf += chunk[:room]
            if len(chunk) > room:
                over[fd] = True
                if killed_for is None:
                    killed_for = "output_limit"
                    kill()
                    deadline = time.monotonic() + 5.0
    sel.close()
    # Pipes closed. A program may have closed stdout/stderr and kept running: the wall clock
    # still applies to it.
    try:
        rc = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        killed_for = killed_for or "timeout"
        kill()
        rc = proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    # No kill after the reap: bwrap's pid (= the group id) may already belong to someone else.
    # Nothing can linger: bwrap's pid-1 child dies with bwrap (--die-with-parent), and the
    # kernel then kills every process of the sandbox's pid namespace.
    wall = time.monotonic() - t0
    res = ExecutionResult(
        status="passed",
        exit_code=rc,
        stdout=bytes(bufs[out_fd]).decode("utf-8", errors="replace"),
        stderr=bytes(bufs[err_fd]).decode("utf-8", errors="replace"),
        wall_s=round(wall, 4),
        stdout_truncated=over[out_fd],
        stderr_truncated=over[err_fd],
        limits=cfg.limits(),
    )
    _classify(res, rc, killed_for, cfg, time_limit_s)
    return res


_SIGNALS = {int(s): s.name for s in signal.Signals}


def _classify(
    res: ExecutionResult, rc: int, killed_for: str | None, cfg: SandboxConfig, tl: float
) -> None:
    if killed_for == "timeout":
        res.status, res.reason = "timeout", f"wall-clock limit {tl:g}s exceeded"
        return
    if killed_for == "output_limit":
        res.status = "output_limit"
        res.reason = f"output exceeded {cfg.max_output_bytes} bytes; captured output is truncated"
        return
    tail = res.stderr[-2000:]
    if rc == 0:
        return
    # bwrap reports a child killed by signal N as exit code 128+N.
    sig = rc - 128 if rc > 128 else (-rc if rc < 0 else None)
    if sig == signal.SIGXCPU:
        res.status, res.reason = "timeout", f"CPU-time limit {cfg.effective_cpu_s}s exceeded"
    elif "MemoryError" in tail or "Cannot allocate memory" in tail or "bad_alloc" in tail:
        res.status, res.reason = "memory", f"memory limit {cfg.memory_mb} MiB exceeded"
    elif sig == signal.SIGXFSZ or "File too large" in tail:  # Python ignores SIGXFSZ
        res.status, res.reason = "output_limit", f"file size limit {cfg.max_file_mb} MiB exceeded"
    elif rc == 1 and tail.startswith("bwrap:"):
        res.status, res.reason = "sandbox_error", tail.strip()[:500]
    elif sig in _SIGNALS:
        res.status, res.reason = "runtime_error", f"killed by {_SIGNALS[sig]}"
    else:
        last = tail.strip().splitlines()[-1] if tail.strip() else ""
        res.status, res.reason = "runtime_error", f"exit code {rc}" + (f": {last}" if last else "")


class _HostDir:
    """A host temp dir with the program files, bound read-only into the sandbox, then removed."""

    def __init__(self, files: dict[str, str]) -> None:
        self.path = tempfile.mkdtemp(prefix="sluice-sbx-")
        os.chmod(self.path, 0o755)  # readable by the sandbox uid
        for name, text in files.items():
            p = os.path.join(self.path, name)
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(p, 0o644)

    def __enter__(self) -> str:
        return self.path

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def execute(
    program: str,
    stdin: str | bytes = "",
    config: SandboxConfig | None = None,
    *,
    time_limit_s: float | None = None,
) -> ExecutionResult:
    """Run Python source ``program`` once in the sandbox with ``stdin``.

    ``status`` is ``passed`` when it exited 0 within the limits (its output is not judged here).
    """
    cfg = config or SandboxConfig()
    check_available(cfg)
    data = stdin.encode() if isinstance(stdin, str) else stdin
    with _HostDir({"prog.py": program}) as d:
        return _run_bwrap(
            cfg, d, [f"{_SANDBOX_DIR}/prog.py"], data, time_limit_s or cfg.time_limit_s
        )


# --------------------------------------------------------------------------------------------
# Grading
# --------------------------------------------------------------------------------------------


def normalize_output(text: str) -> list[str]:
    """Lines with trailing whitespace removed, trailing empty lines dropped (and \\r\\n -> \\n)."""
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def outputs_match(expected: str, got: str, float_tolerance: float | None = None) -> bool:
    """Exact match after :func:`normalize_output`; numeric tokens within ``float_tolerance``."""
    e, g = normalize_output(expected), normalize_output(got)
    if e == g:
        return True
    if float_tolerance is None or len(e) != len(g):
        return False
    for le, lg in zip(e, g, strict=True):
        te, tg = le.split(), lg.split()
        if len(te) != len(tg):
            return False
        for a, b in zip(te, tg, strict=True):
            if a == b:
                continue
            try:
                fa, fb = float(a), float(b)
            except ValueError:
                return False
            if not math.isclose(fa, fb, rel_tol=float_tolerance, abs_tol=float_tolerance):
                return False
    return True


# The functional-test harness. It runs the solution and the test inside the sandbox and prints
# a per-run random nonce as its very last act: a pass needs the nonce, so a solution that exits
# early (sys.exit(0), os._exit) or kills the interpreter can never pass. The nonce arrives in the
# environment and is removed before the solution runs. A solution that *deliberately* digs it out
# of /proc/self/environ could forge a pass; this harness defends against accidents, not malice.
_HARNESS = r"""
import json, os, sys
_nonce = os.environ.pop("SLUICE_NONCE", "")
def _main():
    spec = json.load(open("/sandbox/spec.json", encoding="utf-8"))
    ns = {"__name__": "solution", "__builtins__": __builtins__}
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    exec(compile(open("/sandbox/solution.py", encoding="utf-8").read(), "solution.py", "exec"), ns)
    candidate = eval(spec["entry_point"], ns)
    if spec["output"] is None:
        exec(compile(spec["input"], "test.py", "exec"), ns)
        if "check" not in ns:
            raise SystemExit("test code defines no check(candidate) function")
        ns["check"](candidate)
        got = None
        ok = True
    else:
        ns["_sluice_candidate"] = candidate
        got = eval("_sluice_candidate(" + spec["input"] + ")", ns)
        lit = {"null": None, "true": True, "false": False, "inf": float("inf")}
        expected = eval(spec["output"], dict(ns, **lit))
        ok = got == expected
        if not ok and isinstance(got, float) and isinstance(expected, (int, float)):
            ok = abs(got - expected) <= 1e-6 * max(1.0, abs(expected))
    sys.stdout.flush()
    print("\n" + _nonce + " " + json.dumps({"ok": bool(ok), "got": repr(got)[:2000]}), flush=True)
_main()
"""


def _grade_stdin(
    cfg: SandboxConfig, d: str, t: TestCase, idx: int, tl: float
) -> tuple[TestOutcome, ExecutionResult]:
    r = _run_bwrap(cfg, d, [f"{_SANDBOX_DIR}/solution.py"], t.input.encode(), tl)
    o = TestOutcome(idx, r.status, r.wall_s, r.reason, expected=t.output, got=r.stdout[:2000])
    o.stderr = r.stderr[-2000:]
    if r.status == "passed" and not outputs_match(t.output or "", r.stdout, cfg.float_tolerance):
        o.status, o.reason = "failed", "stdout differs from the expected output"
    return o, r


def _grade_functional(
    cfg: SandboxConfig, solution: str, t: TestCase, idx: int, tl: float
) -> tuple[TestOutcome, ExecutionResult]:
    nonce = secrets.token_hex(16)
    spec = {"entry_point": t.entry_point, "input": t.input, "output": t.output}
    files = {"solution.py": solution, "spec.json": json.dumps(spec), "harness.py": _HARNESS}
    with _HostDir(files) as d:
        argv = [f"{_SANDBOX_DIR}/harness.py"]
        r = _run_bwrap(cfg, d, argv, b"", tl, env={"SLUICE_NONCE": nonce})
    o = TestOutcome(idx, r.status, r.wall_s, r.reason, expected=t.output)
    o.stderr = r.stderr[-2000:]
    verdict = None
    for line in reversed(r.stdout.splitlines()):
        if line.startswith(nonce + " "):
            verdict = json.loads(line[len(nonce) + 1 :])
            break
    if verdict is not None:
        o.got = verdict["got"]
    if r.status == "passed":
        if verdict is None:
            o.status = "failed"
            o.reason = "the test harness did not finish (the solution exited early?)"
        elif not verdict["ok"]:
            o.status, o.reason = "failed", "returned value differs from the expected output"
    elif r.status == "runtime_error" and "AssertionError" in r.stderr[-2000:]:
        o.status, o.reason = "failed", "assertion failed in check(): " + r.reason
    return o, r


def run_tests(
    program: str,
    tests: Sequence[TestCase | dict[str, Any]],
    config: SandboxConfig | None = None,
) -> TestRunResult:
    """Grade ``program`` against ``tests``: each test is one fresh sandbox execution.

    ``status`` is ``passed`` only when every test ran and passed. Otherwise it is the status of the
    first non-passing test (``failed`` with its index, expected and got; ``timeout``; ``memory``;
    ``output_limit``; ``runtime_error``; ``sandbox_error``). With no tests the result is
    ``sandbox_error`` ("no tests"): an untested program never passes.
    """
    cfg = config or SandboxConfig()
    check_available(cfg)
    cases = [TestCase.from_any(t) for t in tests]
    t0 = time.monotonic()
    outcomes: list[TestOutcome] = []
    if not cases:
        return TestRunResult("sandbox_error", 0, 0, 0.0, reason="no tests to run")
    with _HostDir({"solution.py": program}) as d:
        for i, t in enumerate(cases):
            tl = cfg.time_limit_s
            if cfg.total_time_limit_s is not None:
                left = cfg.total_time_limit_s - (time.monotonic() - t0)
                if left <= 0:
                    outcomes.append(
                        TestOutcome(
                            i, "timeout", 0.0, "total time limit exhausted before this test"
                        )
                    )
                    break
                tl = min(tl, left)
            if t.kind == "stdin":
                o, _ = _grade_stdin(cfg, d, t, i, tl)
            else:
                o, _ = _grade_functional(cfg, program, t, i, tl)
            outcomes.append(o)
            if o.status != "passed" and cfg.stop_on_first_failure:
                break
    wall = round(time.monotonic() - t0, 4)
    n_passed = sum(o.status == "passed" for o in outcomes)
    first_bad = next((o for o in outcomes if o.status != "passed"), None)
    if first_bad is None and n_passed == len(cases):
        return TestRunResult("passed", len(cases), n_passed, wall, tests=outcomes)
    assert first_bad is not None
    return TestRunResult(
        first_bad.status,
        len(cases),
        n_passed,
        wall,
        reason=f"test {first_bad.index}: {first_bad.reason}",
        failed_test=first_bad.index,
        expected=first_bad.expected,
        got=first_bad.got,
        tests=outcomes,
    )


def run_many(
    jobs: Iterable[tuple[str, Sequence[TestCase | dict[str, Any]]]],
    config: SandboxConfig | None = None,
    *,
    workers: int = 2,
    on_done: Callable[[int, TestRunResult], None] | None = None,
) -> list[TestRunResult]:
    """Grade many (program, tests) pairs, ``workers`` sandboxes at a time, results in input order.

    Threads are enough here: each sandbox is a separate process tree and the threads only wait.
    """
    cfg = config or SandboxConfig()
    check_available(cfg)
    jobs = list(jobs)
    results: list[TestRunResult | None] = [None] * len(jobs)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
        futs = {ex.submit(run_tests, prog, tests, cfg): i for i, (prog, tests) in enumerate(jobs)}
        from concurrent.futures import as_completed

        for fut in as_completed(futs):
            i = futs[fut]
            results[i] = fut.result()
            if on_done:
                on_done(i, results[i])
    return [r for r in results if r is not None]
