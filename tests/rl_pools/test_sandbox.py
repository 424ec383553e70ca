"""The sandbox runs programs and grades them; never a silent pass."""

from __future__ import annotations

import json
import os

import pytest
from process_helpers import needs_bwrap

from curation.errors import ConfigError
from rl_pools.sandbox import (
    SandboxConfig,
    SandboxUnavailable,
    TestCase,
    execute,
    outputs_match,
    run_many,
    run_tests,
)

pytestmark = needs_bwrap

CFG = SandboxConfig(time_limit_s=5)
ADD = "a, b = map(int, input().split())\nprint(a + b)\n"


def test_plain_run_reads_stdin_and_reports_exit_code():
    r = execute("import sys\nprint(sys.stdin.read()[::-1])", "abc", CFG)
    assert (r.status, r.exit_code, r.stdout) == ("passed", 0, "cba\n")
    bad = execute("raise ValueError('boom')", "", CFG)
    assert bad.status == "runtime_error" and bad.exit_code == 1
    assert "ValueError: boom" in bad.stderr and "boom" in bad.reason
    assert json.loads(bad.to_json())["status"] == "runtime_error"


def test_stdin_tests_pass_and_fail_with_index_expected_got():
    tests = [
        {"kind": "stdin", "input": "1 2\n", "output": "3\n"},
        {"kind": "stdin", "input": "2 2\n", "output": "4   \n\n\n"},  # trailing ws ignored
        {"kind": "stdin", "input": "5 5\n", "output": "11\n"},
        {"kind": "stdin", "input": "1 1\n", "output": "2\n"},
    ]
    r = run_tests(ADD, tests, CFG)
    assert r.status == "failed" and r.failed_test == 2
    assert (r.expected, r.got.strip()) == ("11\n", "10")
    assert r.n_passed == 2 and len(r.tests) == 3  # stopped at the first failure
    all_r = run_tests(ADD, tests, SandboxConfig(stop_on_first_failure=False))
    assert all_r.status == "failed" and all_r.n_passed == 3 and len(all_r.tests) == 4
    ok = run_tests(ADD, tests[:2] + tests[3:], CFG)
    assert ok.status == "passed" and ok.n_passed == ok.n_tests == 3


def test_sys_exit_zero_before_printing_fails_the_comparison():
    prog = "import sys\nsys.exit(0)\n" + ADD
    r = run_tests(prog, [{"kind": "stdin", "input": "1 2", "output": "3"}], CFG)
    assert r.status == "failed"


def test_right_output_but_crash_is_not_a_pass():
    prog = "print(3)\nraise SystemExit(3)"
    r = run_tests(prog, [{"kind": "stdin", "input": "", "output": "3"}], CFG)
    assert r.status == "runtime_error"


def test_output_comparison_rules():
    assert outputs_match("1 2\n3", "1 2   \r\n3\n\n")
    assert not outputs_match("1 2\n3", "1  2\n3")  # inner whitespace counts
    assert not outputs_match("0.3333", "0.33333")
    assert outputs_match("0.3333", "0.33333", float_tolerance=1e-3)
    assert not outputs_match("abc", "abd", float_tolerance=1.0)


LEET = """
from typing import List
class Solution:
    def twoSum(self, nums: List[int], target: int) -> List[int]:
        m = {}
        for i, x in enumerate(nums):
            if target - x in m:
                return [m[target - x], i]
            m[x] = i
"""
CHECK = "def check(candidate):\n    assert candidate(nums=[2,7,11,15], target=9) == [0,1]\n"


