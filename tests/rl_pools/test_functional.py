"""Functional tests compared outside the sandbox (rl_pools.functional): the literal reader,
which tests get a host plan, and the reward hacks an in-process comparison rewarded."""

from __future__ import annotations

import json
import math

import pytest
from process_helpers import needs_bwrap
from test_testcases import _records, _rows

from rl_pools.functional import NotALiteral, host_plan, read_literal, values_equal
from rl_pools.sandbox import SandboxConfig, TestCase, run_tests

CFG = SandboxConfig(time_limit_s=5, cpu_limit_s=4, memory_mb=256)


def test_read_literal_reads_plain_values_and_runs_nothing():
    assert read_literal("[0,1]") == [0, 1]
    assert read_literal(" (1, 'a', b'x', None) ") == (1, "a", b"x", None)
    assert read_literal("[null, true, false, -3, +2.5]") == [None, True, False, -3, 2.5]
    assert read_literal("{'a': [1, {2, 3}], (1, 2): set()}") == {"a": [1, {2, 3}], (1, 2): set()}
    assert read_literal("-inf") == -math.inf and math.isnan(read_literal("nan"))
    for text in ("__import__('os').system('true')", "[1] * 3", "x", "...", "1 + 2",
                 "print(1)", "{**d}", "-'a'", "1j", "[1,", "{[1]: 2}"):  # fmt: skip
        with pytest.raises(NotALiteral):
            read_literal(text)


def test_host_plan_takes_literal_asserts_and_leaves_helper_code_in_the_sandbox(pools_dir):
    # real DeepCoder LeetCode tests: `assert candidate(...) == LITERAL` lines, then a call
    row = json.loads(open(pools_dir / "code_deepcoder_leetcode_train.jsonl").readline())
    code = row["tests"]["functional"]
    plan = host_plan(code, None)
    assert plan is not None and not plan.tolerance
    assert [c.args for c in plan.calls][:2] == ["nums = [2,7,11,15], target = 9",
                                                 "nums = [3,2,4], target = 6"]  # fmt: skip
    assert [c.expected for c in plan.calls][:2] == [[0, 1], [1, 2]]
    assert len(plan.calls) == code.count("assert candidate(")
    pair = host_plan("nums = [3,3], target = 6", "[0,1]")
    assert pair is not None and pair.tolerance and pair.calls[0].expected == [0, 1]
    for test, output in (
        ("def check(candidate):\n    want = [0]\n    assert candidate(1) == want\n", None),
        ("def check(candidate):\n    assert candidate(1) == list_node([1])\n", None),
        ("def check(candidate):\n    assert is_same_list(candidate(1), [1])\n", None),
        ("def check(candidate):\n    assert is_same_tree(candidate(1), list_node([1]))\n", None),
        ("def check(candidate):\n    assert candidate(1) != 2\n", None),
        ("import os\ndef check(candidate):\n    assert candidate(1) == 1\n", None),
        ("def check(candidate):\n    pass\n", None),
        ("1, 2", "list_node([1, 2])"),
        ("def check(candidate:", None),
    ):
        assert host_plan(test, output) is None, test
    assert values_equal(0.1 + 0.2, 0.3, tolerance=True)
    assert not values_equal(0.1 + 0.2, 0.3, tolerance=False)
    assert not values_equal((0, 1), [0, 1], tolerance=True)  # as `==` says


LEET = """
class Solution:
    def twoSum(self, nums, target):
        m = {}
        for i, x in enumerate(nums):
            if target - x in m:
                return [m[target - x], i]
            m[x] = i
"""
CHECK = (
    "def check(candidate):\n    assert candidate(nums = [2,7,11,15], target = 9) == [0,1]\n"
    "    assert candidate(nums = [3,3], target = 6) == [0,1]\n\n\ncheck(Solution().twoSum)"
)
HELPER_CHECK = "def check(candidate):\n    want = [0, 1]\n    assert candidate([3, 3], 6) == want\n"
TESTS = {
    "pair": TestCase("functional", "nums = [2,7,11,15], target = 9", "[0,1]", "Solution().twoSum"),
    "check": TestCase("functional", CHECK, None, "Solution().twoSum"),
    "check with helper code": TestCase("functional", HELPER_CHECK, None, "Solution().twoSum"),
}
_EQ = "    def __eq__(self, other): return True\n    def __ne__(self, other): return False\n"
HACKS = {
    # an object equal to everything (the reward hack RL policies find)
    "always equal": f"class E:\n{_EQ}class Solution:\n    def twoSum(self, n, t): return E()\n",
    "always equal in a list": f"class E:\n{_EQ}class Solution:\n"
    "    def twoSum(self, n, t): return [E(), E()]\n",
    "int subclass": f"class I(int):\n{_EQ}class Solution:\n"
    "    def twoSum(self, n, t): return [I(0), I(1)] if n[0] == 2 else [I(9), I(9)]\n",
    # the harness's nonce from its module globals, then a forged verdict
    "nonce from __main__": "import __main__, json, os\n"
    "for line in ('ok', '0 ' + json.dumps('[0, 1]'), json.dumps({'ok': True, 'got': '1'})):\n"
    "    print('\\n' + str(getattr(__main__, '_nonce', '')) + ' ' + line, flush=True)\n"
    "os._exit(0)\n",
    # ... or from the process's initial environment
    "nonce from /proc/self/environ": "import json, os\n"
    "env = open('/proc/self/environ', 'rb').read().split(b'\\0')\n"
    "n = [e.split(b'=', 1)[1].decode() for e in env if b'NONCE' in e]\n"
    "for line in ('ok', '0 ' + json.dumps('[0, 1]')):\n"
    "    print('\\n' + (n[0] if n else '') + ' ' + line, flush=True)\n"
    "os._exit(0)\n",
    # ... or from stdin, read before the harness does
    "nonce from stdin": "import os, sys\nn = sys.stdin.readline().strip()\n"
    "print('\\n' + n + ' ok', flush=True)\nos._exit(0)\n",
}


