"""How the `sluice` process ends (flows.cli.run): exit codes as click and main() give them,
atexit hooks run and output flushed before the process skips native teardown."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from process_helpers import gsm8k_scan_argv

REPO = Path(__file__).resolve().parents[2]

# An atexit hook registered before the command runs must still run, after the command's output;
# an object left in sys.modules is finalized only by the interpreter's teardown, which the
# process skips (its __del__ would print).
_PROBES = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('hook ran', flush=True))\n"
    "class Probe:\n"
    "    def __del__(self): print('finalized', flush=True)\n"
    "sys.modules['_sluice_exit_probe'] = Probe()\n"
)
_PRELUDE = _PROBES + "sys.argv = ['sluice', *sys.argv[1:]]\nfrom flows.cli import run\nrun()\n"


def _run(*args: str, env: dict | None = None, code: str = _PRELUDE) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def test_success_flushes_output_then_runs_the_hooks():
    res = _run("--version")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0].startswith("sluice ")
    assert res.stdout.splitlines()[-1] == "hook ran"  # and no "finalized": teardown skipped


def test_a_sluice_error_keeps_exit_code_2_and_its_one_line(tmp_path):
    res = _run("datasets", "show", "nope", env={"SLUICE_DATA_ROOT": str(tmp_path)})
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and res.stderr.startswith("error:")
    # one line however long (the root's path makes it wider than 80 columns): not folded at
    # the width rich assumes without a terminal
    assert res.stderr.splitlines() == [
        f"error: no dataset named 'nope' in the catalog at {tmp_path} (available: (none))"
    ], res.stderr
    assert len(res.stderr.rstrip()) > 80
    assert res.stdout.strip() == "hook ran"


def test_a_usage_error_keeps_clicks_exit_code():
    res = _run("datasets", "show")
    assert res.returncode == 2 and "Missing argument" in res.stderr
    assert res.stdout.strip() == "hook ran"


def test_the_console_script_and_python_m_use_run():
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["sluice"] == "flows.cli:run"
    # python -m flows.cli, as runpy runs it
    code = _PROBES + "import runpy\nrunpy.run_module('flows.cli', run_name='__main__')\n"
    res = _run("--version", code=code)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("sluice ") and res.stdout.splitlines()[-1] == "hook ran"


def test_main_called_in_process_leaves_the_interpreter_to_end_normally():
    res = _run(code=_PROBES + "from flows.cli import main\nmain(['--version'])\n")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-2:] == ["hook ran", "finalized"]


def test_brackets_in_help_and_errors_are_printed_as_written(tmp_path):
    """Help and errors go through rich markup: [selection], [[stages]] must not vanish."""
    wide = {"COLUMNS": "250", "TERM": "dumb"}
    res = _run("rl", "select", "--help", env=wide)
    assert "TOML with [selection] steps (and [tiers], [curriculum])" in res.stdout, res.stdout
    res = _run("sft", "build", "--help", env=wide)
    assert "TOML/YAML with an [sft.filters] table" in res.stdout, res.stdout
    res = _run("ingest", "--help", env=wide)
    assert "hf://<repo>[:<config>][@<revision>]#<split>" in res.stdout, res.stdout
    cfg = tmp_path / "t.toml"
    cfg.write_text('name = "t"\n[model]\nname_or_path = "m"\n[[stages]]\nname = "s"\n'
                   'pools = ["p@latest"]\nepochs = 1\ntemprature = 1\n')  # fmt: skip
    res = _run("train", "grpo", str(cfg), env=wide)
    assert res.returncode == 2 and "in [[stages]] entry 0" in res.stderr, res.stderr


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


_SCAN_CODE = "import sys\nsys.argv = ['sluice', *sys.argv[1:]]\nfrom flows.cli import run\nrun()\n"


def _scan_argv(tmp_path, pools_dir, benchmarks_dir) -> list[str]:
    """`decontam run` of 4000 GSM8K questions in batches of 200, with 2 scan workers."""
    return gsm8k_scan_argv(tmp_path, pools_dir, benchmarks_dir, workers=2, publish_as=None)


def _start_sharded_scan(tmp_path, pools_dir, benchmarks_dir):
    """Start the scan above in its own process group (as in a terminal) with TMPDIR in
    ``tmp_path``; return (process, TMPDIR) once its scan workers run."""
    import signal
    import time

    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _SCAN_CODE, *_scan_argv(tmp_path, pools_dir, benchmarks_dir)],
        env=env, cwd=REPO, stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, as in a terminal
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # not a background job
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not list(tmp.glob("sluice-workers-*")) or len(_children(proc.pid)) < 2:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "the scan workers never started"
        time.sleep(0.1)
    return proc, tmp


@pytest.mark.parametrize(
    ("signame", "exit_code", "said"),
    [("SIGTERM", 143, "stopped by SIGTERM"), ("SIGINT", 130, "interrupted (SIGINT, Ctrl-C)")],
)
def test_a_stop_signal_mid_scan_ends_the_workers_and_removes_their_temp_files(
    tmp_path, pools_dir, benchmarks_dir, signame, exit_code, said
):
    """A nightly job stopped by its scheduler (SIGTERM) or Ctrl-C mid-scan: the scan workers
    end, their batch and scratch folders are removed, nothing is left in --out, the exit is
    143 / 130 and stderr says why. The signal goes to the whole process group, as a terminal's
    Ctrl-C and systemd's stop do: a worker still importing took the SIGINT itself and printed
    Python's KeyboardInterrupt traceback ("Exception in initializer:")."""
    import signal
    import time

    proc, tmp = _start_sharded_scan(tmp_path, pools_dir, benchmarks_dir)
    shm = Path("/dev/shm")
    time.sleep(1.0)  # mid-scan: batches in flight
    kids = _children(proc.pid)
    os.killpg(proc.pid, getattr(signal, signame))
    err = proc.communicate(timeout=60)[1].decode()
    assert proc.returncode == exit_code, err
    assert "Traceback" not in err and f"sluice: {said}" in err
    deadline = time.monotonic() + 10  # multiprocessing's resource tracker ends on its own
    while [k for k in kids if Path(f"/proc/{k}").exists()] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [k for k in kids if Path(f"/proc/{k}").exists()] == []
    assert list(tmp.glob("sluice-workers-*")) + list(tmp.glob("sluice-batches-*")) == []
    assert list(shm.glob(f"sluice-batches-{proc.pid}-*")) == []
    assert not (tmp_path / "run" / "run.json").exists()


