"""Attack corpus: each hostile program is contained, reported with the right status, and the
host is left intact. Only loopback traffic is ever attempted."""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading

import psutil
import pytest
from process_helpers import needs_bwrap

import rl_pools.sandbox as sandbox_mod
from rl_pools.sandbox import SandboxConfig, execute

pytestmark = needs_bwrap

FAST = SandboxConfig(time_limit_s=3, cpu_limit_s=2, memory_mb=256, max_processes=16)


def _marked_processes(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if marker in " ".join(p.info["cmdline"] or []):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def test_fork_bomb_is_capped_and_leaves_nothing_behind():
    marker = f"forkbomb-{secrets.token_hex(4)}"
    prog = f"""
import os, sys
sys.argv[0] = {marker!r}
n = 0
while True:
    try:
        if os.fork() == 0:
            os.execv("/usr/bin/sleep", ["sleep", "1000", {marker!r}])
        n += 1
    except OSError:
        print("fork refused after", n, flush=True)
        break
while True:
    pass
"""
    r = execute(prog, config=FAST)
    assert r.status == "timeout", r
    assert "fork refused after" in r.stdout
    assert int(r.stdout.split()[-1]) < FAST.max_processes
    assert _marked_processes(marker) == []


def test_memory_bomb():
    # generous time limits: the memory limit must be what stops these, even on a loaded machine
    cfg = SandboxConfig(time_limit_s=30, cpu_limit_s=20, memory_mb=256, max_processes=16)
    r = execute("x = bytearray(4 * 1024**3)", config=cfg)
    assert r.status == "memory", r
    r2 = execute("a = []\nwhile True:\n    a.append(' ' * 10**7)", config=cfg)
    assert r2.status == "memory", r2


def test_infinite_loops_cpu_and_sleeping():
    assert execute("while True: pass", config=FAST).status == "timeout"
    r = execute("import time\ntime.sleep(60)", config=SandboxConfig(time_limit_s=1))
    assert r.status == "timeout" and "wall-clock" in r.reason and r.wall_s < 30


def test_closing_stdout_and_spinning_still_times_out():
    r = execute("import os\nos.close(1)\nos.close(2)\nwhile True:\n    pass", config=FAST)
    assert r.status == "timeout", r
    r2 = execute("import os, time\nos.close(1)\nos.close(2)\ntime.sleep(60)", config=FAST)
    assert r2.status == "timeout" and r2.wall_s < 30, r2


def test_background_children_are_gone_after_the_run():
    marker = f"orphan-{secrets.token_hex(4)}"
    prog = f"""
import os, subprocess
# a daemonized busy child that closes its pipes and detaches, then the parent exits at once
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        devnull = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.execv("/usr/bin/sleep", [{marker!r}, "1000"])  # argv[0]: the marker ps shows
    os._exit(0)
subprocess.Popen([{marker!r}, "999"], executable="/usr/bin/sleep", start_new_session=True)
print("parent done")
"""
    for _ in range(5):  # execute() returns only once every process of the run is gone
        r = execute(prog, config=FAST)
        assert r.status == "passed" and r.stdout == "parent done\n"
        assert _marked_processes(marker) == []


@pytest.fixture()
def host_server():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    hits: list = []
    stop = threading.Event()

    def serve():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                c, _ = srv.accept()
                hits.append(1)
                c.close()
            except OSError:
                pass

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    yield srv.getsockname()[1], hits
    stop.set()
    th.join(timeout=2)
    srv.close()


def test_no_network_not_even_host_loopback(host_server):
    port, hits = host_server
    # the host server is reachable from the host...
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    import time

    for _ in range(100):  # let the server thread count the host's own connection
        if hits:
            break
        time.sleep(0.05)
    n_before = len(hits)
    assert n_before == 1
    prog = f"""
import json, socket
out = {{"ifaces": [n for _, n in socket.if_nameindex()]}}
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
    out["loopback"] = "connected"
except OSError as e:
    out["loopback"] = type(e).__name__
print(json.dumps(out))
"""
    r = execute(prog, config=FAST)
    assert r.status == "passed", r
    out = json.loads(r.stdout)
    assert out["ifaces"] == ["lo"]  # own namespace: only its own (down) loopback
    assert out["loopback"] != "connected"
    time.sleep(0.5)
    assert len(hits) == n_before  # nothing reached the host server


def test_writes_outside_the_work_dir_fail_or_stay_inside(tmp_path):
    project = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    host_tmp_file = f"/tmp/sluice-escape-{secrets.token_hex(4)}"
    targets = [os.path.join(project, "ESCAPED"), str(tmp_path / "ESCAPED"), "/usr/ESCAPED"]
    prog = f"""
import json
res = {{}}
for p in {targets!r} + [{host_tmp_file!r}, "/work/ok.txt"]:
    try:
        open(p, "w").write("x")
        res[p] = "written"
    except OSError as e:
        res[p] = type(e).__name__
print(json.dumps(res))
"""
    r = execute(prog, config=FAST)
    res = json.loads(r.stdout)
    for t in targets:
        assert res[t] != "written", (t, res)
        assert not os.path.exists(t)
    assert res["/work/ok.txt"] == "written"  # the throwaway work dir is writable
    assert not os.path.exists(host_tmp_file)  # /tmp inside is a private tmpfs


def test_secrets_and_home_are_not_visible():
    prog = """
import json, os
res = {}
for p in ["/etc/shadow", "/etc/passwd", "/root/.bash_history", "/root"]:
    try:
        res[p] = os.listdir(p) if os.path.isdir(p) else open(p).read()[:10]
    except OSError as e:
        res[p] = type(e).__name__
res["home"] = os.path.exists("/home")
res["uid"] = os.getuid()
print(json.dumps(res))
"""
    r = execute(prog, config=FAST)
    res = json.loads(r.stdout)
    for p in ["/etc/shadow", "/etc/passwd", "/root/.bash_history", "/root"]:
        assert res[p] == "FileNotFoundError", res
    assert res["home"] is False and res["uid"] == 65534


def test_killing_the_parent_and_everyone_leaves_the_host_alive():
    me = os.getpid()
    r1 = execute("import os\nos.kill(os.getppid(), 9)\nprint('still here')", config=FAST)
    r2 = execute("import os\nos.kill(-1, 9)\nprint('unreachable')", config=FAST)
    assert psutil.pid_exists(me) and psutil.Process(me).status() != psutil.STATUS_ZOMBIE
    assert r1.status in ("passed", "runtime_error")  # pid 1 of the namespace ignores it
    assert r2.status == "runtime_error" and "unreachable" not in r2.stdout
    # kill(-1) reaches nothing but the namespace: here there is no other process, so ESRCH
    assert "ProcessLookupError" in r2.reason or "SIGKILL" in r2.reason


def test_huge_output_is_capped():
    cfg = SandboxConfig(time_limit_s=10, max_output_bytes=100_000)
    r = execute("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", config=cfg)
    assert r.status == "output_limit" and r.stdout_truncated
    assert len(r.stdout) == 100_000
    r2 = execute("import sys\nwhile True:\n    sys.stderr.write('e' * 65536)", config=cfg)
    assert r2.status == "output_limit" and r2.stderr_truncated and len(r2.stderr) == 100_000


def test_big_file_write_is_capped():
    cfg = SandboxConfig(time_limit_s=10, max_file_mb=1)
    r = execute("open('/work/big', 'wb').write(b'x' * (5 * 1024 * 1024))", config=cfg)
    assert r.status == "output_limit" and "file size" in r.reason


def test_rm_rf_against_a_host_canary(tmp_path):
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "keep.txt").write_text("alive")
    prog = f"import os\nprint(os.system('rm -rf {canary} /tmp/* 2>&1'))\nprint(os.path.exists({str(canary)!r}))"
    r = execute(prog, config=FAST)
    assert r.status == "passed"
    assert r.stdout.strip().splitlines()[-1] == "False"  # not visible inside at all
    assert (canary / "keep.txt").read_text() == "alive"


