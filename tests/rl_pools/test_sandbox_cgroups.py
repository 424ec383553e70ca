"""A run's own cgroup caps the memory and the processes of the whole run, not of each process.

The attacks here were contained only per process before (RLIMIT_AS, RLIMIT_NPROC): twelve
children of 60 MiB each held 720 MiB with ``memory_mb=128``; tmpfs and /dev/shm pages are no
address space at all. Tests that need the kernel's cgroups skip, naming what is missing, where
this process cannot make cgroups below its own."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from process_helpers import needs_bwrap

import rl_pools.sandbox_cgroups as sc
from curation.errors import ConfigError
from rl_pools.sandbox import (
    SandboxConfig,
    SandboxUnavailable,
    cgroup_status,
    execute,
    run_tests,
)

pytestmark = needs_bwrap

_STATUS = cgroup_status(SandboxConfig())
needs_cgroups = pytest.mark.skipif(
    not _STATUS["in_force"],
    reason=f"per-run cgroups are not usable here: {_STATUS.get('reason')}",
)

# Twelve children each write 60 MiB and report their resident size, then wait to be released:
# the whole run holds ~720 MiB at once while every process stays far below RLIMIT_AS.
FORK_ATTACK = r"""
import os
n = 12
rd, wr = os.pipe()
hold_r, hold_w = os.pipe()
for i in range(n):
    if os.fork() == 0:
        os.close(rd)
        os.close(hold_w)
        b = bytearray(60 << 20)
        for j in range(0, len(b), 4096):
            b[j] = 1
        rss = [ln for ln in open("/proc/self/status") if ln.startswith("VmRSS")][0].split()[1]
        os.write(wr, (rss + "\n").encode())
        os.read(hold_r, 1)  # until the parent lets go
        os._exit(0)
os.close(wr)
os.close(hold_r)
data = b""
while data.count(b"\n") < n:
    chunk = os.read(rd, 4096)
    if not chunk:
        break
    data += chunk
