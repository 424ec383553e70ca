"""One cgroup per sandbox run: a cap on the memory and the processes of the whole run.

``rl_pools.sandbox`` limits each process with rlimits (``RLIMIT_AS`` per process, so a run of
``max_processes`` processes could hold ``max_processes x memory_mb``; tmpfs and shared-memory
pages and kernel memory are no address space at all). With a cgroup per run the kernel counts
everything the run holds (resident memory of every process, its tmpfs ``/work``, ``/tmp`` and
``/dev/shm`` pages, page cache it faults in, kernel memory such as inodes and page tables) against
one limit, and every task (process or thread) against one count.

Where the run's cgroup lives: under this process's *own* cgroup of each controller (read from
``/proc/self/cgroup``), never the root of the hierarchy, so whatever limits this process is
under (a container, a systemd slice, a CI job) also hold for its sandboxes.

* cgroup v1 (a hierarchy per controller, e.g. ``/sys/fs/cgroup/memory``, ``/sys/fs/cgroup/pids``):
  ``memory.limit_in_bytes`` and, when the kernel accounts swap, ``memory.memsw.limit_in_bytes``
  (memory + swap: swap is no way around the cap; without it ``memory.swappiness=0``, best effort);
  ``pids.max``. The OOM killer's kills are counted in ``memory.oom_control`` (``oom_kill``), and
  an eventfd on it (``cgroup.event_control``) tells the parent at once, so the run ends at the
  first OOM kill.
* cgroup v2 (one hierarchy): ``memory.max``, ``memory.swap.max=0``, ``memory.oom.group=1`` (the
  first OOM kill takes the whole run), ``pids.max``; ``memory.events`` counts the OOM kills.
  Usable only where this process's cgroup has ``memory`` and ``pids`` in its
  ``cgroup.subtree_control`` or can enable them (cgroup v2 lets a cgroup that holds processes
  itself hand domain controllers to children only at the root: elsewhere it needs a delegated
  cgroup whose processes sit in a leaf).

A run joins its cgroup race-free: the child that becomes bwrap first runs ``bash``, which writes
itself into the cgroup (v1 ``tasks``, v2 ``cgroup.procs``; still as this process's uid, before
``setpriv`` drops to the sandbox uid) and only then execs ``setpriv``/``bwrap``. Every process of the run descends
from it, so nothing of the program runs outside the cgroup. (A ``preexec_fn`` would do the same
but makes Python fork instead of vfork, and is unsafe with the grading threads of ``run_many``.)

Names: ``sluice-sbx-<host>-<pid namespace>-<pid>-<random>``, ``<host>`` and the liveness test as
``curation.lock_holder`` has them, so a later sandbox start in the same cgroup removes what a
killed process left behind (its pid no longer runs), after killing any process still in it. The
pid namespace's inode keeps a process from judging pids it cannot see.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import secrets
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from curation.lock_holder import alive, host_tag

CGROUP_MODES = ("auto", "require", "off")
DEFAULT_ROOT = "/sys/fs/cgroup"
PREFIX = "sluice-sbx-"
CONTROLLERS = ("memory", "pids")  # required: without them a run gets no cgroup
# used where this machine has it (a run is capped by it, or its record says why not): without a
# CPU cap a program that forks busy children takes every core for its whole wall-clock limit,
# and the runs beside it (other programs being graded) time out
OPTIONAL_CONTROLLERS = ("cpu",)
CPU_PERIOD_US = 100_000  # the kernel's default CFS period; the quota is cores x this
# The run's cgroup also holds bwrap itself (outside the sandbox), which RLIMIT_NPROC does not
# count (the sandbox's init, its pid 1, it does): pids.max = max_processes + 1 lets a program
# have exactly as many tasks as RLIMIT_NPROC does (measured: 6 children of a program with
# max_processes=8, with or without the cgroup; bwrap + init + program + 6 = 9 tasks).
PIDS_OVERHEAD = 1
JOIN_EXIT = 125
JOIN_MESSAGE = "sluice-sandbox: could not join the run's cgroup"
# bash, before setpriv/bwrap: $1 = how many files to join through follow, then the command.
# "0" is the writer itself. cgroup v1's `tasks` moves the writing thread only (bash has one):
# the kernel then skips the lock a whole-process move takes (cgroup_threadgroup_rwsem), whose
# write side waits for an RCU grace period: 0.14 ms instead of ~12 ms a run on our VM.
JOIN_SCRIPT = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do '
    f'echo 0 >"$1" || {{ echo "{JOIN_MESSAGE} $1" >&2; exit {JOIN_EXIT}; }}; '
    'shift; n=$((n - 1)); done; exec "$@"'
)
# POSIX sh runs JOIN_SCRIPT (dash on Debian: 0.8 ms less per run than bash, measured with the
# cgroup made and removed around it)
JOIN_SHELL = "/bin/sh"
_RMDIR_WAIT_S = 2.0


@dataclass(frozen=True)
class Hierarchy:
    """Where one run's cgroup is made for some of the controllers: this process's own cgroup."""

    version: int  # 1 or 2
    parent: str  # this process's own cgroup directory in that hierarchy
    controllers: tuple[str, ...]


@dataclass(frozen=True)
class Support:
    """Whether per-run cgroups can be used here, and where. ``reason``/``hint`` when not."""

    usable: bool
    hierarchies: tuple[Hierarchy, ...] = ()
    reason: str = ""
    hint: str = ""
    cpu_reason: str = ""  # why runs get no CPU cap (the cpu controller), when usable without it

    @property
    def cpu(self) -> bool:
        """Whether runs' cgroups can cap their CPU (the cpu controller is among them)."""
        return any("cpu" in h.controllers for h in self.hierarchies)

    @property
    def label(self) -> str:
        vs = sorted({h.version for h in self.hierarchies})
        return "+".join(f"v{v}" for v in vs)