# A real ptrace injection (x86_64): attach to the sandbox's pid 1 (bwrap's init), make it run
# prctl(PR_SET_PDEATHSIG, 0) so that it no longer dies with bwrap, then leave a daemon behind.
# Without the fixes the daemon (and pid 1) outlived the run and the parent process.
_PTRACE_ATTACK = r"""
import ctypes, os
MARK = __MARK__
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
ATTACH, DETACH, GETREGS, SETREGS, STEP, PEEK = 16, 17, 12, 13, 9, 1
class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in (
        "r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags "
        "rsp ss fs_base gs_base ds es fs gs").split()]
def pt(req, addr=0, data=None):
    ctypes.set_errno(0)
    r = libc.ptrace(req, 1, ctypes.c_void_p(addr), data)
    if r == -1 and ctypes.get_errno():
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r
def ref(regs):
    return ctypes.cast(ctypes.pointer(regs), ctypes.c_void_p)
def clear_pid1_deathsig():
    pt(ATTACH)
    os.waitpid(1, 0x40000000)  # __WALL
    saved = Regs()
    pt(GETREGS, data=ref(saved))
    if pt(PEEK, saved.rip - 2) & 0xFFFF != 0x050F:  # pid 1 sits in wait(): rip follows 'syscall'
        pt(DETACH)
        return "no syscall instruction"
    new = Regs.from_buffer_copy(saved)
    new.rax, new.rdi, new.rsi, new.rip, new.orig_rax = 157, 1, 0, saved.rip - 2, 2**64 - 1
    pt(SETREGS, data=ref(new))
    pt(STEP)
    os.waitpid(1, 0x40000000)
    after = Regs()
    pt(GETREGS, data=ref(after))
    pt(SETREGS, data=ref(saved))
    pt(DETACH)
    return "prctl returned %d" % ctypes.c_longlong(after.rax).value
try:
    print("attack:", clear_pid1_deathsig(), flush=True)
except OSError as e:
    print("attack refused:", e.errno, flush=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        fd = os.open("/dev/null", os.O_RDWR)
        for i in (0, 1, 2):
            os.dup2(fd, i)
        os.execv("/usr/bin/sleep", [MARK, "1000"])
    os._exit(0)
print("parent exits", flush=True)
"""

