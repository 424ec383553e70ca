"""Run untrusted Python programs in a bubblewrap sandbox and grade them against test cases.

Isolation (see docs/sandbox.md for what is and is not covered):

* ``bwrap --unshare-all``: new user, pid, net, ipc, uts and cgroup namespaces. The network
  namespace has only its own loopback (down), so nothing on the host, not even 127.0.0.1, is
  reachable.
* Ending a run: bwrap's ``--info-fd`` reports the host pid of the sandbox's pid 1; the parent
  holds a pidfd on it and, when the run ends for any reason, SIGKILLs it and waits until it has
  exited. The kernel kills every process of a pid namespace when its pid 1 dies and pid 1 only
  finishes exiting once the namespace is empty, so ``execute`` returns after every process of
  the run is gone. ``--die-with-parent`` stays as a second line (if the parent itself is killed),
  but is not relied on: a process in the sandbox could clear pid 1's parent-death signal.
* seccomp (``bwrap --seccomp FD``, a filter compiled by libseccomp through its ``pyseccomp``
  bindings): ``ptrace``, ``process_vm_*``, new namespaces (``unshare``, ``setns``, ``clone``
  with namespace flags, ``clone3``), mounts, kernel modules, BPF, perf, keyrings, ``io_uring``,
  ``userfaultfd`` and a few more fail with EPERM/ENOSYS; other architectures' syscall ABIs
  (i386 ``int 0x80``, x32) kill the process.
* Filesystem: read-only binds of ``/usr`` (and the ``/lib*``, ``/bin`` symlinks) plus the
  interpreter's install prefix when it lives outside ``/usr``; a fresh size-capped tmpfs ``/tmp``
  and a size-capped tmpfs working directory ``/work`` (the cwd, thrown away with the run); the
  program and harness files bound read-only under ``/sandbox``; bwrap's minimal ``/dev``
  remounted read-only, with a size-capped ``/dev/shm``. No ``/etc``, ``/root``, ``/home``,
  project or data directories exist inside.
* Identity: bwrap itself runs as the unprivileged host uid 65534 (when we are root) and the
  program as uid/gid 65534 in its user namespace, with all capabilities dropped. This matters
  for ``RLIMIT_NPROC``: the kernel exempts processes whose *host* uid is root from it, so a
  fork bomb is only stopped when the host uid is not 0.
* Limits (``prlimit`` inside the sandbox, before the program starts): ``RLIMIT_AS`` (memory),
  ``RLIMIT_CPU`` (CPU seconds), ``RLIMIT_NPROC`` (processes/threads), ``RLIMIT_FSIZE`` (file
  size), ``RLIMIT_NOFILE`` and ``RLIMIT_CORE=0``. The parent enforces the wall-clock limit and
  the stdout/stderr caps.
* The whole run (``cgroups="auto"``, where this process may make cgroups below its own; see
  :mod:`rl_pools.sandbox_cgroups`): each execution runs in a new cgroup with ``memory_mb`` as the
  memory of everything the run holds together (all processes, tmpfs and ``/dev/shm`` pages,
  kernel memory; swap does not add to it) and ``max_processes`` (+1 for bwrap) as its task
  count. The child joins it before it execs ``setpriv``/``bwrap``, so no code of the program
  runs outside it. The OOM killer's kill in it ends the run as ``memory``; the cgroup is read
  (peak memory, OOM kills: ``ExecutionResult.cgroup``) and removed once every process is gone.
  ``cgroups="require"`` makes a machine without them :class:`SandboxUnavailable`; ``"off"``
  leaves the rlimits alone, as before. Rlimits alone let one run hold ``max_processes x
  memory_mb`` (16 GiB by default) plus its tmpfs pages.
* The run's CPU (``cpu_cores``, 1 by default), where the cgroup's ``cpu`` controller is there
  too: a CFS quota of that many cores for all its processes together. ``RLIMIT_CPU`` is per
  process, so without it a program that forks busy children takes every core for its whole
  wall-clock limit and the runs beside it time out. Where the controller is missing the run
  goes on without the cap and ``ExecutionResult.cgroup`` says why (``cpu_reason``).

Not done: no I/O bandwidth limit per run, and no whole-run cap where cgroups are not usable.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import json
import math
import os
import secrets
import select
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
from rl_pools.sandbox_cgroups import (
    CGROUP_MODES,
    JOIN_EXIT,
    JOIN_MESSAGE,
    JOIN_SCRIPT,
    JOIN_SHELL,
    RunCgroup,
)
from rl_pools.sandbox_cgroups import DEFAULT_ROOT as DEFAULT_CGROUP_ROOT
from rl_pools.sandbox_cgroups import PIDS_OVERHEAD as _PIDS_OVERHEAD
from rl_pools.sandbox_cgroups import support as _cgroup_support
from rl_pools.sandbox_cgroups import sweep as _cgroup_sweep

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
_BASH = "/usr/bin/bash"


_MAX_SECONDS = 86400  # one day; larger limits overflow poll() and select()
_MAX_MB = 1 << 30  # 1 PiB, far below what prlimit and bwrap --size can parse
_MAX_COUNT = 1 << 40


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
    # One memory figure for the run, as a judge's "memory limit 256 MB" is meant: each process's
    # address space (RLIMIT_AS) and, where cgroups are in force, the sum of everything the run
    # holds. A single-process program is held by RLIMIT_AS first (its address space is larger
    # than what it keeps resident), so it is limited as before; what changes is that forking
    # more processes, or filling /work, /tmp and /dev/shm, no longer multiplies the figure. A
    # separate whole-run field would let a config say 512 MiB and still mean 16 GiB.
    memory_mb: int = field(
        default=512,
        metadata={
            "help": "memory limit, MiB: each process's address space (RLIMIT_AS) and, where "
            "cgroups are in force, all the run holds together (every process's memory, its "
            "tmpfs and /dev/shm files, kernel memory); swap does not add to it"
        },
    )
    max_processes: int = field(
        default=32,
        metadata={
            "help": "max processes+threads: RLIMIT_NPROC of the sandbox uid and, where cgroups "
            "are in force, the run's pids.max (plus 1: bwrap itself is in the run's cgroup)"
        },
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
    cgroups: str = field(
        default="auto",
        metadata={
            "help": "a cgroup per run capping the whole run's memory (memory_mb) and tasks "
            "(max_processes): auto (when this machine allows it, else rlimits only), require "
            "(SandboxUnavailable where it does not), off"
        },
    )
    cpu_cores: float | None = field(
        default=1.0,
        metadata={
            "help": "CPU of the whole run, in cores (a cgroup CPU quota for all its processes "
            "together), where cgroups with the cpu controller are in force; None = uncapped"
        },
    )
    cgroup_root: str = field(
        default=DEFAULT_CGROUP_ROOT,
        metadata={"help": "where the cgroup hierarchies are mounted (only mounts under it count)"},
    )

    def __post_init__(self) -> None:
        if self.cgroups not in CGROUP_MODES:
            raise ConfigError(
                f"SandboxConfig.cgroups must be one of {', '.join(CGROUP_MODES)}, "
                f"got {self.cgroups!r}",
                hint="auto (use cgroups when usable), require or off",
            )
        if not (isinstance(self.cgroup_root, str) and os.path.isabs(self.cgroup_root)):
            raise ConfigError(
                f"SandboxConfig.cgroup_root must be an absolute path, got {self.cgroup_root!r}",
                hint=f"the default is {DEFAULT_CGROUP_ROOT}",
            )
        for name in ("time_limit_s", "memory_mb", "max_processes", "max_output_bytes"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"SandboxConfig.{name} must be > 0, got {getattr(self, name)}")
        # NaN compares false with everything (no limit at all); inf overflows the rlimits
        for name in ("time_limit_s", "cpu_limit_s", "total_time_limit_s"):
            v = getattr(self, name)
            if v is not None and not math.isfinite(v):
                raise ConfigError(f"SandboxConfig.{name} must be a finite number, got {v}",
                                  hint="e.g. 5 (seconds)")  # fmt: skip
            if v is not None and v > _MAX_SECONDS:  # a huge one overflowed poll()/select()
                raise ConfigError(
                    f"SandboxConfig.{name} must be at most {_MAX_SECONDS} (one day), got {v:g}",
                    hint="e.g. 5 (seconds)",
                )
        # prlimit cannot parse limits past 2**64 bytes: a huge one failed inside the sandbox and
        # was reported as the program's runtime_error
        for name in ("memory_mb", "max_file_mb", "tmpfs_mb"):
            if getattr(self, name) > _MAX_MB:
                raise ConfigError(
                    f"SandboxConfig.{name} must be at most {_MAX_MB} (MiB), "
                    f"got {getattr(self, name)}"
                )
        for name in ("max_processes", "max_open_files", "max_output_bytes"):
            if getattr(self, name) > _MAX_COUNT:
                raise ConfigError(
                    f"SandboxConfig.{name} must be at most {_MAX_COUNT}, got {getattr(self, name)}"
                )
        if self.cpu_cores is not None and not (
            isinstance(self.cpu_cores, (int, float))
            and math.isfinite(self.cpu_cores)
            and 0.01 <= self.cpu_cores <= 4096
        ):
            raise ConfigError(
                f"SandboxConfig.cpu_cores must be a number of cores from 0.01 to 4096, "
                f"got {self.cpu_cores!r}",
                hint="e.g. 1 (one core for the whole run), or None for no CPU cap",
            )
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
            "cpu_cores": self.cpu_cores,
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
    # The run's cgroup: {"in_force": True, "version": "v1", "memory_limit_bytes", "swap_capped",
    # "pids_max", "memory_peak_bytes", "oom_kills", ...} or {"in_force": False, "reason": ...}
    cgroup: dict[str, Any] = field(default_factory=dict)

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
        for name in ("input", "output", "entry_point"):
            v = getattr(self, name)
            if not (isinstance(v, str) or (v is None and name != "input")):
                raise ConfigError(
                    f"test {name} must be text, got {type(v).__name__} {str(v)[:50]!r}",
                    hint='write test inputs and outputs as strings (e.g. "3\\n", not 3)',
                )
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
    for tool in ("prlimit", "bash") + (("setpriv",) if os.geteuid() == 0 else ()):
        if not os.path.exists(f"/usr/bin/{tool}"):
            raise SandboxUnavailable(
                f"{tool} not found in /usr/bin", hint="install it: apt-get install util-linux"
            )
    py = cfg.python or _default_python()
    if not os.path.exists(py):
        raise SandboxUnavailable(f"sandbox interpreter {py} does not exist", hint="set python=")
    seccomp_filter()  # raises SandboxUnavailable when libseccomp cannot compile the filter
    host_dir_base()  # raises SandboxUnavailable when bwrap could not reach the program files
    if cfg.cgroups == "require":
        sup = _cgroup_support(cfg.cgroup_root)
        if not sup.usable:
            raise SandboxUnavailable(
                f"SandboxConfig.cgroups='require' but per-run cgroups are not usable here: "
                f"{sup.reason}",
                hint=sup.hint,
            )


def _usable_cgroups(cfg: SandboxConfig) -> tuple[Any, str]:
    """(this machine's cgroup support for ``cfg``, "") when its runs get their own cgroup, else
    (None, why not): the one answer of :func:`cgroup_status` and of each run."""
    if cfg.cgroups == "off":
        return None, "SandboxConfig.cgroups='off'"
    sup = _cgroup_support(cfg.cgroup_root)
    return (sup, "") if sup.usable else (None, sup.reason)


def cgroup_status(config: SandboxConfig | None = None) -> dict[str, Any]:
    """Whether runs under ``config`` get their own cgroup on this machine, and why not."""
    cfg = config or SandboxConfig()
    sup, why_not = _usable_cgroups(cfg)
    if sup is None:
        return {"mode": cfg.cgroups, "in_force": False, "reason": why_not}
    out = {"mode": cfg.cgroups, "in_force": True, "version": sup.label,
           "cgroups_below": [h.parent for h in sup.hierarchies]}  # fmt: skip
    out.update(_cpu_record(cfg, sup))
    return out


def _cpu_record(cfg: SandboxConfig, sup: Any) -> dict[str, Any]:
    """Whether runs under ``cfg`` get a CPU cap (``cpu_max_cores``), and why not."""
    if cfg.cpu_cores is None:
        return {"cpu_max_cores": None, "cpu_reason": "SandboxConfig.cpu_cores=None"}
    if not sup.cpu:
        return {"cpu_max_cores": None, "cpu_reason": sup.cpu_reason}
    return {"cpu_max_cores": cfg.cpu_cores}


# System calls a sandboxed program never needs and an escape often does. They fail with EPERM
# (the program sees an ordinary error, not a crash). The list follows Docker's default profile,
# which is an allow-list; a deny-list is enough here because every other layer (user namespace,
# no capabilities, no devices, read-only mounts) still applies to what remains allowed.
_SECCOMP_DENY = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "unshare", "setns",
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "add_key", "request_key", "keyctl", "open_by_handle_at",
    "name_to_handle_at", "reboot", "swapon", "swapoff", "acct", "quotactl", "syslog",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "personality", "vhangup",
    "iopl", "ioperm", "lookup_dcookie", "fanotify_init", "uselib", "ustat", "sysfs",
    "_sysctl", "nfsservctl", "get_kernel_syms", "query_module", "create_module",
    # Memory that RLIMIT_AS does not count: memfd files (RLIMIT_FSIZE x RLIMIT_NOFILE per
    # process), System V shared memory (a segment outlives shmdt() in the IPC namespace) and
    # System V message queues (kernel memory per queue). POSIX shm stays: /dev/shm is capped.
    "memfd_create", "memfd_secret", "shmget", "msgget",
    # Limits the kernel counts per host uid across every user namespace, so one run could use
    # them up for all concurrent sandboxes (all uid 65534): inotify instances (128 by default)
    # and the POSIX message-queue budget (RLIMIT_MSGQUEUE of bwrap's uid, not the program's).
    "inotify_init", "inotify_init1", "mq_open",
)  # fmt: skip
# clone() flags that create namespaces (linux/sched.h): a nested user namespace would give the
# program capabilities over fresh mounts, e.g. an uncapped tmpfs.
_CLONE_NS_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
    0x00000080,  # CLONE_NEWTIME
)
_TIOCSTI = 0x5412  # push bytes into a terminal's input queue


@functools.lru_cache(maxsize=1)
def seccomp_filter() -> bytes:
    """The sandbox's seccomp program as compiled BPF (what ``bwrap --seccomp`` reads).

    Compiled by libseccomp (through the ``pyseccomp`` ctypes bindings), never hand-assembled:
    libseccomp also adds the architecture check, so i386 (``int 0x80``) and x32 system calls,
    which would bypass a filter keyed on x86_64 numbers, kill the process.
    """
    try:
        import pyseccomp as sc
    except (ImportError, OSError, AttributeError) as exc:  # OSError: libseccomp.so missing
        raise SandboxUnavailable(
            f"libseccomp's Python bindings are not usable: {exc}",
            hint="pip install pyseccomp and apt-get install libseccomp2 (scripts/setup.sh does both)",
        ) from None
    f = sc.SyscallFilter(sc.ALLOW)
    deny = sc.ERRNO(errno.EPERM)
    for name in _SECCOMP_DENY:
        nr = sc.resolve_syscall(sc.Arch.NATIVE, name)
        if nr < 0:  # not a syscall on this architecture (or a libseccomp pseudo-syscall)
            continue
        f.add_rule(deny, nr)
    for flag in _CLONE_NS_FLAGS:
        f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory, which seccomp cannot read: ENOSYS makes glibc fall back
    # to clone(), which the rules above do check (Docker's default profile does the same).
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    f.add_rule(deny, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, _TIOCSTI))
    with tempfile.TemporaryFile() as t:
        f.export_bpf(t)
        t.seek(0)
        return t.read()


def _bwrap_argv(
    cfg: SandboxConfig,
    host_dir: str,
    argv: list[str],
    env: dict[str, str] | None = None,
    *,
    info_fd: int,
    seccomp_fd: int,
    stderr_fd: int,
) -> list[str]:
    py = cfg.python or _default_python()
    args = [
        cfg.bwrap,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--info-fd", str(info_fd),
        "--seccomp", str(seccomp_fd),
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
        # pid 1 is bwrap's init: it runs before prlimit (no RLIMIT_AS/NPROC/CPU) as the
        # program's uid, so /proc/1/mem let the program write code into it and escape every
        # limit. Hide /proc/1 behind an empty read-only tmpfs.
        "--size", "4096", "--tmpfs", "/proc/1", "--remount-ro", "/proc/1",
        # bwrap's minimal /dev is a tmpfs with no size cap: remount it read-only, with a capped
        # tmpfs for /dev/shm (POSIX shared memory, multiprocessing's semaphores).
        "--dev", "/dev",
        "--size", size, "--tmpfs", "/dev/shm",
        "--remount-ro", "/dev",
        "--size", size, "--tmpfs", "/tmp",
        "--size", size, "--tmpfs", _WORK_DIR,
        "--ro-bind", host_dir, _SANDBOX_DIR,
        # bwrap's new root is a tmpfs with no size cap either: once every mount point exists,
        # make it read-only (the capped tmpfs mounts above keep their own, writable flags).
        "--remount-ro", "/",
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
        # The program's stderr is its own pipe (stderr_fd), not bwrap's: a program could
        # otherwise print a "bwrap: ..." line and be reported sandbox_error, which rewards leave
        # out. bash, not sh: dash only redirects fds 0-9.
        _BASH, "-c", f'exec 2>&{stderr_fd} {stderr_fd}>&-; exec "$0" "$@"',
        py, "-s",
    ]  # fmt: skip
    return args + argv


def _readable(fd: int, timeout_s: float) -> bool:
    """poll(), not select(): works for descriptors above FD_SETSIZE in busy processes."""
    p = select.poll()
    p.register(fd, select.POLLIN)
    return bool(p.poll(max(0, int(timeout_s * 1000))))


class _Namespace:
    """The sandbox's pid 1, held by a pidfd (no pid-reuse race), from bwrap's ``--info-fd``."""

    def __init__(self, info_r: int, bwrap_pid: int, deadline: float) -> None:
        self.pidfd: int | None = None
        self.error = ""
        buf = b""
        dec = json.JSONDecoder()
        while True:  # bwrap writes {"child-pid": N, ...} once the namespace exists
            left = deadline - time.monotonic()
            if left <= 0 or not _readable(info_r, left):
                self.error = "bwrap did not report its child pid in time"
                return
            chunk = os.read(info_r, 4096)
            if not chunk:
                return  # bwrap failed before creating the namespace: its stderr says why
            buf += chunk
            try:
                info, _ = dec.raw_decode(buf.decode())
                break
            except ValueError:
                continue
        pid = int(info["child-pid"])
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return  # already gone with its whole namespace
        try:  # make sure the pidfd names the sandbox's pid 1, not a process that reused the pid
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            comm = stat.split(b"(", 1)[1].rsplit(b")", 1)[0]
            ppid = int(stat.rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            comm, ppid = b"", -1
        if ppid != bwrap_pid and _readable(fd, 0):
            # pid 1 had already exited (a fast program): nothing is left in its namespace (a
            # pidfd turns readable only once pid 1 and so the whole namespace are gone)
            os.close(fd)
            return
        if ppid != bwrap_pid and comm != b"bwrap":
            # A busy machine can show pid 1 mid-exit with bwrap already gone (reparented to
            # init, still named bwrap: bwrap's own init). Anything else reused the pid.
            os.close(fd)
            self.error = f"sandbox pid 1 ({pid}) is no longer bwrap's child"
            return
        self.pidfd = fd

    def kill(self) -> None:
        if self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def kill_and_wait(self, timeout_s: float = 30.0) -> bool:
        """SIGKILL pid 1 and wait until it has exited. True when the namespace is empty.

        The kernel kills every other process of the namespace when its pid 1 dies and does not
        let pid 1 finish exiting (the pidfd turns readable) before they are all gone.
        """
        if self.pidfd is None:
            return True
        self.kill()
        done = _readable(self.pidfd, timeout_s)
        os.close(self.pidfd)
        self.pidfd = None
        return done


def _run_cgroup(cfg: SandboxConfig) -> tuple[RunCgroup | None, dict[str, Any]]:
    """The run's own cgroup, made with its limits, and why its CPU is not capped (when not);
    or None and why there is no cgroup."""
    sup, why_not = _usable_cgroups(cfg)
    if sup is None:
        return None, {"in_force": False, "reason": why_not}
    _cgroup_sweep(sup)  # what a killed process of this tree left behind
    try:
        cg = RunCgroup.create(
            sup,
            memory_bytes=cfg.memory_mb * 1024 * 1024,
            pids_max=cfg.max_processes + _PIDS_OVERHEAD,
            cpu_cores=cfg.cpu_cores if sup.cpu else None,
        )
    except OSError as exc:
        return None, {"in_force": False, "reason": f"could not create the run's cgroup: {exc}"}
    return cg, (_cpu_record(cfg, sup) if cg.cpu_cores is None else {})


def _run_bwrap(
    cfg: SandboxConfig,
    host_dir: str,
    argv: list[str],
    stdin_data: bytes,
    time_limit_s: float,
    env: dict[str, str] | None = None,
) -> ExecutionResult:
    """Start the sandbox in its own cgroup (where cgroups are usable), feed stdin, read capped
    stdout/stderr, enforce the wall clock and the whole run's memory.

    Returns only after every process of the run is gone (see :class:`_Namespace`) and its
    cgroup is removed.
    """
    cg, note = _run_cgroup(cfg)
    if cg is None:
        if cfg.cgroups == "require":
            return ExecutionResult(
                "sandbox_error", None, "", "", 0.0, limits=cfg.limits(), cgroup=note,
                reason=f"SandboxConfig.cgroups='require': {note['reason']}",
            )  # fmt: skip
        res = _run_bwrap_in(cfg, host_dir, argv, stdin_data, time_limit_s, env, None)
        res.cgroup = note
        return res
    try:
        res = _run_bwrap_in(cfg, host_dir, argv, stdin_data, time_limit_s, env, cg)
        stats = cg.read_stats()  # before the removal: the peak and the OOM kills go with it
        left = cg.members()
    finally:
        removed = cg.remove()
    res.cgroup = {**cg.describe(), **note, "removed": removed}
    oom = stats["oom_kills"]
    if oom is None:  # a kernel that does not count OOM kills: a hit limit and a SIGKILL
        sig = res.exit_code - 128 if res.exit_code and res.exit_code > 128 else None
        oom = int(bool(stats["memory_limit_hits"]) and sig == signal.SIGKILL)
    if left:
        # execute() must never return with a process of the run alive (the namespace's
        # teardown makes this unreachable; the cgroup is a second check)
        res.status = "sandbox_error"
        res.reason = f"{len(left)} process(es) of the run were still in its cgroup at the end"
    elif oom and res.status != "sandbox_error":
        # The OOM kill came before any kill of ours (nothing of the run allocates after our
        # SIGKILL), so it decides: the run went over its memory, whatever it printed or
        # returned after losing a process to it.
        res.status = "memory"
        res.reason = (
            f"memory limit {cfg.memory_mb} MiB exceeded by the whole run (its cgroup's OOM "
            f"killer ended {oom} process(es))"
        )
    return res


def _run_bwrap_in(
    cfg: SandboxConfig,
    host_dir: str,
    argv: list[str],
    stdin_data: bytes,
    time_limit_s: float,
    env: dict[str, str] | None,
    cg: RunCgroup | None,
) -> ExecutionResult:
    """The run itself, in cgroup ``cg`` when given. Returns only after every process of the
    run is gone (see :class:`_Namespace`)."""
    bpf = seccomp_filter()
    info_r, info_w = os.pipe()
    err_r, err_w = os.pipe()  # the program's stderr; bwrap's own goes to proc.stderr
    # The seccomp program from an anonymous file: bwrap reads it to EOF from the fd.
    bpf_f = tempfile.TemporaryFile()
    bpf_f.write(bpf)
    bpf_f.seek(0)
    cmd = _bwrap_argv(
        cfg, host_dir, argv, env, info_fd=info_w, seccomp_fd=bpf_f.fileno(), stderr_fd=err_w
    )
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
    if cg is not None:
        # Join the run's cgroup before anything else runs: a shell writes itself into it (v1
        # tasks, v2 cgroup.procs), still as this process's uid (before setpriv's drop: the
        # cgroup files are ours, not the sandbox uid's), then execs setpriv/bwrap. Every
        # process of the run descends from it. Popen keeps its vfork (no preexec_fn, which
        # also is unsafe with run_many's threads); the cost is one exec of /bin/sh.
        files = cg.join_files
        cmd = [JOIN_SHELL, "-c", JOIN_SCRIPT, "sluice-cgroup-join", str(len(files)), *files, *cmd]
    cap = cfg.max_output_bytes
    # stdin from an anonymous file: no writer thread, no pipe deadlock with huge input. The
    # program gets a read-only descriptor of it (reopened through /proc): the read-write one
    # let it write up to RLIMIT_FSIZE onto the host's disk through fd 0.
    # Mode 0400 too: when we are not root the sandbox's host uid owns the file and could
    # otherwise reopen /proc/self/fd/0 for writing.
    with tempfile.TemporaryFile() as rw:
        rw.write(stdin_data)
        rw.flush()
        os.fchmod(rw.fileno(), 0o400)
        stdin_f = open(f"/proc/self/fd/{rw.fileno()}", "rb", buffering=0)  # noqa: SIM115
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=stdin_f,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # own process group: killpg reaches bwrap itself
            close_fds=True,
            pass_fds=(info_w, bpf_f.fileno(), err_w),
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
        )
    except OSError as exc:
        for f in (stdin_f, bpf_f):
            f.close()
        for fd in (info_r, info_w, err_r, err_w):
            os.close(fd)
        return ExecutionResult(
            "sandbox_error", None, "", "", 0.0, reason=f"could not start bwrap: {exc}",
            limits=cfg.limits(),
        )  # fmt: skip
    oom_fd = cg.oom_fd if cg is not None else None
    for f in (stdin_f, bpf_f):
        f.close()
    os.close(info_w)
    os.close(err_w)
    deadline = t0 + time_limit_s
    try:
        ns = _Namespace(info_r, proc.pid, max(deadline, time.monotonic() + 10.0))
    finally:
        os.close(info_r)

    out_fd, err_fd, bw_fd = proc.stdout.fileno(), err_r, proc.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray(), bw_fd: bytearray()}
    over = {out_fd: False, err_fd: False, bw_fd: False}
    sel = selectors.DefaultSelector()
    for fd in (out_fd, err_fd, bw_fd):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    # bwrap exits as soon as the program does; anything still holding the pipes then (pid 1,
    # leftover children) is killed at once, so a finished program is never reported `timeout`.
    bwrap_fd = os.pidfd_open(proc.pid)
    sel.register(bwrap_fd, selectors.EVENT_READ)
    if oom_fd is not None:  # cgroup v1: the run's memory cgroup hit its limit (OOM)
        sel.register(oom_fd, selectors.EVENT_READ)
    killed_for: str | None = None

    def kill() -> None:
        ns.kill()  # the namespace first: bwrap's death alone does not reliably take it down
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    open_fds = 3
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
            if fd == bwrap_fd:
                sel.unregister(fd)
                ns.kill()
                continue
            if fd == oom_fd:
                # The kernel found no memory to reclaim for the run and its OOM killer is
                # ending a process: end the whole run now, as cgroup v2's memory.oom.group does
                sel.unregister(fd)
                if killed_for is None:
                    killed_for = "memory"
                    kill()
                    deadline = time.monotonic() + 5.0
                continue
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
    os.close(bwrap_fd)
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
    os.close(err_r)
    # bwrap reports the program's exit as soon as the program (the namespace's pid 2) exits;
    # its children may still be alive under pid 1. Kill pid 1 and wait for the namespace to
    # empty before returning. (No killpg after the reap: bwrap's pid may already be reused.)
    emptied = ns.kill_and_wait()
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
    bwrap_err = bytes(bufs[bw_fd]).decode("utf-8", errors="replace")
    if bwrap_err:  # bwrap's own complaint, before anything the program wrote
        res.stderr = bwrap_err + res.stderr
    _classify(res, rc, killed_for, cfg, time_limit_s, bwrap_err)
    if ns.error or not emptied:
        # Never report a pass when the run could not be confirmed over.
        res.status = "sandbox_error"
        res.reason = ns.error or "the sandbox's processes did not exit after SIGKILL"
    return res


_SIGNALS = {int(s): s.name for s in signal.Signals}


def _classify(
    res: ExecutionResult,
    rc: int,
    killed_for: str | None,
    cfg: SandboxConfig,
    tl: float,
    bwrap_err: str = "",
) -> None:
    if killed_for == "timeout":
        res.status, res.reason = "timeout", f"wall-clock limit {tl:g}s exceeded"
        return
    if killed_for == "output_limit":
        res.status = "output_limit"
        res.reason = f"output exceeded {cfg.max_output_bytes} bytes; captured output is truncated"
        return
    if killed_for == "memory":
        res.status = "memory"
        res.reason = f"memory limit {cfg.memory_mb} MiB exceeded by the whole run (its cgroup)"
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
    elif rc == 1 and bwrap_err.startswith("bwrap:"):  # bwrap's stderr, never the program's
        res.status, res.reason = "sandbox_error", bwrap_err.strip()[:500]
    elif rc == JOIN_EXIT and JOIN_MESSAGE in bwrap_err:  # the cgroup join, before bwrap ran
        res.status, res.reason = "sandbox_error", bwrap_err.strip()[-500:]
    elif sig in _SIGNALS:
        res.status, res.reason = "runtime_error", f"killed by {_SIGNALS[sig]}"
    else:
        last = tail.strip().splitlines()[-1] if tail.strip() else ""
        res.status, res.reason = "runtime_error", f"exit code {rc}" + (f": {last}" if last else "")


# Where a run's program files may go when $TMPDIR is out of the sandbox uid's reach: the
# system's own temp folders, which every user may traverse.
_HOST_DIR_FALLBACKS = ("/tmp", "/var/tmp", "/dev/shm")


def _sandbox_uid_can_reach(path: str) -> bool:
    """Whether the sandbox's host uid (:data:`SANDBOX_UID`, group :data:`SANDBOX_UID` and no
    other, as setpriv leaves it) may traverse ``path`` and every folder above it: bwrap, running
    as that uid, must find the program folder made there to bind it. Mode bits only (an ACL that
    grants more is not read)."""
    import stat  # here: a function below names a local `stat`

    p = Path(os.path.realpath(path))
    for d in (p, *p.parents):
        try:
            st = os.stat(d)
        except OSError:
            return False
        if st.st_uid == SANDBOX_UID:
            bit = stat.S_IXUSR
        elif st.st_gid == SANDBOX_UID:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def host_dir_base() -> str:
    """The folder each run's program folder is made in: ``tempfile.gettempdir()`` ($TMPDIR,
    default /tmp) when bwrap can reach it, which is always so when bwrap runs as this user.
    As root bwrap runs as :data:`SANDBOX_UID`, which cannot traverse a private $TMPDIR (mode
    0700, as pam_tmpdir makes): then the first of /tmp, /var/tmp, /dev/shm it can reach (the
    files are only the program and the test harness, world-readable inside the sandbox
    anyway). None of them: :class:`SandboxUnavailable` naming $TMPDIR and the fix; bwrap failed
    every run with "Can't find source path ...: Permission denied" before."""
    tmp = tempfile.gettempdir()
    if os.geteuid() != 0:
        return tmp
    for cand in dict.fromkeys((tmp, *_HOST_DIR_FALLBACKS)):
        if os.path.isdir(cand) and os.access(cand, os.W_OK) and _sandbox_uid_can_reach(cand):
            return cand
    raise SandboxUnavailable(
        f"the sandbox's uid {SANDBOX_UID} cannot reach the temp folder {tmp} ($TMPDIR), nor "
        f"{', '.join(_HOST_DIR_FALLBACKS)}: bwrap binds each run's program folder from there",
        hint=f"point TMPDIR at a folder every user may traverse (e.g. TMPDIR=/tmp, or chmod "
        f"o+x {tmp} and each folder above it)",
    )


class _HostDir:
    """A host temp dir with the program files, bound read-only into the sandbox, then removed.
    Made under :func:`host_dir_base`, where the sandbox uid can reach it."""

    def __init__(self, files: dict[str, str | bytes]) -> None:
        self.path = tempfile.mkdtemp(prefix="sluice-sbx-", dir=host_dir_base())
        try:
            os.chmod(self.path, 0o755)  # readable by the sandbox uid
            for name, text in files.items():
                p = os.path.join(self.path, name)
                # bytes go in unchanged (a program file in any encoding runs as given);
                # surrogatepass: a lone surrogate (JSON's "\ud800") goes in as its bytes and the
                # program fails like any broken one, instead of raising here and sinking a batch
                data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
                with open(p, "wb") as f:
                    f.write(data)
                os.chmod(p, 0o644)
        except BaseException:  # a failed write (full disk) must not leave the folder
            shutil.rmtree(self.path, ignore_errors=True)
            raise

    def __enter__(self) -> str:
        return self.path

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def execute(
    program: str | bytes,
    stdin: str | bytes = "",
    config: SandboxConfig | None = None,
    *,
    time_limit_s: float | None = None,
) -> ExecutionResult:
    """Run Python source ``program`` once in the sandbox with ``stdin``.

    ``program`` as ``bytes`` is the program file exactly as given: Python decodes it inside the
    sandbox (PEP 263 coding line, else UTF-8), as ``python3 prog.py`` would on the host.
    ``status`` is ``passed`` when it exited 0 within the limits (its output is not judged here).
    """
    cfg = config or SandboxConfig()
    check_available(cfg)
    data = stdin.encode("utf-8", "surrogatepass") if isinstance(stdin, str) else stdin
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


def _grade_stdin(
    cfg: SandboxConfig, d: str, t: TestCase, idx: int, tl: float
) -> tuple[TestOutcome, ExecutionResult]:
    data = t.input.encode("utf-8", "surrogatepass")
    r = _run_bwrap(cfg, d, [f"{_SANDBOX_DIR}/solution.py"], data, tl)
    o = TestOutcome(idx, r.status, r.wall_s, r.reason, expected=t.output, got=r.stdout[:2000])
    o.stderr = r.stderr[-2000:]
    if r.status == "passed" and not outputs_match(t.output or "", r.stdout, cfg.float_tolerance):
        o.status, o.reason = "failed", "stdout differs from the expected output"
    return o, r


def _grade_functional(
    cfg: SandboxConfig, solution: str, t: TestCase, idx: int, tl: float
) -> tuple[TestOutcome, ExecutionResult]:
    """One functional test in one sandbox run. Expected values that are literals are compared
    here, outside the sandbox (``rl_pools.functional``: the solution runs in the harness's
    process and could decide an in-process comparison for it); other tests run as written."""
    from rl_pools.functional import HARNESS, REPR_BUDGET, host_plan

    plan = host_plan(t.input, t.output)
    if plan is not None:
        spec = {"mode": "calls", "entry_point": t.entry_point,
                "calls": [[c.args, c.shape] for c in plan.calls]}  # fmt: skip
        run_cfg = dataclasses.replace(
            cfg, max_output_bytes=cfg.max_output_bytes + REPR_BUDGET * min(len(plan.calls), 64)
        )
    else:
        mode = "check" if t.output is None else "pair"
        spec = {"mode": mode, "entry_point": t.entry_point, "input": t.input, "output": t.output}
        run_cfg = cfg
    nonce = secrets.token_hex(16)
    files = {"solution.py": solution, "spec.json": json.dumps(spec), "harness.py": HARNESS}
    with _HostDir(files) as d:
        argv = [f"{_SANDBOX_DIR}/harness.py"]
        r = _run_bwrap(run_cfg, d, argv, (nonce + "\n").encode(), tl)
    lines: dict[str, str] = {}
    for line in r.stdout.splitlines():  # the harness's lines; a later one wins
        if line.startswith(nonce + " "):
            head, _, rest = line[len(nonce) + 1 :].partition(" ")
            lines[head] = rest
    o = TestOutcome(idx, r.status, r.wall_s, r.reason, expected=t.output)
    o.stderr = r.stderr[-2000:]
    if plan is not None:
        _judge_calls(o, r, plan, lines)
    elif r.status == "passed":
        if "ok" in lines:
            pass
        elif "differs" in lines:
            o.status, o.reason = "failed", "returned value differs from the expected output"
            try:  # the harness writes a JSON string; a solution that found the nonce may not
                got = json.loads(lines["differs"])
            except (json.JSONDecodeError, RecursionError):
                got = None
            o.got = got[:2000] if isinstance(got, str) else lines["differs"][:2000]
        else:
            o.status = "failed"
            o.reason = "the test harness did not finish (the solution exited early?)"
    if o.status == "runtime_error" and "AssertionError" in r.stderr[-2000:]:
        o.status, o.reason = "failed", "assertion failed in check(): " + r.reason
    return o, r


def _judge_calls(o: TestOutcome, r: ExecutionResult, plan, lines: dict[str, str]) -> None:
    """Compare each call's returned value (read back from the harness's line) with its
    expected value; the first call that differs, or has no line, decides."""
    from rl_pools.functional import NotALiteral, read_literal, values_equal

    for i, call in enumerate(plan.calls):
        text = lines.get(str(i))
        if text is None:
            if r.status == "passed":
                o.status = "failed"
                o.reason = "the test harness did not finish (the solution exited early?)"
            return  # the run's own status (runtime_error, timeout, memory, ...) says why
        o.expected = call.expected_text
        try:  # the harness writes JSON; a solution that found the nonce may write anything
            sent = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            sent = None
        if isinstance(sent, dict) and isinstance(sent.get("type"), str):
            o.status = "failed"
            o.reason = (
                f"call {i} returned {sent['type']!s}, not a plain value (lists, numbers, "
                "strings, ...): returned values are compared outside the sandbox"
            )
            return
        if not isinstance(sent, str):
            o.status, o.reason = "failed", f"call {i}: the harness's line is unreadable"
            return
        o.got = sent[:2000]
        try:
            got = read_literal(sent)
        except NotALiteral:
            o.status, o.reason = "failed", f"call {i}: the returned value could not be read back"
            return
        if not values_equal(got, call.expected, tolerance=plan.tolerance):
            o.status = "failed"
            o.reason = "returned value differs from the expected output" + (
                f" (assert {i + 1} of check())" if not plan.tolerance else ""
            )
            return


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