@needs_bwrap
@pytest.mark.parametrize("hack", sorted(HACKS))
def test_reward_hacks_do_not_pass_any_functional_test(hack):
    """Each of these passed every functional test when the harness compared in the solution's
    process and kept its nonce in a module global and the environment."""
    for name, test in TESTS.items():
        r = run_tests(HACKS[hack], [test], CFG)
        assert r.status != "passed", (hack, name, r)
    assert all(run_tests(LEET, [t], CFG).status == "passed" for t in TESTS.values())


@needs_bwrap
def test_real_leetcode_reference_solutions_pass_and_an_always_equal_answer_fails(pools_dir):
    """LeetCodeDataset's rows with their import preamble: the reference solutions pass their
    check(), compared outside the sandbox (add-two-numbers' linked lists included); the same
    class returning an always-equal object passes none of them."""
    path = pools_dir / "code_leetcodedataset_v0.2.0_train.jsonl"
    recs = _records("leetcodedataset", _rows(path, 6))
    shapes = set()
    for rec in recs:
        pre = json.loads(rec["metadata"])["test_preamble"]
        tests = [TestCase.from_any(t) for t in rec["tests"]]
        plans = [host_plan(t.input, t.output) for t in tests]
        assert all(plans), rec["uid"]
        shapes |= {c.shape for p in plans for c in p.calls}
        ok = run_tests(pre + "\n" + rec["solutions"][0], tests, CFG)
        assert ok.status == "passed", (rec["uid"], ok.reason)
        hacked = (
            rec["solutions"][0]
            + f"\nclass _E:\n{_EQ}"
            + (
                "\nfor _k, _v in list(vars(Solution).items()):\n"
                "    if callable(_v) and not _k.startswith('_'):\n"
                "        setattr(Solution, _k, lambda self, *a, **k: _E())\n"
            )
        )
        r = run_tests(pre + "\n" + hacked, tests, CFG)
        assert r.status != "passed", (rec["uid"], r)
    assert shapes == {"value", "list"}


TREE_PRE = """
from collections import deque
class TreeNode:
    def __init__(self, val=0, left=None, right=None):
        self.val, self.left, self.right = val, left, right
def tree_node(values):
    if not values:
        return None
    root = TreeNode(values[0]); i = 1; queue = deque([root])
    while queue:
        node = queue.popleft()
        if i < len(values) and values[i] is not None:
            node.left = TreeNode(values[i]); queue.append(node.left)
        i += 1
        if i < len(values) and values[i] is not None:
            node.right = TreeNode(values[i]); queue.append(node.right)
        i += 1
    return root
class ListNode:
    def __init__(self, val=0, next=None):
        self.val, self.next = val, next
def list_node(values):
    head = None
    for v in reversed(values):
        head = ListNode(v, head)
    return head
"""
MIRROR = (
    TREE_PRE
    + """
class Solution:
    def invertTree(self, root):
        if root:
            root.left, root.right = self.invertTree(root.right), self.invertTree(root.left)
        return root
    def reverseList(self, head):
        prev = None
        while head:
            head.next, prev, head = prev, head, head.next
        return prev
"""
)
TREE_CHECK = (
    "def check(candidate):\n"
    "    assert is_same_tree(candidate(root = tree_node([4,2,7,1,3,6,9])), tree_node([4,7,2,9,6,3,1]))\n"
    "    assert is_same_tree(candidate(root = tree_node([1,2])), tree_node([1,None,2]))\n"
    "    assert is_same_tree(candidate(root = tree_node([])), tree_node([]))\n"
)
LIST_CHECK = (
    "def check(candidate):\n"
    "    assert is_same_list(candidate(head = list_node([1,2,3])), list_node([3,2,1]))\n"
    "    assert is_same_list(candidate(head = list_node([])), list_node([]))\n"
)