needs_x86_64 = pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86_64 ptrace attack")


@needs_x86_64
def test_ptrace_of_pid1_is_denied_and_nothing_outlives_the_run():
    marker = f"ptrace-daemon-{secrets.token_hex(4)}"
    prog = _PTRACE_ATTACK.replace("__MARK__", repr(marker))
    r = execute(prog, config=FAST)
    assert "attack refused: 1" in r.stdout, r  # EPERM from the seccomp filter
    assert r.status == "passed" and r.stdout.endswith("parent exits\n"), r
    assert _marked_processes(marker) == []


@needs_x86_64
def test_without_seccomp_pid1_is_still_killed_by_pid(monkeypatch):
    """Second line of defence: the attack succeeds (seccomp allows everything here), pid 1
    no longer dies with bwrap, and the parent still kills the namespace through its pidfd."""
    import pyseccomp

    def allow_all() -> bytes:
        import tempfile

        f = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
        with tempfile.TemporaryFile() as t:
            f.export_bpf(t)
            t.seek(0)
            return t.read()

    monkeypatch.setattr(sandbox_mod, "seccomp_filter", allow_all)
    marker = f"ptrace-daemon-{secrets.token_hex(4)}"
    prog = _PTRACE_ATTACK.replace("__MARK__", repr(marker))
    r = execute(prog, config=FAST)
    assert "attack: prctl returned 0" in r.stdout, r  # the injection really ran
    assert r.status == "passed", r  # and a program that exits 0 is not reported as timeout
    assert _marked_processes(marker) == []


def test_seccomp_denies_namespace_and_kernel_surface_syscalls():
    prog = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    ctypes.set_errno(0)
    r = getattr(libc, name)(*args)
    return "ok" if r >= 0 else os.strerror(ctypes.get_errno())