def test_functional_check_function_and_io_pairs():
    tests = [
        TestCase("functional", CHECK, None, "Solution().twoSum"),
        TestCase("functional", "nums = [3,2,4], target = 6", "[1,2]", "Solution().twoSum"),
        TestCase("functional", "[3,3], 6", "[0,1]", "Solution().twoSum"),
    ]
    assert run_tests(LEET, tests, CFG).status == "passed"
    wrong = TestCase("functional", "nums = [3,2,4], target = 6", "[0,2]", "Solution().twoSum")
    r = run_tests(LEET, [wrong], CFG)
    assert r.status == "failed" and r.got == "[1, 2]" and r.expected == "[0,2]"
    bad_check = "def check(candidate):\n    assert candidate([1,2], 3) == [1,0]\n"
    r2 = run_tests(LEET, [TestCase("functional", bad_check, None, "Solution().twoSum")], CFG)
    # a check() of `assert candidate(...) == LITERAL` lines is compared outside the sandbox:
    # the failing assert is named with its expected and returned values
    assert r2.status == "failed" and "assert 1 of check()" in r2.reason
    assert (r2.expected, r2.got) == ("[1,0]", "[0, 1]")
    # helper code in check() runs in the sandbox as written: a failing assert fails the test
    helper = "def check(candidate):\n    want = [1,0]\n    assert candidate([1,2], 3) == want\n"
    r3 = run_tests(LEET, [TestCase("functional", helper, None, "Solution().twoSum")], CFG)
    assert r3.status == "failed" and "AssertionError" in r3.reason + r3.tests[0].stderr


def test_functional_harness_needs_the_nonce():
    # exits 0 before the harness can run check(): must not pass
    early = "import os\nos._exit(0)\n" + LEET
    r = run_tests(early, [TestCase("functional", CHECK, None, "Solution().twoSum")], CFG)
    assert r.status == "failed" and "did not finish" in r.reason
    # prints something that looks like success, then exits
    fake = "print('OK passed True')\nimport sys\nsys.exit(0)\n" + LEET
    r = run_tests(fake, [TestCase("functional", CHECK, None, "Solution().twoSum")], CFG)
    assert r.status == "failed"


def test_total_time_limit_stops_the_run():
    prog = "import time\ntime.sleep(0.6)\nprint(1)"
    tests = [{"kind": "stdin", "input": "", "output": "1"}] * 5
    r = run_tests(prog, tests, SandboxConfig(time_limit_s=5, total_time_limit_s=1.5))
    assert r.status == "timeout" and r.n_passed < 5


def test_no_tests_is_not_a_pass():
    assert run_tests(ADD, [], CFG).status == "sandbox_error"


def test_run_many_keeps_order():
    jobs = [(ADD, [{"kind": "stdin", "input": f"{i} 1", "output": str(i + 1)}]) for i in range(4)]
    jobs.append((ADD, [{"kind": "stdin", "input": "1 1", "output": "3"}]))
    res = run_many(jobs, CFG, workers=2)
    assert [r.status for r in res] == ["passed"] * 4 + ["failed"]


def test_text_that_is_not_valid_unicode_is_graded_not_raised():
    # A lone surrogate (what json.loads makes of a response holding "\\ud800") in a program or a
    # test input raised UnicodeEncodeError while writing the sandbox's files: run_many lost the
    # whole batch. The text's bytes go in as they are; the program fails like any broken one.
    jobs = [
        ('print("\ud800")', [{"kind": "stdin", "input": "", "output": "x"}]),
        (ADD, [{"kind": "stdin", "input": "1 1\ud800", "output": "2"}]),
        ("def f(x):\n    return '\ud800'", [TestCase("functional", "1", "1", "f")]),
        (ADD, [{"kind": "stdin", "input": "1 1", "output": "2"}]),
    ]
    res = run_many(jobs, CFG, workers=2)
    assert [r.status for r in res] == ["runtime_error"] * 3 + ["passed"], res
    assert execute('print("\ud800")', "\ud800", CFG).status == "runtime_error"


