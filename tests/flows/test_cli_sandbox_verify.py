"""The external contract of `sluice sandbox run` and `sluice verify math`, via the real binary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from process_helpers import needs_bwrap

SLUICE = str(Path(sys.executable).parent / "sluice")


def _sluice(*args: str, timeout: float = 120) -> tuple[int, dict | None, str]:
    p = subprocess.run([SLUICE, *args], capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    obj = json.loads(lines[0]) if len(lines) == 1 else None
    return p.returncode, obj, p.stdout + p.stderr


@needs_bwrap
def test_sandbox_run_prints_one_json_object(tmp_path):
    prog = tmp_path / "add.py"
    prog.write_text("a, b = map(int, input().split())\nprint(a + b)\n")
    inp = tmp_path / "in.txt"
    inp.write_text("20 22\n")
    rc, obj, raw = _sluice("sandbox", "run", str(prog), "--stdin", str(inp), "--time-limit", "3")
    assert rc == 0 and obj is not None, raw
    assert obj["status"] == "passed" and obj["exit_code"] == 0 and obj["stdout"] == "42\n"
    assert isinstance(obj["wall_s"], float) and "stderr" in obj
    assert obj["limits"]["time_limit_s"] == 3.0


@needs_bwrap
def test_sandbox_run_reports_program_failures_with_exit_code_zero(tmp_path):
    loop = tmp_path / "loop.py"
    loop.write_text("while True:\n    pass\n")
    rc, obj, raw = _sluice("sandbox", "run", str(loop), "--time-limit", "1")
    assert rc == 0 and obj["status"] == "timeout", raw
    hog = tmp_path / "hog.py"
    hog.write_text("x = bytearray(1024 * 1024 * 1024)\n")
    rc, obj, raw = _sluice("sandbox", "run", str(hog), "--memory-mb", "128")
    assert rc == 0 and obj["status"] == "memory" and obj["limits"]["memory_mb"] == 128, raw
    crash = tmp_path / "crash.py"
    crash.write_text("import sys\nprint('partial')\nsys.exit(3)\n")
    rc, obj, raw = _sluice("sandbox", "run", str(crash))
    assert rc == 0 and obj["status"] == "runtime_error" and obj["exit_code"] == 3, raw
    assert obj["stdout"] == "partial\n"


# `sluice sandbox run` with bwrap made to fail (a bind of a path that does not exist): bwrap's
# own complaint, as a real setup fault gives it
_BROKEN_BWRAP = """
import sys
import rl_pools.sandbox as sb
real = sb._bwrap_argv
def broken(*a, **k):
    args = real(*a, **k)
    i = args.index("--chdir")
    return args[:i] + ["--ro-bind", "/nonexistent-sluice-path", "/x"] + args[i:]