res = {
    "unshare_user": call("unshare", 0x10000000),
    "unshare_mount": call("unshare", 0x00020000),
    "ptrace_traceme": call("ptrace", 0, 0, None, None),
    "io_uring_setup": call("syscall", 425, 1, ctypes.create_string_buffer(120)),
    "bpf": call("syscall", 321, 0, None, 0),
    "mount": call("mount", b"none", b"/work", b"tmpfs", 0, None),
    "getpid": call("getpid"),
}
pid = os.fork()  # ordinary fork (clone without namespace flags) still works
if pid == 0:
    os._exit(7)
res["fork"] = os.WEXITSTATUS(os.waitpid(pid, 0)[1])
print(json.dumps(res))
"""
    r = execute(prog, config=FAST)
    assert r.status == "passed", r
    res = json.loads(r.stdout)
    for k in ("unshare_user", "unshare_mount", "ptrace_traceme", "io_uring_setup", "bpf", "mount"):
        assert res[k] == "Operation not permitted", res
    assert res["getpid"] == "ok" and res["fork"] == 7


def test_dev_is_read_only_and_dev_shm_is_capped():
    # The /dev flood: many files below RLIMIT_FSIZE, 4x the tmpfs cap in all. Without the fix
    # /dev was a writable, uncapped tmpfs (600 MiB measured, in host shared memory).
    cfg = SandboxConfig(time_limit_s=30, cpu_limit_s=20, tmpfs_mb=16, max_file_mb=8)
    prog = """
import json, os
res = {}
for d in ["/dev", "/dev/shm"]:
    n = 0
    try:
        for i in range(8):
            with open(f"{d}/flood{i}", "wb") as f:
                for _ in range(8):
                    f.write(b"x" * (1 << 20))
                    n += 1
        res[d] = [n, "no error"]
    except OSError as e:
        res[d] = [n, e.errno]
res["devices"] = sorted(os.listdir("/dev"))
print(json.dumps(res))
"""
    r = execute(prog, config=cfg)
    assert r.status == "passed", r
    res = json.loads(r.stdout)
    assert res["/dev"] == [0, 30], res  # EROFS: not one byte
    n_shm, err = res["/dev/shm"]
    assert err == 28 and n_shm <= cfg.tmpfs_mb, res  # ENOSPC at the tmpfs cap
    assert {"null", "zero", "urandom", "shm"} <= set(res["devices"])


def test_root_of_the_sandbox_is_read_only():
    # bwrap's new root is its own tmpfs with no size cap: a program could write files of
    # max_file_mb each at /, as many as it liked, into host shared memory (160 MiB measured with
    # tmpfs_mb=16, where the documented cap is 3 x tmpfs_mb). It is remounted read-only.
    cfg = SandboxConfig(time_limit_s=30, cpu_limit_s=20, tmpfs_mb=16, max_file_mb=8)
    prog = """
import json, os
n, err = 0, "no error"
try:
    for i in range(8):
        with open(f"/flood{i}", "wb") as f:
            for _ in range(8):
                f.write(b"x" * (1 << 20))
                n += 1
except OSError as e:
    err = e.errno
try:
    os.mkdir("/newdir")
    mk = "ok"
except OSError as e:
    mk = e.errno