_HINT = (
    "run Sluice where it may create cgroups below its own: as root with cgroup v1's memory and "
    "pids hierarchies mounted read-write (the usual /sys/fs/cgroup/memory, /sys/fs/cgroup/pids), "
    "or in a cgroup v2 cgroup delegated to it with +memory +pids in its cgroup.subtree_control "
    "(e.g. systemd-run --scope -p Delegate=yes, with Sluice's processes in a leaf below it); "
    "or set SandboxConfig.cgroups='auto' to run with rlimits only"
)


def _unescape(s: str) -> str:  # mountinfo writes space, tab, newline, backslash as \ooo
    if "\\" not in s:
        return s
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and s[i + 1 : i + 4].isdigit() and len(s[i + 1 : i + 4]) == 3:
            out.append(chr(int(s[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def _under(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root if root == "/" else root + "/")


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _keyed(text: str, key: str) -> int | None:
    """``key N`` line of a flat-keyed cgroup file (memory.events, memory.oom_control)."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            try:
                return int(parts[1])
            except ValueError:
                return None
    return None


def _own_dir(mnt_root: str, mountpoint: str, own: str) -> str | None:
    own = own.removesuffix(" (deleted)")
    if not _under(own, mnt_root):
        return None
    rel = own[len(mnt_root.rstrip("/")) :].lstrip("/")
    return os.path.join(mountpoint, rel) if rel else mountpoint


def discover(
    root: str = DEFAULT_ROOT, *, mountinfo: str | None = None, own_cgroups: str | None = None
) -> Support:
    """Find this process's own cgroup of ``memory`` and ``pids`` (and ``cpu``, where it is
    there) among the cgroup mounts under ``root`` (mount points from ``/proc/self/mountinfo``,
    own paths from ``/proc/self/cgroup``; both can be given as text), check that runs' cgroups
    can be made below it, then make and remove one to be sure. A ``cpu`` controller that is
    missing or cannot be used leaves the support usable without it (``cpu_reason`` says why).
    Not cached: see :func:`support`."""
    try:
        if mountinfo is None:
            mountinfo = _read("/proc/self/mountinfo")
        own_text = _read("/proc/self/cgroup") if own_cgroups is None else own_cgroups
    except OSError as exc:
        return Support(False, reason=f"cannot read this process's cgroups: {exc}", hint=_HINT)
    v1_mounts: dict[str, tuple[str, str]] = {}  # controller -> (mount root, mount point)
    v2_mounts: list[tuple[str, str]] = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if not sep or len(f) < 5 or len(r) < 2 or r[0] not in ("cgroup", "cgroup2"):
            continue
        mnt_root, mp = _unescape(f[3]), _unescape(f[4])
        if not _under(mp, root):
            continue
        if r[0] == "cgroup2":
            v2_mounts.append((mnt_root, mp))
        else:
            for opt in (r[2] if len(r) > 2 else "").split(","):
                if opt in CONTROLLERS or opt in OPTIONAL_CONTROLLERS:
                    v1_mounts.setdefault(opt, (mnt_root, mp))
    own_v1: dict[str, str] = {}
    own_v2: str | None = None
    for line in own_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            own_v2 = parts[2]
        for c in parts[1].split(","):
            own_v1[c] = parts[2]
    where: dict[str, Hierarchy] = {}
    missing: list[str] = []
    for c in CONTROLLERS + OPTIONAL_CONTROLLERS:
        if c in v1_mounts and c in own_v1:
            d = _own_dir(*v1_mounts[c], own_v1[c])
            if d and os.path.isdir(d):
                where[c] = Hierarchy(1, d, (c,))
                continue
        found = False
        if own_v2 is not None:
            for mnt_root, mp in v2_mounts:
                d = _own_dir(mnt_root, mp, own_v2)
                try:
                    ctrls = _read(os.path.join(d, "cgroup.controllers")).split() if d else []
                except OSError:
                    ctrls = []
                if c in ctrls:
                    where[c] = Hierarchy(2, d, (c,))  # type: ignore[arg-type]
                    found = True
                    break
        if not found:
            missing.append(c)
    cpu_reason = ""
    for c in OPTIONAL_CONTROLLERS:
        if c in missing:
            missing.remove(c)
            cpu_reason = (
                f"no cgroup hierarchy with the {c} controller is mounted under {root} for this "
                "process"
            )
    if missing:
        return Support(
            False,
            reason=(
                f"no cgroup hierarchy with the {' and '.join(missing)} controller"
                f"{'s' if len(missing) > 1 else ''} is mounted under {root} for this process "
                "(cgroup v1 memory/pids mounts, or a cgroup v2 mount whose cgroup.controllers "
                "lists them)"
            ),
            hint=_HINT,
        )
    base = _checked(where, CONTROLLERS)
    if not base.usable:
        return base
    opt = [c for c in OPTIONAL_CONTROLLERS if c in where]
    if opt:  # the cap where it works; the required ones alone where it does not
        full = _checked(where, CONTROLLERS + tuple(opt))
        if full.usable:
            return full
        cpu_reason = full.reason
    why = _trial(base)
    if why:
        return Support(False, reason=why, hint=_HINT)
    return dataclasses.replace(base, cpu_reason=cpu_reason)


def _checked(where: dict[str, Hierarchy], controllers: tuple[str, ...]) -> Support:
    """The support made of ``controllers``' hierarchies: writable, enabled (v2) and tried (the
    trial only with an optional controller among them: the caller tries the required alone)."""
    # One Hierarchy per directory (cgroup v2 serves every controller from one).
    merged: dict[str, Hierarchy] = {}
    for c in controllers:
        h = where[c]
        prev = merged.get(h.parent)
        merged[h.parent] = Hierarchy(h.version, h.parent, (*(prev.controllers if prev else ()), c))
    hs = tuple(merged.values())
    for h in hs:
        if not os.access(h.parent, os.W_OK):
            return Support(
                False,
                reason=f"this process's cgroup {h.parent} is not writable (cgroup v{h.version}): "
                "no cgroup can be made below it",
                hint=_HINT,
            )
        if h.version == 2:
            why = _enable_v2(h)
            if why:
                return Support(False, reason=why, hint=_HINT)
    sup = Support(True, hs)
    if any(c in OPTIONAL_CONTROLLERS for c in controllers):
        why = _trial(sup)
        if why:
            return Support(False, reason=why, hint=_HINT)
    return sup


def _enable_v2(h: Hierarchy) -> str:
    path = os.path.join(h.parent, "cgroup.subtree_control")
    try:
        have = set(_read(path).split())
    except OSError as exc:
        return f"cgroup v2: cannot read {path}: {exc}"
    need = [c for c in h.controllers if c not in have]
    if not need:
        return ""
    try:
        _write(path, " ".join(f"+{c}" for c in need))
    except OSError as exc:
        busy = (
            " (cgroup v2 lets a cgroup that holds processes itself hand memory to children only"
            " at the root of the hierarchy)"
            if exc.errno == errno.EBUSY
            else ""
        )
        return (
            f"cgroup v2: {', '.join(need)} not enabled in {path} and enabling failed: "
            f"{exc.strerror or exc}{busy}"
        )
    return ""


def _trial(sup: Support) -> str:
    """Make a cgroup as a run would, move a process into it the way a run's does, remove it."""
    try:
        cg = RunCgroup.create(
            sup,
            memory_bytes=64 << 20,
            pids_max=8,
            cpu_cores=1.0 if sup.cpu else None,
            watch_oom=False,
        )
    except OSError as exc:
        return f"could not create a cgroup below this process's own: {exc}"
    why = ""
    try:
        p = subprocess.run(
            [JOIN_SHELL, "-c", JOIN_SCRIPT, "sluice-cgroup-trial", str(len(cg.join_files)),
             *cg.join_files, "/usr/bin/true"],
            capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        if p.returncode != 0:
            why = f"could not move a process into a new cgroup: {p.stderr.strip()[-300:]}"
    except (OSError, subprocess.SubprocessError) as exc:
        why = f"could not move a process into a new cgroup: {exc}"
    if not cg.remove():
        why = why or f"could not remove the trial cgroup(s) {', '.join(cg.dirs)}"
    return why


_support_lock = threading.Lock()
_support_cache: dict[tuple[str, int], Support] = {}


def support(root: str = DEFAULT_ROOT) -> Support:
    """:func:`discover`, once per process and root (a forked child finds out again)."""
    key = (root, os.getpid())
    with _support_lock:
        sup = _support_cache.get(key)
        if sup is None:
            sup = _support_cache[key] = discover(root)
        return sup


# --------------------------------------------------------------------------------------------
# One run's cgroup
# --------------------------------------------------------------------------------------------

_mine_lock = threading.Lock()
# names of this process's runs' cgroups while their runs last; one whose removal failed leaves
# the set and is tried again by the next sweep
_mine: set[str] = set()


def _pid_ns() -> str:
    """This process's pid namespace (its inode): a pid means something only inside it."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def _new_name() -> str:
    return f"{PREFIX}{host_tag()}-{_pid_ns()}-{os.getpid()}-{secrets.token_hex(4)}"


def _stale(name: str) -> bool:
    """Left by a process of this host (and pid namespace) that no longer runs, or by this
    process (or an earlier one with its pid) and not a run of this process in progress."""
    if not name.startswith(PREFIX):
        return False
    parts = name[len(PREFIX) :].rsplit("-", 3)
    if len(parts) != 4 or parts[0] != host_tag() or parts[1] != _pid_ns():
        return False
    if not parts[2].isdigit():
        return False
    pid = int(parts[2])
    if pid == os.getpid():
        with _mine_lock:
            return name not in _mine
    return not alive(pid)


def _kill_members(path: str, version: int) -> None:
    """SIGKILL every process in cgroup ``path`` (the run's processes only: a pid read from
    cgroup.procs is signalled through a pidfd opened while it is still listed there)."""
    if version == 2 and os.path.exists(os.path.join(path, "cgroup.kill")):
        with contextlib.suppress(OSError):
            _write(os.path.join(path, "cgroup.kill"), "1")
            return
    try:
        pids = [int(x) for x in _read(os.path.join(path, "cgroup.procs")).split()]
    except (OSError, ValueError):
        return
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            # the pidfd is this pid's process now; is that process still one of the run's?
            still = pid in [int(x) for x in _read(os.path.join(path, "cgroup.procs")).split()]
            if still:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        except (OSError, ValueError):
            pass
        finally:
            os.close(fd)


def _rmdir(path: str, version: int, wait_s: float = _RMDIR_WAIT_S) -> bool:
    """Remove a run's cgroup once its processes are gone (an exiting task can hold it a moment:
    retry, killing what is still listed). True when it is gone."""
    deadline = time.monotonic() + wait_s
    delay = 0.001
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                return False
        _kill_members(path, version)
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def sweep(sup: Support) -> list[str]:
    """Remove the run cgroups that processes of this host left behind when they were killed
    (named with a pid that no longer runs), in this process's own cgroups. Returns their paths."""
    removed = []
    for h in sup.hierarchies:
        try:
            names = os.listdir(h.parent)
        except OSError:
            continue
        for name in names:
            if _stale(name):
                p = os.path.join(h.parent, name)
                if _rmdir(p, h.version, wait_s=0.5):
                    removed.append(p)
    return removed


@dataclass
class RunCgroup:
    """The cgroup(s) of one sandbox run: one directory per hierarchy (v1: memory, pids and cpu;
    v2: one for all), with the limits written before any process joins."""

    dirs: list[str]
    versions: list[int]
    memory_dir: str
    memory_version: int
    pids_dir: str
    memory_bytes: int
    pids_max: int
    swap_capped: bool
    cpu_dir: str | None = None  # where the CPU cap is written (None: no cap)
    cpu_version: int = 0
    cpu_cores: float | None = None
    oom_fd: int | None = None  # v1: an eventfd that turns readable on an OOM in the run
    _ctl_fd: int | None = None
    name: str = ""
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def join_files(self) -> list[str]:
        """What the child writes itself into: v1 ``tasks`` (the writing thread, see
        ``JOIN_SCRIPT``), v2 ``cgroup.procs`` (v2 moves whole processes only)."""
        return [
            os.path.join(d, "tasks" if v == 1 else "cgroup.procs")
            for d, v in zip(self.dirs, self.versions, strict=True)
        ]

    @classmethod
    def create(
        cls,
        sup: Support,
        *,
        memory_bytes: int,
        pids_max: int,
        cpu_cores: float | None = None,
        watch_oom: bool = True,
    ) -> RunCgroup:
        """Make the run's cgroup(s) with their limits. OSError when that fails (nothing left).
        ``cpu_cores``: the run's CPU bandwidth, in cores (CFS quota over a 100 ms period), where
        ``sup`` has the cpu controller; None leaves the CPU uncapped."""
        name = _new_name()
        with _mine_lock:
            _mine.add(name)
        made: list[tuple[str, int]] = []
        try:
            mem = pids = cpu = None
            swap_capped = False
            for h in sup.hierarchies:
                if h.controllers == ("cpu",) and cpu_cores is None:
                    continue  # a v1 cpu hierarchy of its own: nothing to write there
                d = os.path.join(h.parent, name)
                os.mkdir(d, 0o755)
                made.append((d, h.version))
                if "memory" in h.controllers:
                    mem = (d, h.version)
                    if h.version == 1:
                        _write(os.path.join(d, "memory.limit_in_bytes"), str(memory_bytes))
                        memsw = os.path.join(d, "memory.memsw.limit_in_bytes")
                        if os.path.exists(memsw):
                            _write(memsw, str(memory_bytes))
                            swap_capped = True
                        else:  # no swap accounting: keep the run's pages out of swap
                            with contextlib.suppress(OSError):
                                _write(os.path.join(d, "memory.swappiness"), "0")
                    else:
                        _write(os.path.join(d, "memory.max"), str(memory_bytes))
                        swap = os.path.join(d, "memory.swap.max")
                        if os.path.exists(swap):
                            _write(swap, "0")
                            swap_capped = True
                        with contextlib.suppress(OSError):  # kernels before 4.19 lack it
                            _write(os.path.join(d, "memory.oom.group"), "1")
                if "pids" in h.controllers:
                    pids = d
                    _write(os.path.join(d, "pids.max"), str(pids_max))
                if "cpu" in h.controllers and cpu_cores is not None:
                    cpu = (d, h.version)
                    # the kernel's minimum quota is 1 ms a period
                    quota = max(1000, round(cpu_cores * CPU_PERIOD_US))
                    if h.version == 1:
                        _write(os.path.join(d, "cpu.cfs_period_us"), str(CPU_PERIOD_US))
                        _write(os.path.join(d, "cpu.cfs_quota_us"), str(quota))
                    else:
                        _write(os.path.join(d, "cpu.max"), f"{quota} {CPU_PERIOD_US}")
            assert mem is not None and pids is not None
            cg = cls(
                dirs=[d for d, _ in made],
                versions=[v for _, v in made],
                memory_dir=mem[0],
                memory_version=mem[1],
                pids_dir=pids,
                memory_bytes=memory_bytes,
                pids_max=pids_max,
                swap_capped=swap_capped,
                cpu_dir=cpu[0] if cpu else None,
                cpu_version=cpu[1] if cpu else 0,
                cpu_cores=cpu_cores if cpu else None,
                name=name,
            )
        except BaseException:
            for d, v in reversed(made):
                _rmdir(d, v, wait_s=0.2)
            with _mine_lock:
                _mine.discard(name)
            raise
        if watch_oom and cg.memory_version == 1:
            cg._watch_oom_v1()
        return cg

    def _watch_oom_v1(self) -> None:
        """An eventfd the kernel signals when the run's memory cgroup hits OOM (best effort:
        without it the OOM kills are still counted and read when the run ends)."""
        try:
            efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        except OSError:
            return
        try:
            ctl = os.open(os.path.join(self.memory_dir, "memory.oom_control"),
                          os.O_RDONLY | os.O_CLOEXEC)  # fmt: skip
        except OSError:
            os.close(efd)
            return
        try:
            _write(os.path.join(self.memory_dir, "cgroup.event_control"), f"{efd} {ctl}")
        except OSError:
            os.close(efd)
            os.close(ctl)
            return
        self.oom_fd, self._ctl_fd = efd, ctl

    def oom_kills(self) -> int | None:
        """Processes of the run the OOM killer has killed so far (None: the kernel does not
        say)."""
        try:
            if self.memory_version == 1:
                return _keyed(_read(os.path.join(self.memory_dir, "memory.oom_control")),
                              "oom_kill")  # fmt: skip
            return _keyed(_read(os.path.join(self.memory_dir, "memory.events")), "oom_kill")
        except OSError:
            return None

    def members(self) -> list[int]:
        """The processes in the run's cgroup(s) now."""
        out: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                out |= {int(x) for x in _read(os.path.join(d, "cgroup.procs")).split()}
        return sorted(out)

    def read_stats(self) -> dict[str, Any]:
        """What the kernel recorded for the run (peak memory, OOM kills, refused forks); read
        before :meth:`remove`."""

        def num(path: str) -> int | None:
            try:
                return int(_read(path).split()[0])
            except (OSError, ValueError, IndexError):
                return None

        m, p = self.memory_dir, self.pids_dir
        if self.memory_version == 1:
            peak = num(os.path.join(m, "memory.max_usage_in_bytes"))
            failcnt = num(os.path.join(m, "memory.failcnt"))
        else:
            peak = num(os.path.join(m, "memory.peak"))  # Linux 5.19+
            try:
                failcnt = _keyed(_read(os.path.join(m, "memory.events")), "max")
            except OSError:
                failcnt = None
        try:
            refused = _keyed(_read(os.path.join(p, "pids.events")), "max")
        except OSError:
            refused = None
        self.stats = {
            "memory_peak_bytes": peak,
            "memory_limit_hits": failcnt,
            "oom_kills": self.oom_kills(),
            "pids_peak": num(os.path.join(p, "pids.peak")),
            "forks_refused": refused,
        }
        if self.cpu_dir is not None:
            self.stats.update(self._cpu_stats())
        return self.stats

    def _cpu_stats(self) -> dict[str, Any]:
        """How often and how long the CPU cap held the run back (cpu.stat), and the CPU time
        the run used where the kernel says (v2 cpu.stat; v1 cpuacct.usage when cpuacct is
        mounted with cpu)."""
        d = self.cpu_dir
        assert d is not None
        try:
            text = _read(os.path.join(d, "cpu.stat"))
        except OSError:
            return {"cpu_throttled_periods": None, "cpu_throttled_s": None, "cpu_usage_s": None}
        usage: float | None = None
        if self.cpu_version == 1:
            throttled_ns = _keyed(text, "throttled_time")
            throttled = throttled_ns / 1e9 if throttled_ns is not None else None
            with contextlib.suppress(OSError, ValueError):
                usage = int(_read(os.path.join(d, "cpuacct.usage"))) / 1e9
        else:
            throttled_us = _keyed(text, "throttled_usec")
            throttled = throttled_us / 1e6 if throttled_us is not None else None
            usage_us = _keyed(text, "usage_usec")
            usage = usage_us / 1e6 if usage_us is not None else None
        return {
            "cpu_throttled_periods": _keyed(text, "nr_throttled"),
            "cpu_throttled_s": throttled,
            "cpu_usage_s": usage,
        }

    def close_watch(self) -> None:
        for fd in (self.oom_fd, self._ctl_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.oom_fd = self._ctl_fd = None

    def remove(self) -> bool:
        """Kill anything still in the run's cgroup(s) and remove them. True when all are gone."""
        self.close_watch()
        ok = True
        for d, v in zip(reversed(self.dirs), reversed(self.versions), strict=True):
            ok = _rmdir(d, v) and ok
        with _mine_lock:  # a failed removal is retried by the next sandbox start's sweep
            _mine.discard(self.name)
        return ok

    def describe(self) -> dict[str, Any]:
        """The record of the run's cgroup for ``ExecutionResult.cgroup``."""
        return {
            "in_force": True,
            "version": "+".join(f"v{v}" for v in sorted(set(self.versions))),
            "memory_limit_bytes": self.memory_bytes,
            "swap_capped": self.swap_capped,
            "pids_max": self.pids_max,
            "cpu_max_cores": self.cpu_cores,
            **self.stats,
        }