sb._bwrap_argv = broken
from flows.cli import run
sys.argv = ["sluice", *sys.argv[1:]]
run()
"""


@needs_bwrap
def test_sandbox_run_exits_2_when_the_sandbox_failed(tmp_path):
    """status sandbox_error (the program never ran) exited 0, as if the sandbox had worked; a
    private $TMPDIR (mode 0700, pam_tmpdir) gave it on every run as root. Now: the JSON, then
    one error line, exit 2 (a tool error, as the help says); a private $TMPDIR just works."""
    import os

    prog = tmp_path / "p.py"
    prog.write_text("print(1)\n")
    p = subprocess.run([sys.executable, "-c", _BROKEN_BWRAP, "sandbox", "run", str(prog)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 2, (p.stdout, p.stderr)
    obj = json.loads(p.stdout)
    assert obj["status"] == "sandbox_error" and obj["reason"].startswith("bwrap:"), obj
    err = p.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("error: the sandbox failed") and str(prog) in err, err
    assert "Can't find source path /nonexistent-sluice-path" in err, err
    private = tmp_path / "privtmp"
    private.mkdir(mode=0o700)
    p = subprocess.run([SLUICE, "sandbox", "run", str(prog)], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "TMPDIR": str(private)})  # fmt: skip
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert json.loads(p.stdout)["stdout"] == "1\n"


def test_sandbox_run_missing_program_is_a_tool_error(tmp_path):
    # a tool error: exit 2 and one line naming the path, never a traceback (exit 1) that
    # happens to contain "not found", nor a JSON object as if the program had run
    missing = tmp_path / "nope.py"
    rc, obj, raw = _sluice("sandbox", "run", str(missing))
    assert rc == 2 and obj is None, raw
    assert raw.strip() == f"error: program {missing} not found (pass the path of a .py file)", raw


def test_verify_math_prints_one_json_object():
    rc, obj, raw = _sluice(
        "verify", "math", "--answer", r"so \boxed{\frac{1}{2}}", "--reference", "0.5"
    )
    assert rc == 0 and obj is not None, raw
    assert obj["status"] == "correct" and obj["extracted"] == r"\frac{1}{2}" and obj["reason"]
    rc, obj, raw = _sluice("verify", "math", "--answer", "no idea", "--reference", "3")
    assert rc == 0 and obj["status"] == "no_answer", raw
    rc, obj, raw = _sluice(
        "verify", "math", "--answer", r"\boxed{9^{9^{9^{9}}}}", "--reference", "1", "--timeout", "1"
    )
    assert rc == 0 and obj["status"] == "timeout", raw


def test_verify_math_reads_a_whole_trace_from_a_file_or_stdin(tmp_path, pools_dir):
    """A real R1-distilled trace (thousands of characters, $ and backslashes) is read from a
    file or from standard input, with the same verdict as its final boxed answer alone."""
    src = pools_dir / "sft_r1distill_math_traces_thoughtanchors.jsonl"
    row = json.loads(src.open(encoding="utf-8").readline())
    sol, ref = row["solutions"][0]["solution"], row["gt_answer"]
    assert len(sol) > 1000 and "$" in sol and "\\" in sol
    trace = tmp_path / "trace.txt"
    trace.write_text(sol, encoding="utf-8")
    rc, obj, raw = _sluice("verify", "math", "--answer-file", str(trace), "--reference", ref)
    assert rc == 0 and obj is not None, raw
    assert obj["status"] == ("correct" if row["solutions"][0]["is_correct"] else "incorrect")
    p = subprocess.run([SLUICE, "verify", "math", "--answer-file", "-", "--reference", ref],
                       input=sol, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr
    from_stdin = json.loads(p.stdout)
    assert {**from_stdin, "elapsed_s": 0} == {**obj, "elapsed_s": 0}
    rc, alone, raw = _sluice("verify", "math", "--answer", obj["extracted"], "--reference", ref)
    assert alone["status"] == obj["status"], raw
    for args, msg in (([], "--answer TEXT or --answer-file PATH"),
                      (["--answer", "1", "--answer-file", str(trace)], "--answer TEXT or --answer-file"),
                      (["--answer-file", str(tmp_path / "nope.txt")], "answer file not found"),
                      (["--answer-file", str(tmp_path)], "answer file is a folder")):  # fmt: skip
        rc, _, raw = _sluice("verify", "math", *args, "--reference", "1")
        assert rc == 2 and msg in raw and "Traceback" not in raw, raw
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("r\xe9ponse \\boxed{1}".encode("latin-1"))
    rc, _, raw = _sluice("verify", "math", "--answer-file", str(bad), "--reference", "1")
    assert rc == 2 and "not UTF-8" in raw and str(bad) in raw, raw


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1"])
def test_non_finite_limits_are_refused_like_zero(tmp_path, value):
    """A NaN timeout would turn the hard deadline off (every comparison with NaN is false), an
    infinite one overflowed: both are refused by the typed configs, like 0 and -1."""
    rc, _, raw = _sluice(
        "verify", "math", "--answer", r"\boxed{1}", "--reference", "1", "--timeout", value
    )
    assert rc == 2 and "timeout_s must be a finite number > 0" in raw, raw
    assert "--timeout" in raw, raw  # the line names the option the user typed
    assert "Traceback" not in raw
    prog = tmp_path / "ok.py"
    prog.write_text("print(1)\n")
    rc, _, raw = _sluice("sandbox", "run", str(prog), "--time-limit", value)
    assert rc == 2 and "SandboxConfig.time_limit_s must be" in raw, raw
    assert "--time-limit" in raw, raw
    assert "Traceback" not in raw
    rc, _, raw = _sluice("sandbox", "run", str(prog), "--memory-mb", "8")
    assert rc == 2 and "--memory-mb" in raw and "Traceback" not in raw, raw


@needs_bwrap
def test_sandbox_run_runs_the_file_bytes_unchanged(tmp_path):
    """A Latin-1 program (coding line, an é byte in a string literal) runs as the file is: the
    string is 4 characters, as `python3 prog.py` prints. The CLI decoded the file as UTF-8 with
    errors='replace' and ran a different program ('caf\\ufffd', 6 characters after re-encoding)."""
    prog = tmp_path / "latin1.py"
    prog.write_bytes(b'# -*- coding: latin-1 -*-\ns = "caf\xe9"\nprint(len(s), ascii(s))\n')
    host = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, timeout=60)
    assert host.stdout == "4 'caf\\xe9'\n"
    # python -m from the checkout: the code under test, not whichever install `sluice` points at
    p = subprocess.run([sys.executable, "-m", "flows.cli", "sandbox", "run", str(prog)],
                       cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    obj = json.loads(p.stdout)
    assert obj["status"] == "passed" and obj["stdout"] == host.stdout, obj
    # Not UTF-8 and no coding line: Python's own error for the file, as on the host.
    bad = tmp_path / "bad.py"
    bad.write_bytes(b'print("caf\xe9")\n')
    p = subprocess.run([sys.executable, "-m", "flows.cli", "sandbox", "run", str(bad)],
                       cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    obj = json.loads(p.stdout)
    assert obj["status"] == "runtime_error" and "SyntaxError" in obj["stderr"], obj
    assert "Non-UTF-8" in obj["stderr"], obj


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["sandbox", "run", "PROG", "--time-limit", "1e12"], "--time-limit"),
        (["sandbox", "run", "PROG", "--time-limit", "1e308"], "--time-limit"),
        (["sandbox", "run", "PROG", "--memory-mb", "99999999999999"], "--memory-mb"),
        (["verify", "math", "--answer", "1", "--reference", "1", "--timeout", "1e12"], "--timeout"),
        (
            ["verify", "math", "--answer", "1", "--reference", "1", "--timeout", "1e308"],
            "--timeout",
        ),
    ],
)
def test_huge_limits_are_one_error_line(tmp_path, args, option):
    """Finite but huge limits overflowed poll()/select() (an OverflowError traceback), and a huge
    --memory-mb reached prlimit, which failed and was reported as the program's runtime_error."""
    prog = tmp_path / "ok.py"
    prog.write_text("print(1)\n")
    rc, obj, raw = _sluice(*[str(prog) if a == "PROG" else a for a in args])
    assert rc == 2 and obj is None, raw
    assert option in raw and "at most" in raw and "Traceback" not in raw, raw


def test_sandbox_run_folder_arguments_say_folder(tmp_path):
    """A folder given as the program or as --stdin was reported "not found", which sends the
    user looking for a path that exists."""
    prog = tmp_path / "ok.py"
    prog.write_text("print(1)\n")
    for args, what in ((["sandbox", "run", str(tmp_path)], "program"),
                       (["sandbox", "run", str(prog), "--stdin", str(tmp_path)], "--stdin")):  # fmt: skip
        rc, obj, raw = _sluice(*args)
        assert rc == 2 and obj is None, raw
        assert "is a folder" in raw and str(tmp_path) in raw and what in raw, raw
        assert "not found" not in raw and "Traceback" not in raw, raw
    # a device is refused up front (it was "not found" too; /dev/zero must never be read whole)
    rc, obj, raw = _sluice("sandbox", "run", str(prog), "--stdin", "/dev/zero", timeout=60)
    assert rc == 2 and "not a regular file" in raw and "Traceback" not in raw, raw