w = open("/work/ok", "w").write("still writable")  # the capped tmpfs mounts stay writable
t = open("/tmp/ok", "w").write("still writable")
print(json.dumps({"n": n, "err": err, "mkdir": mk, "work": w, "tmp": t}))
"""
    r = execute(prog, config=cfg)
    assert r.status == "passed", r
    res = json.loads(r.stdout)
    assert res["n"] == 0 and res["err"] == 30, res  # EROFS: not one byte
    assert res["mkdir"] == 30, res
    assert res["work"] == res["tmp"] == len("still writable")


def test_memory_outside_the_address_space_limit_is_denied():
    # Memory a process holds without mapping it is not counted by RLIMIT_AS: memfd files
    # (RLIMIT_FSIZE each, RLIMIT_NOFILE of them) and System V shared memory segments, which
    # outlive shmdt() in the sandbox's IPC namespace (160 MiB held with memory_mb=64 each way,
    # unbounded in all). Message queues likewise hold kernel memory per queue. All three fail.
    cfg = SandboxConfig(time_limit_s=10, cpu_limit_s=5, memory_mb=64, max_file_mb=4)
    prog = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
res = {"memfd_mb": 0, "shm_mb": 0}
try:
    for i in range(40):
        fd = os.memfd_create(f"m{i}")
        for _ in range(4):
            os.write(fd, b"a" * (1 << 20))
            res["memfd_mb"] += 1
except OSError as e:
    res["memfd"] = e.errno
for i in range(10):
    ctypes.set_errno(0)
    sid = libc.shmget(0, 16 << 20, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
    if sid < 0:
        res["shmget"] = ctypes.get_errno()
        break
    addr = libc.shmat(sid, None, 0)
    ctypes.memset(addr, 1, 16 << 20)
    libc.shmdt(ctypes.c_void_p(addr))
    res["shm_mb"] += 16
ctypes.set_errno(0)
q = libc.msgget(0, 0o1000 | 0o600)
res["msgget"] = ctypes.get_errno() if q < 0 else "ok"
print(json.dumps(res))
"""
    r = execute(prog, config=cfg)
    assert r.status == "passed", r
    res = json.loads(r.stdout)
    assert res == {"memfd_mb": 0, "memfd": 1, "shm_mb": 0, "shmget": 1, "msgget": 1}, res


def test_a_program_posing_as_bwrap_is_not_a_sandbox_error(monkeypatch):
    # sandbox_error was read from the stderr bwrap shares with the program: a program that wrote
    # a "bwrap: ..." line and exited 1 became sandbox_error, which rollouts record as
    # correct=null and the GRPO reward leaves out (None), instead of a failure (0).
    prog = 'import sys\nsys.stderr.write("bwrap: Can\'t mount tmpfs: Operation not permitted\\n")\nsys.exit(1)\n'
    r = sandbox_mod.run_tests(prog, [{"kind": "stdin", "input": "", "output": "1"}], FAST)
    assert r.status == "runtime_error", r
    # bwrap's own complaints are still sandbox_error
    real = sandbox_mod._bwrap_argv

    def broken(*a, **k):
        args = real(*a, **k)
        i = args.index("--chdir")
        return args[:i] + ["--ro-bind", "/nonexistent-sluice-path", "/x"] + args[i:]

    monkeypatch.setattr(sandbox_mod, "_bwrap_argv", broken)
    r = execute("print(1)", config=FAST)
    assert r.status == "sandbox_error" and r.reason.startswith("bwrap:"), r


def test_docs_known_gaps_match_what_a_program_posing_as_bwrap_gets():
    # docs/sandbox.md listed "a program can pose as bwrap" as a known gap (52e320b) before the
    # fix (d7b7be3). The gap section must say so exactly when the code still has the gap.
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "sandbox.md").read_text()
    gaps = doc.split("### What is not isolated", 1)[1].split("\n## ", 1)[0]
    prog = 'import sys\nsys.stderr.write("bwrap: Can\'t mount tmpfs: Operation not permitted\\n")\nsys.exit(1)\n'
    posing_wins = execute(prog, config=FAST).status == "sandbox_error"
    assert ("`bwrap: ...` line" in gaps or "pose as bwrap" in gaps) == posing_wins, gaps
    table = doc.split("## The code sandbox", 1)[1].split("| status | meaning |", 1)[1]
    table = table.split("\n\n", 1)[0]
    assert ("a program printing `bwrap: ...` is a `runtime_error`" in table) != posing_wins