kb = [int(x) for x in data.split()]
print(len(kb), sum(kb) // 1024, flush=True)
os.close(hold_w)
for _ in range(n):
    try:
        os.wait()
    except ChildProcessError:
        break
"""


def _mine_left() -> list[str]:
    """This process's run cgroups still on disk, in every hierarchy they are made in."""
    sup = sc.support(sc.DEFAULT_ROOT)
    head = f"{sc.PREFIX}{sc.host_tag()}-{sc._pid_ns()}-{os.getpid()}-"
    return [
        os.path.join(h.parent, n)
        for h in sup.hierarchies
        for n in os.listdir(h.parent)
        if n.startswith(head)
    ]


def test_config_names_the_allowed_values():
    with pytest.raises(ConfigError, match="auto, require, off"):
        SandboxConfig(cgroups="yes")
    with pytest.raises(ConfigError, match="absolute path"):
        SandboxConfig(cgroup_root="sys/fs/cgroup")


def test_require_where_cgroups_are_not_usable_names_what_is_missing(tmp_path):
    # No cgroup hierarchy is mounted under an empty folder: as on a machine without cgroups.
    cfg = SandboxConfig(cgroups="require", cgroup_root=str(tmp_path), time_limit_s=5)
    with pytest.raises(SandboxUnavailable) as e:
        execute("print(1)", config=cfg)
    msg = str(e.value)
    assert "cgroups='require'" in msg and "memory and pids" in msg and str(tmp_path) in msg, msg
    assert "Delegate=yes" in e.value.hint and "cgroups='auto'" in e.value.hint, e.value.hint
    # auto falls back to the rlimits alone and says so in the result
    r = execute("print(1)", config=SandboxConfig(cgroup_root=str(tmp_path), time_limit_s=5))
    assert r.status == "passed" and r.stdout == "1\n", r
    assert r.cgroup["in_force"] is False and "memory and pids" in r.cgroup["reason"], r.cgroup


@needs_cgroups
def test_forked_children_cannot_hold_more_than_the_run_limit():
    cfg = SandboxConfig(time_limit_s=20, cpu_limit_s=10, memory_mb=128, max_processes=16)
    # without the cgroup (as before): every child within its RLIMIT_AS, ~720 MiB in all
    off = execute(FORK_ATTACK, config=dataclasses.replace(cfg, cgroups="off"))
    assert off.status == "passed", off
    n, mib = map(int, off.stdout.split())
    assert n == 12 and mib > 600, off.stdout
    assert off.cgroup == {"in_force": False, "reason": "SandboxConfig.cgroups='off'"}
    # with it: the OOM killer ends a child, the run ends, graded as the memory limit
    r = execute(FORK_ATTACK, config=cfg)
    assert r.status == "memory", r
    assert "128 MiB" in r.reason and "whole run" in r.reason, r.reason
    cg = r.cgroup
    # cgroup v1's OOM eventfd can wake the parent, which ends the run, before the kernel's OOM
    # killer has counted its kill (seen once under a loaded machine): the limit was hit either way
    assert cg["in_force"] is True and (cg["oom_kills"] >= 1 or cg["memory_limit_hits"] >= 1), cg
    assert cg["memory_limit_bytes"] == 128 << 20
    assert cg["memory_peak_bytes"] is not None and cg["memory_peak_bytes"] <= 128 << 20, cg
    assert cg["removed"] is True
    assert _mine_left() == []


@needs_cgroups
def test_tmpfs_and_shm_pages_count_against_the_run():
    # 40 MiB in each of /dev/shm, /work and /tmp: each within its tmpfs cap (48 MiB) and no
    # process's address space, 120 MiB in all with memory_mb=64
    prog = r"""
held = 0
for path in ("/dev/shm/a", "/work/b", "/tmp/c"):
    with open(path, "wb") as f:
        for _ in range(40):
            f.write(b"x" * (1 << 20))
            held += 1
print("held", held, flush=True)
"""
    cfg = SandboxConfig(time_limit_s=20, cpu_limit_s=10, memory_mb=64, tmpfs_mb=48,
                        max_file_mb=48)  # fmt: skip
    off = execute(prog, config=dataclasses.replace(cfg, cgroups="off"))
    assert off.status == "passed" and off.stdout == "held 120\n", off
    r = execute(prog, config=cfg)
    assert r.status == "memory", r
    assert r.cgroup["memory_peak_bytes"] <= 64 << 20, r.cgroup
    assert r.cgroup["oom_kills"] >= 1, r.cgroup


@needs_cgroups
def test_a_run_under_the_limit_passes_and_is_graded():
    cfg = SandboxConfig(time_limit_s=10, memory_mb=128, max_processes=16)
    add = "a, b = map(int, input().split())\nprint(a + b)\n"
    res = run_tests(add, [{"kind": "stdin", "input": "1 2\n", "output": "3\n"},
                          {"kind": "stdin", "input": "20 22\n", "output": "42\n"}], cfg)  # fmt: skip
    assert (res.status, res.n_passed) == ("passed", 2), res
    wrong = run_tests(add, [{"kind": "stdin", "input": "1 2\n", "output": "4\n"}], cfg)
    assert wrong.status == "failed", wrong
    # three children of 8 MiB each and a 16 MiB file in /work: well under 128 MiB together
    prog = r"""
import os
for i in range(3):
    if os.fork() == 0:
        b = bytearray(8 << 20)
        for j in range(0, len(b), 4096):
            b[j] = 1
        os._exit(0)
for _ in range(3):
    os.wait()
with open("/work/f", "wb") as f:
    f.write(b"y" * (16 << 20))
print("ok")
"""
    r = execute(prog, config=cfg)
    assert (r.status, r.stdout) == ("passed", "ok\n"), r
    cg = r.cgroup
    assert cg["in_force"] is True and cg["oom_kills"] == 0 and cg["removed"] is True, cg
    assert 16 << 20 < cg["memory_peak_bytes"] < 128 << 20, cg
    assert cg["pids_max"] == 16 + sc.PIDS_OVERHEAD


@needs_cgroups
def test_the_run_cannot_have_more_tasks_than_its_pids_limit():
    prog = r"""
import errno, os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        print(n, errno.errorcode[e.errno], flush=True)
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
"""
    cfg = SandboxConfig(time_limit_s=10, max_processes=8)
    r = execute(prog, config=cfg)
    assert r.status == "passed", r
    n, err = r.stdout.split()
    assert int(n) < 8 and err == "EAGAIN", r.stdout
    assert r.cgroup["pids_max"] == 8 + sc.PIDS_OVERHEAD, r.cgroup
    # bwrap, the sandbox's init, the program and its children: never over pids.max
    peak = r.cgroup["pids_peak"]  # pids.peak: Linux 6.1+
    assert peak is None or int(n) + 3 == peak <= r.cgroup["pids_max"], r.cgroup
    assert _mine_left() == []


# Two children each spin for 1.5 s of wall clock; the parent prints the CPU seconds they used.
BUSY_CHILDREN = r"""
import os, time
pids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        t = time.monotonic()
        while time.monotonic() - t < 1.5:
            pass
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
t = os.times()
print(t.children_user + t.children_system)
"""


@needs_cgroups
@pytest.mark.skipif(
    not _STATUS.get("cpu_max_cores"),
    reason=f"no CPU cap here: {_STATUS.get('cpu_reason', _STATUS.get('reason'))}",
)
def test_the_runs_processes_together_get_no_more_cpu_than_its_cap():
    # RLIMIT_CPU is per process: each busy child may use a core of its own. The run's cgroup
    # holds them all to cpu_cores together (here a quarter of a core: 0.375 s of 1.5 s).
    cfg = SandboxConfig(time_limit_s=20, cpu_cores=0.25)
    r = execute(BUSY_CHILDREN, config=cfg)
    assert r.status == "passed", r
    capped = float(r.stdout)
    assert capped < 0.25 * 1.5 * 1.6, (capped, r.cgroup)
    assert r.cgroup["cpu_max_cores"] == 0.25 and r.cgroup["cpu_throttled_periods"] > 0, r.cgroup
    assert r.cgroup["cpu_throttled_s"] > 0 and r.limits["cpu_cores"] == 0.25, r
    # uncapped (as before): at least a core between them, whatever else the machine runs
    free = execute(BUSY_CHILDREN, config=dataclasses.replace(cfg, cpu_cores=None))
    assert free.status == "passed", free
    assert float(free.stdout) > 2 * capped, (free.stdout, capped)
    assert free.cgroup["cpu_max_cores"] is None, free.cgroup
    assert free.cgroup["cpu_reason"] == "SandboxConfig.cpu_cores=None", free.cgroup
    assert _mine_left() == []


def test_cpu_cores_must_be_a_number_of_cores():
    for bad in (0, -1, float("nan"), float("inf"), "2"):
        with pytest.raises(ConfigError, match="cpu_cores") as e:
            SandboxConfig(cpu_cores=bad)
        assert "None for no CPU cap" in e.value.hint
    assert SandboxConfig(cpu_cores=None).limits()["cpu_cores"] is None


def test_the_cpu_records_are_read_from_both_cgroup_versions(tmp_path):
    """cpu.stat as cgroup v1 and v2 write it (the v2 kernel side is not run on our machines)."""
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.mkdir()
    v2.mkdir()
    (v1 / "cpu.stat").write_text("nr_periods 40\nnr_throttled 12\nthrottled_time 750000000\n")
    (v2 / "cpu.stat").write_text(
        "usage_usec 1250000\nuser_usec 1200000\nsystem_usec 50000\nnr_periods 40\n"
        "nr_throttled 9\nthrottled_usec 500000\n"
    )

    def cg(d, version):
        return sc.RunCgroup(
            dirs=[], versions=[], memory_dir=str(d), memory_version=version, pids_dir=str(d),
            memory_bytes=1, pids_max=1, swap_capped=False, cpu_dir=str(d),
            cpu_version=version, cpu_cores=0.5,
        )  # fmt: skip

    assert cg(v1, 1)._cpu_stats() == {
        "cpu_throttled_periods": 12, "cpu_throttled_s": 0.75, "cpu_usage_s": None,
    }  # fmt: skip
    (v1 / "cpuacct.usage").write_text("2000000000\n")  # cpu,cpuacct mounted together
    assert cg(v1, 1)._cpu_stats()["cpu_usage_s"] == 2.0
    assert cg(v2, 2)._cpu_stats() == {
        "cpu_throttled_periods": 9, "cpu_throttled_s": 0.5, "cpu_usage_s": 1.25,
    }  # fmt: skip


@needs_cgroups
def test_no_cgroup_is_left_after_runs_of_every_ending():
    cfg = SandboxConfig(time_limit_s=1.5, memory_mb=64, max_output_bytes=1000)
    progs = {
        "passed": "print(1)",
        "timeout": "import time\ntime.sleep(30)",
        "output_limit": "print('x' * 10000)",
        "runtime_error": "raise SystemExit(3)",
        "memory": "a = [bytearray(1 << 20) for _ in range(200)]",
    }
    for status, prog in progs.items():
        r = execute(prog, config=cfg)
        assert r.status == status, r
        assert r.cgroup["in_force"] is True and r.cgroup["removed"] is True, r.cgroup
        assert _mine_left() == [], status


@needs_cgroups
def test_a_cgroup_left_by_a_killed_parent_is_removed_by_the_next_start(tmp_path):
    sup = sc.support(sc.DEFAULT_ROOT)
    code = (
        "from rl_pools.sandbox import SandboxConfig, execute\n"
        "execute('import time\\ntime.sleep(60)', config=SandboxConfig(time_limit_s=60))\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code])
    head = f"{sc.PREFIX}{sc.host_tag()}-{sc._pid_ns()}-{p.pid}-"
    deadline = time.monotonic() + 30
    left: list[str] = []
    seen: list[str] = []
    # the run's cgroups: the child's support check first makes (and removes) trial cgroups
    # with the same name head, so wait for a set that is still there 0.3 s later
    while time.monotonic() < deadline:
        left = sorted(os.path.join(h.parent, n) for h in sup.hierarchies
                      for n in os.listdir(h.parent) if n.startswith(head))  # fmt: skip
        if len(left) == len(sup.hierarchies) and left == seen:
            break
        seen = left
        time.sleep(0.3)
    # checked before the kill: once the parent is dead, any sandbox start may sweep its cgroup
    # (under xdist, the other worker's did, between the kill and this check: a flaky failure)
    assert len(left) == len(sup.hierarchies) and all(os.path.isdir(d) for d in left), left
    p.send_signal(signal.SIGKILL)
    p.wait()
    r = execute("print(1)", config=SandboxConfig(time_limit_s=5))
    assert r.status == "passed", r
    assert [d for d in left if os.path.exists(d)] == []


def test_cgroup_v2_is_found_through_its_mount_and_subtree_control(tmp_path):
    """The v2 branch of the discovery on a fake hierarchy (plain files): it finds this
    process's cgroup from ``0::/path``, reads cgroup.controllers, enables the controllers in
    cgroup.subtree_control and then fails honestly at the trial (no kernel behind the files).
    The kernel side of v2 is not exercised on machines whose controllers are all on v1."""
    own = tmp_path / "unified" / "job"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu io memory pids\n")
    (own / "cgroup.subtree_control").write_text("")
    mountinfo = f"41 31 0:38 / {tmp_path}/unified rw,relatime - cgroup2 cgroup2 rw\n"
    sup = sc.discover(str(tmp_path), mountinfo=mountinfo, own_cgroups="0::/job\n")
    assert not sup.usable
    # memory and pids first; then cpu with them (a plain file reads back "+memory +pids", which
    # names no controller, so all three are written the second time)
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert "could not create a cgroup" in sup.reason and "memory.max" in sup.reason, sup.reason
    (own / "cgroup.controllers").write_text("io memory pids\n")  # no cpu: not asked for
    (own / "cgroup.subtree_control").write_text("")
    sup = sc.discover(str(tmp_path), mountinfo=mountinfo, own_cgroups="0::/job\n")
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert "memory.max" in sup.reason, sup.reason
    assert [p.name for p in own.iterdir() if p.name.startswith(sc.PREFIX)] == []
    (own / "cgroup.controllers").write_text("cpu io\n")
    sup = sc.discover(str(tmp_path), mountinfo=mountinfo, own_cgroups="0::/job\n")
    assert not sup.usable and "memory and pids" in sup.reason, sup.reason
    # a v1 memory mount elsewhere than the root counts only when it is under it
    mi = "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    sup = sc.discover(str(tmp_path), mountinfo=mi, own_cgroups="4:memory:/x\n")
    assert not sup.usable and str(tmp_path) in sup.reason


def test_the_cli_prints_whether_a_cgroup_was_in_force(tmp_path):
    sluice = str(os.path.join(os.path.dirname(sys.executable), "sluice"))
    prog = tmp_path / "p.py"
    prog.write_text("print(6 * 7)\n")
    p = subprocess.run([sluice, "sandbox", "run", str(prog), "--cgroups", "off"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    obj = json.loads(p.stdout)
    assert p.returncode == 0 and obj["stdout"] == "42\n", p.stdout + p.stderr
    assert obj["cgroup"] == {"in_force": False, "reason": "SandboxConfig.cgroups='off'"}
    p = subprocess.run([sluice, "sandbox", "run", str(prog)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    obj = json.loads(p.stdout)
    assert obj["status"] == "passed" and obj["cgroup"]["in_force"] is _STATUS["in_force"], obj
    p = subprocess.run([sluice, "sandbox", "run", str(prog), "--cgroups", "maybe"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 2 and "--cgroups" in p.stderr and "auto, require, off" in p.stderr
    p = subprocess.run([sluice, "sandbox", "run", str(prog), "--cpu-cores", "-1"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 2 and "--cpu-cores" in p.stderr and "0.01 to 4096" in p.stderr
    if _STATUS.get("cpu_max_cores"):
        p = subprocess.run([sluice, "sandbox", "run", str(prog), "--cpu-cores", "0"],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
        cg = json.loads(p.stdout)["cgroup"]
        assert cg["cpu_max_cores"] is None and cg["cpu_reason"].endswith("None"), cg