def test_a_failed_write_of_the_program_files_leaves_no_host_folder(monkeypatch, tmp_path):
    # The host folder was created before the files were written; a write that failed (a full
    # disk, or before the fix a lone surrogate) raised from __init__ and left the folder behind.
    import rl_pools.sandbox as sb

    monkeypatch.setattr(sb.tempfile, "tempdir", str(tmp_path))
    real_chmod = os.chmod

    def full_disk(path, mode):
        if str(path).endswith(".py"):
            raise OSError(28, "No space left on device")
        return real_chmod(path, mode)

    monkeypatch.setattr(sb.os, "chmod", full_disk)
    with pytest.raises(OSError):
        execute("print(1)", "", CFG)
    assert list(tmp_path.iterdir()) == []


def test_missing_bwrap_names_the_fix():
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        execute("print(1)", config=SandboxConfig(bwrap="/nonexistent/bwrap"))


def test_config_validation():
    with pytest.raises(ConfigError):
        SandboxConfig(time_limit_s=0)
    with pytest.raises(ConfigError):
        SandboxConfig(memory_mb=8)
    with pytest.raises(ConfigError):
        TestCase("functional", "x", "1")  # no entry point


@pytest.mark.parametrize(
    ("test", "field"),
    [
        ({"input": 5, "output": "5\n"}, "input"),
        ({"input": "", "output": 1}, "output"),
        ({"kind": "functional", "input": "1", "output": "1", "entry_point": 3}, "entry_point"),
    ],
)
def test_a_test_field_of_the_wrong_type_is_a_config_error(test, field):
    """A test whose input/output is not text (a JSON number) raised AttributeError from a grading
    thread, sinking a run_many batch with a traceback that named no field."""
    with pytest.raises(ConfigError, match=field):
        run_tests("print(1)", [test])
    with pytest.raises(ConfigError, match=field):
        run_many([("print(1)", [test])])


def test_a_private_tmpdir_still_runs_programs(tmp_path, monkeypatch):
    """With $TMPDIR private (mode 0700, as pam_tmpdir makes it) and sluice running as root,
    bwrap (dropped to uid 65534) could not reach the program folder made there: every run was
    sandbox_error "Can't find source path ...: Permission denied", and `rl validate` dropped
    every code problem of a pool. The program folder now goes where the sandbox uid reaches."""
    import tempfile

    private = tmp_path / "privtmp"
    private.mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    assert tempfile.gettempdir() == str(private)
    r = execute("print(input()[::-1])", "abc\n", CFG)
    assert (r.status, r.stdout) == ("passed", "cba\n"), r
    t = run_tests(ADD, [TestCase("stdin", "1 2\n", "3\n")], CFG)
    assert t.status == "passed", t
    assert not list(private.iterdir())  # nothing left behind, wherever it went


@pytest.mark.skipif(os.geteuid() != 0, reason="as another user bwrap runs as that user")
def test_a_tmpdir_the_sandbox_uid_cannot_reach_is_unavailable_naming_it(tmp_path, monkeypatch):
    """Where no temp folder is reachable by the sandbox uid, the sandbox refuses to start with
    one error naming $TMPDIR and the fix, before any run (not a sandbox_error per run)."""
    import tempfile

    from rl_pools import sandbox as sandbox_mod

    private = tmp_path / "privtmp"
    private.mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    monkeypatch.setattr(sandbox_mod, "_HOST_DIR_FALLBACKS", ())
    with pytest.raises(SandboxUnavailable, match=f"cannot reach the temp folder {private}") as e:
        execute("print(1)", "", CFG)
    assert "TMPDIR" in str(e.value) and "o+x" in e.value.hint
    with pytest.raises(SandboxUnavailable):
        run_many([(ADD, [TestCase("stdin", "1 2\n", "3\n")])], CFG)
    private.chmod(0o711)  # traversable: used as it is
    monkeypatch.setattr(sandbox_mod, "_HOST_DIR_FALLBACKS", ("/nonexistent-sluice",))
    parents_ok = all(os.stat(p).st_mode & 0o001 for p in private.parents)
    if parents_ok:
        assert execute("print(1)", "", CFG).status == "passed"