def test_stdin_is_read_only_no_writes_to_the_host_temp_file():
    # stdin is an anonymous file in the host's $TMPDIR; it was passed open read-write, so a
    # program could write (up to RLIMIT_FSIZE) onto the host's disk through fd 0
    prog = """
import json, os
res = {"in": os.read(0, 100).decode()}
for name, f in [("write", lambda: os.write(0, b"x" * 4096)),
                ("pwrite", lambda: os.pwrite(0, b"x" * 4096, 1 << 20)),
                ("truncate", lambda: os.ftruncate(0, 1 << 20))]:
    try:
        f()
        res[name] = "done"
    except OSError as e:
        res[name] = type(e).__name__
res["size"] = os.fstat(0).st_size
res["mode"] = os.fstat(0).st_mode & 0o777
try:  # a read-write reopen: as root it is another uid's file; as a user it is the program's own
    os.open("/proc/self/fd/0", os.O_WRONLY)
    res["reopen"] = "done"
except OSError as e:
    res["reopen"] = type(e).__name__
print(json.dumps(res))
"""
    r = execute(prog, "hello", config=FAST)
    assert r.status == "passed", r
    res = json.loads(r.stdout)
    assert res["in"] == "hello"
    assert all(res[k] != "done" for k in ("write", "pwrite", "truncate")), res
    assert res["size"] == 5
    assert res["reopen"] != "done", res
    # when Sluice runs as a normal user the sandbox's host uid owns the file: only its mode
    # (no write bit for anyone) stops a reopen through /proc/self/fd/0
    assert res["mode"] & 0o222 == 0, res


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 machine code")
def test_pid1_memory_cannot_be_written_to_escape_the_limits():
    """bwrap's init (the sandbox's pid 1) runs before prlimit, so without RLIMIT_AS, NPROC or
    CPU, as the program's own uid. /proc/1/mem was writable: code written at pid 1's syscall
    return address (from /proc/1/syscall) ran there once an orphan it reaps exited, and held
    128 MiB resident with memory_mb=64 (any amount, or ~96k processes, could have followed)."""
    prog = r"""
import json, os, time
res = {}
mmap_and_pause = bytes.fromhex(  # mmap(0, 128 MiB, RW, PRIVATE|ANON|POPULATE); pause() forever
    "b809000000" "31ff" "be00000008" "ba03000000" "41ba22800000" "49c7c0ffffffff" "4531c9"
    "0f05" "b822000000" "0f05" "ebf7")
try:
    pc = int(open("/proc/1/syscall").read().split()[-1], 16)
    with open("/proc/1/mem", "r+b", buffering=0) as m:
        m.seek(pc)
        m.write(mmap_and_pause)
    res["write"] = "ok"
except (OSError, ValueError, IndexError) as e:
    res["write"] = type(e).__name__
pid = os.fork()
if pid == 0:  # an orphan for pid 1 to reap: its wait4() returns into the injected code
    if os.fork() == 0:
        time.sleep(0.2)
        os._exit(0)
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(1.0)
try:
    st = open("/proc/1/status").read()
    res["pid1_rss_kb"] = int([ln for ln in st.splitlines() if ln.startswith("VmRSS")][0].split()[1])
except (OSError, IndexError) as e:
    res["pid1_rss_kb"] = type(e).__name__
print(json.dumps(res), flush=True)
"""
    r = execute(prog, config=SandboxConfig(time_limit_s=4, memory_mb=64))
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["write"] != "ok", res
    rss = res["pid1_rss_kb"]
    assert not isinstance(rss, int) or rss < 64 * 1024, res


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 system-call numbers")
def test_limits_shared_by_every_sandbox_cannot_be_exhausted_by_one():
    """Every sandbox runs as host uid 65534, and a few kernel limits are counted for that uid
    across all user namespaces: one run holding 128 inotify instances (max_user_instances) made
    inotify_init fail in every concurrent run (tested with two runs side by side), and POSIX
    message queues draw on one RLIMIT_MSGQUEUE budget. Both system calls are denied now."""
    prog = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    ctypes.set_errno(0)
    r = getattr(libc, name)(*args)
    return "ok" if r >= 0 else os.strerror(ctypes.get_errno())
print(json.dumps({
    "inotify_init1": call("inotify_init1", 0),
    "inotify_init": call("syscall", 253),
    "mq_open": call("syscall", 240, b"sluice-q", os.O_CREAT | os.O_RDWR, 0o600, None),
}))
"""
    r = execute(prog, config=FAST)
    assert r.status == "passed", r
    res = json.loads(r.stdout)
    assert all(v == "Operation not permitted" for v in res.values()), res
