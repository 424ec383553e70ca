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

from rl_pools.sandbox import SandboxConfig, execute

pytestmark = pytest.mark.skipif(
    not os.path.exists("/usr/bin/bwrap"), reason="bubblewrap missing: apt-get install bubblewrap"
)

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
        os.execv("/usr/bin/sleep", ["sleep", "1000", {marker!r}])
    os._exit(0)
subprocess.Popen(["/usr/bin/sleep", "999", {marker!r}], start_new_session=True)
print("parent done")
"""
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