def test_a_rerun_after_a_crash_mid_scan_removes_the_dead_runs_batches_and_scratch(
    tmp_path, pools_dir, benchmarks_dir
):
    """A run killed outright mid-scan (SIGKILL to sluice alone, the OOM killer) cannot remove
    its batch folder (in /dev/shm: memory until the machine restarts) nor its scratch folder
    (the pickled fitted detectors); every rerun left them there. The next sharded scan removes
    those of runs whose process is gone."""
    import time

    from decontam.stream import _memory_dir

    proc, tmp = _start_sharded_scan(tmp_path, pools_dir, benchmarks_dir)
    memory = Path(_memory_dir() or tmp)
    deadline = time.monotonic() + 60
    while not list(memory.glob(f"sluice-batches-{proc.pid}-*")):
        assert time.monotonic() < deadline, "no batch folder"
        time.sleep(0.05)
    kids = _children(proc.pid)
    proc.kill()  # the parent only: a crash
    proc.communicate(timeout=60)
    for k in kids:  # its workers end when their parent is gone; wait for that
        while Path(f"/proc/{k}").exists() and time.monotonic() < deadline + 60:
            time.sleep(0.1)
    left = list(memory.glob(f"sluice-batches-{proc.pid}-*")) + list(tmp.glob("sluice-workers-*"))
    assert left  # what the crash left behind
    res = subprocess.run(
        [sys.executable, "-c", _SCAN_CODE, *_scan_argv(tmp_path, pools_dir, benchmarks_dir)],
        env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp)}, cwd=REPO,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert [p for p in left if p.exists()] == []
    assert list(tmp.glob("sluice-workers-*")) + list(tmp.glob("sluice-batches-*")) == []