@needs_bwrap
def test_trees_and_linked_lists_are_compared_as_their_values():
    """`is_same_tree(candidate(...), tree_node([...]))` and `is_same_list`: the returned tree or
    list leaves the sandbox as its values (LeetCode's level order, missing children as None)."""
    tree = TestCase("functional", TREE_CHECK, None, "Solution().invertTree")
    lst = TestCase("functional", LIST_CHECK, None, "Solution().reverseList")
    assert [c.shape for c in host_plan(TREE_CHECK, None).calls] == ["tree"] * 3
    assert host_plan(TREE_CHECK, None).calls[1].expected == [1, None, 2]
    assert run_tests(MIRROR, [tree, lst], CFG).status == "passed"
    # the identity is not the mirror: the second assert's shape differs ([1, 2] vs [1, None, 2])
    same = MIRROR.replace("root.left, root.right = self.invertTree(root.right), "
                          "self.invertTree(root.left)", "pass")  # fmt: skip
    r = run_tests(same, [tree], CFG)
    assert r.status == "failed" and (r.expected, r.got) == ("tree_node([4,7,2,9,6,3,1])",
                                                            "[4, 2, 7, 1, 3, 6, 9]")  # fmt: skip
    cyclic = (
        MIRROR
        + "\nSolution.reverseList = lambda self, head: (lambda n: setattr(n, 'next', n) or n)(ListNode(3))\n"
    )
    r = run_tests(cyclic, [lst], CFG)
    assert r.status == "failed" and "more than 100000 nodes (or a cycle)" in r.reason
    hacked = MIRROR + f"\nclass _E:\n{_EQ}Solution.invertTree = lambda self, root: TreeNode(_E())\n"
    r = run_tests(hacked, [tree], CFG)
    assert r.status == "failed" and "not a plain value" in r.reason


@needs_bwrap
def test_a_forged_unreadable_differs_line_fails_that_program_not_the_batch():
    """On the in-sandbox path a solution can read the verdict nonce from the harness's frame
    (a documented limit). Printing `NONCE differs <not JSON>` made the host's json.loads raise,
    which sank the whole run_many batch, the honest programs' results with it."""
    from rl_pools.sandbox import run_many

    tests = [TestCase("functional", "def check(candidate):\n    x = candidate(nums=[3,2,4], "
                      "target=6)\n    assert x == [1,2]\n", None, "Solution().twoSum")]  # fmt: skip
    assert host_plan(tests[0].input, None) is None  # helper code: runs in the sandbox
    good = "class Solution:\n    def twoSum(self, nums, target):\n        return [1, 2]\n"
    forged = [
        "import sys, os\nn = sys._getframe(1).f_locals['nonce']\n"
        f"os.write(1, ('\\n' + n + ' differs ' + {text!r} + '\\n').encode())\nos._exit(0)\n"
        for text in ("not json", "[1, 2]", "{")
    ]
    res = run_many([(good, tests)] + [(f, tests) for f in forged] + [(good, tests)], CFG)
    assert [r.status for r in res] == ["passed", "failed", "failed", "failed", "passed"], res


@needs_bwrap
def test_a_forged_deeply_nested_call_line_fails_that_program_not_the_batch():
    """The nonce is in the harness's frame on the compared-outside path too; a forged call line
    of 100,000 `[` made the host's json.loads raise RecursionError and sank the batch."""
    from rl_pools.sandbox import run_many

    tests = [TestCase("functional", "def check(candidate):\n    assert candidate(nums=[3,2,4], "
                      "target=6) == [1,2]\n", None, "Solution().twoSum")]  # fmt: skip
    assert host_plan(tests[0].input, None) is not None  # compared outside the sandbox
    good = "class Solution:\n    def twoSum(self, nums, target):\n        return [1, 2]\n"
    forged = (
        "import sys, os\nn = sys._getframe(1).f_locals['nonce']\n"
        "os.write(1, ('\\n' + n + ' 0 ' + '[' * 100000 + '\\n').encode())\nos._exit(0)\n"
    )
    res = run_many([(good, tests), (forged, tests), (good, tests)], CFG)
    assert [r.status for r in res] == ["passed", "failed", "passed"], res


@needs_bwrap
def test_a_float_against_a_huge_expected_int_fails_not_raises():
    """float - int past 1e308 raises OverflowError: a solution returning a float for a test
    whose expected value is a huge int raised out of run_tests (and sank a run_many batch)."""
    assert not values_equal(1.0, 10**400, tolerance=True)
    assert not values_equal(float("inf"), 10**400, tolerance=True)
    big = str(10**400)
    tests = [TestCase("functional", "n = 3", big, "Solution().f")]
    prog = "class Solution:\n    def f(self, n):\n        return 1e300\n"
    r = run_tests(prog, tests, CFG)
    assert r.status == "failed", r
    ok = f"class Solution:\n    def f(self, n):\n        return {big}\n"
    assert run_tests(ok, tests, CFG).status == "passed"
