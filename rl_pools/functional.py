"""Functional tests (call the solution's entry point, compare the returned value): what runs
inside the sandbox and what is decided outside it.

A solution runs in the same Python process as the harness that calls it, so whatever the
harness decides in there the solution can decide for it: a returned object whose ``__eq__``
always says True passed every ``assert candidate(...) == expected`` (the "always equal" reward
hack), and ``import __main__`` (or ``/proc/self/environ``) gave it the nonce that marks the
harness's verdict line, so printing a forged verdict and exiting passed any test. Both were
rewarded as correct code.

So the comparison leaves the sandbox. For a test with an expected value (an ``output``
literal, or a ``check(candidate)`` made only of ``assert candidate(ARGS) == LITERAL`` lines
and LeetCode's linked-list and tree asserts, ``assert is_same_list(candidate(ARGS),
list_node(LITERAL))`` / ``is_same_tree`` / ``tree_node``: every one of the 2,089 in
DeepCoder's LeetCode files) the sandbox gets the arguments only; the harness prints the
``repr`` of each returned value (a returned list or tree as its values), and
the host reads it back with :func:`read_literal` (plain Python values only, never ``eval``)
and compares it with the expected value, which never enters the sandbox. A forged line must
then hold the right answer. Other tests (a ``check`` with helper code, an expected value
that is not a literal) still run in the process, with two guards: returned values whose
type defines its own ``__eq__`` are refused (whatever they are nested in), and the nonce
arrives on stdin, which is then replaced by ``/dev/null`` (it is neither in the environment
nor in a module global). A solution that digs through the interpreter's memory can still
forge those; docs/sandbox.md says so.

Why hand-written: ``ast.literal_eval`` refuses ``null``/``true``/``false``/``inf``, which
LeetCode's expected outputs use, and ``set()``; this is ``literal_eval`` with those names.
"""

from __future__ import annotations

import ast
import functools
import math
from dataclasses import dataclass
from typing import Any

_NAMES = {
    "None": None, "True": True, "False": False, "null": None, "true": True, "false": False,
    "inf": math.inf, "nan": math.nan,
}  # fmt: skip


class NotALiteral(ValueError):
    """The text is not a plain Python literal (see :func:`read_literal`)."""


def read_literal(text: str) -> Any:
    """The plain Python value ``text`` writes: numbers, strings, bytes, None/True/False (also
    ``null``/``true``/``false``), ``inf``/``nan``, lists, tuples, dicts, sets (``set()``).
    Anything else (names, calls, operators) raises :class:`NotALiteral`; nothing is run."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
        return _value(tree.body)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as exc:
        if isinstance(exc, NotALiteral):
            raise
        raise NotALiteral(f"{type(exc).__name__}: {exc}") from None


def _value(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and not isinstance(node.value, complex):
        if node.value is Ellipsis:
            raise NotALiteral("...")
        return node.value
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        v = _value(node.operand)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise NotALiteral("a sign before something that is not a number")
        return -v if isinstance(node.op, ast.USub) else +v
    if isinstance(node, ast.List):
        return [_value(e) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_value(e) for e in node.elts)
    if isinstance(node, ast.Set):
        return {_value(e) for e in node.elts}
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values, strict=True)}
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "set"
        and not node.args
        and not node.keywords
    ):
        return set()
    raise NotALiteral(f"{type(node).__name__} is not a plain value")


@dataclass(frozen=True)
class Call:
    """One call of the entry point: its argument source (run in the sandbox) and the expected
    value's source and value (kept outside)."""

    args: str
    expected_text: str
    expected: Any
    shape: str = "value"  # or "list" / "tree": a returned ListNode / TreeNode, as its values


@dataclass(frozen=True)
class HostPlan:
    """Calls compared outside the sandbox; ``tolerance``: an ``output`` test's float rule (a
    float within 1e-6 relative of a number passes); ``check`` asserts compare with ``==``."""

    calls: tuple[Call, ...]
    tolerance: bool


@functools.lru_cache(maxsize=1024)  # every answer to a prompt meets the same tests
def host_plan(test_input: str, output: str | None) -> HostPlan | None:
    """The calls of a functional test when every expected value is a literal: the test's own
    pair (``output`` given), or the asserts of a ``check(candidate)`` made only of ``assert
    candidate(ARGS) == LITERAL`` lines (with at most a docstring, and module-level
    ``check(...)`` calls, which the harness makes itself). None: the test runs in the sandbox
    as written (helper code, non-literal expected values)."""
    if output is not None:
        try:
            return HostPlan((Call(test_input, output, read_literal(output)),), tolerance=True)
        except NotALiteral:
            return None
    try:
        tree = ast.parse(test_input)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    check = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check" and check is None:
            check = node
        elif not (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "check"
        ):
            return None
    if check is None or check.decorator_list or len(check.args.args) != 1:
        return None
    param = check.args.args[0].arg
    calls = []
    for i, stmt in enumerate(check.body):
        if i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # a docstring
        call = _assert_call(stmt, param)
        if call is None:
            return None
        args_node, expected_node, shape = call
        expected_text = ast.get_source_segment(test_input, expected_node)
        args_text = _args_source(test_input, args_node)
        if expected_text is None or args_text is None:
            return None
        try:
            value = _value(expected_node if shape == "value" else expected_node.args[0])
            if shape != "value" and not isinstance(value, list):
                return None
            expected = tree_values(value) if shape == "tree" else value
            calls.append(Call(args_text, expected_text, expected, shape))
        except (NotALiteral, TypeError, ValueError, RecursionError):
            return None
    return HostPlan(tuple(calls), tolerance=False) if calls else None


# LeetCode's linked-list and tree checks: `assert is_same_list(candidate(...), list_node([...]))`
_SHAPES = {"is_same_list": ("list_node", "list"), "is_same_tree": ("tree_node", "tree")}


def _assert_call(stmt: ast.stmt, param: str) -> tuple[ast.Call, ast.expr, str] | None:
    """``assert PARAM(ARGS) == EXPECTED`` -> (the call, EXPECTED, "value");
    ``assert is_same_list(PARAM(ARGS), list_node(LIT))`` -> (the call, ``list_node(LIT)``,
    "list"), and the same for ``is_same_tree`` / ``tree_node`` ("tree"); else None."""
    if not isinstance(stmt, ast.Assert):
        return None
    test = stmt.test
    if isinstance(test, ast.Compare):
        if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
            return None
        return (test.left, test.comparators[0], "value") if _calls(test.left, param) else None
    if (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Name)
        and test.func.id in _SHAPES
        and len(test.args) == 2
        and not test.keywords
    ):
        maker, shape = _SHAPES[test.func.id]
        got, want = test.args
        if _calls(got, param) and _calls(want, maker) and len(want.args) == 1 and not want.keywords:
            return got, want, shape
    return None


def _calls(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def tree_values(level_order: list) -> list:
    """The canonical level order of the tree LeetCode's ``tree_node(level_order)`` builds: each
    node's value, ``None`` for a missing child of a node, trailing ``None`` dropped. Two trees
    are the same (``is_same_tree``) exactly when these lists are equal; the harness writes a
    returned tree the same way."""
    if not level_order or level_order[0] is None:
        return []
    nodes: list[list[Any]] = [[level_order[0], None, None]]  # value, left, right (indexes)
    queue, i = [0], 1
    head = 0
    while head < len(queue):
        n = queue[head]
        head += 1
        for side in (1, 2):
            if i < len(level_order) and level_order[i] is not None:
                nodes.append([level_order[i], None, None])
                nodes[n][side] = len(nodes) - 1
                queue.append(len(nodes) - 1)
            i += 1
    out: list[Any] = []
    todo, head = [0], 0
    while head < len(todo):
        n = todo[head]
        head += 1
        if n is None:
            out.append(None)
            continue
        out.append(nodes[n][0])
        todo.extend((nodes[n][1], nodes[n][2]))
    while out and out[-1] is None:
        out.pop()
    return out


def _args_source(src: str, call: ast.Call) -> str | None:
    """The text between a call's parentheses (``nums = [2,7], target = 9``)."""
    whole = ast.get_source_segment(src, call)
    func = ast.get_source_segment(src, call.func)
    if whole is None or func is None or not whole.startswith(func):
        return None
    inner = whole[len(func) :].strip()
    if not (inner.startswith("(") and inner.endswith(")")):
        return None
    return inner[1:-1]


MAX_REPR = 65536
REPR_BUDGET = 6 * MAX_REPR + 64  # stdout bytes a call's line may take (JSON escapes: 6 a char)


def values_equal(got: Any, expected: Any, *, tolerance: bool) -> bool:
    """``got == expected`` on plain values, and with ``tolerance`` a float within 1e-6
    (relative, at least absolute) of a number (the harness's rule before it moved out)."""
    if got == expected:
        return True
    if tolerance and isinstance(got, float) and isinstance(expected, int | float):
        try:
            return abs(got - expected) <= 1e-6 * max(1.0, abs(expected))
        except OverflowError:  # an int past float's range: no float is within 1e-6 of it
            return False
    return False


# The harness: run inside the sandbox as /sandbox/harness.py with spec.json beside it and the
# nonce as the first line of stdin. ``calls`` mode prints one line per call: nonce, index,
# and the JSON of the returned value's repr (or of {"type": NAME} when the value is not a
# plain one); ``check``/``pair`` modes print ``nonce ok`` after check() returned or the value
# compared equal. Everything it needs after the solution ran is bound before: the solution may
# replace print, json or sys.stdout. A returned value whose repr is over MAX_REPR characters
# (64 Ki) is not sent (the test fails saying so); the run's stdout cap grows by that much per
# call, for up to 64 calls (:data:`REPR_BUDGET`).
HARNESS = r"""
import json, os, sys

MAX_REPR = 65536
MAX_NODES = 100000


def _harness():
    nonce = sys.stdin.readline().strip()
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    write, dumps, stdout = os.write, json.dumps, sys.stdout
    plain = (int, float, str, bool, type(None), bytes, list, tuple, dict, set)

    def emit(text):
        try:
            stdout.flush()
        except Exception:
            pass
        data = ("\n" + nonce + " " + text + "\n").encode("utf-8", "surrogatepass")
        while data:
            data = data[write(1, data):]

    def odd_type(value, compare_only):
        # the type name of the first object in value that is not a plain value; with
        # compare_only, objects are followed through their attributes and only a type that
        # compares its own way (__eq__/__ne__ not object's) counts
        seen, todo = set(), [value]
        while todo:
            x = todo.pop()
            if id(x) in seen:
                continue
            seen.add(id(x))
            t = type(x)
            if t in plain:
                if t is dict:
                    todo.extend(x.keys())
                    todo.extend(x.values())
                elif t in (list, tuple, set):
                    todo.extend(x)
                continue
            if not compare_only or t.__eq__ is not object.__eq__ or t.__ne__ is not object.__ne__:
                return t.__name__
            todo.extend(getattr(x, "__dict__", {}).values())
        return None

    spec = json.load(open("/sandbox/spec.json", encoding="utf-8"))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)
    ns = {"__name__": "solution", "__builtins__": __builtins__}
    exec(compile(open("/sandbox/solution.py", encoding="utf-8").read(), "solution.py", "exec"), ns)
    candidate = eval(spec["entry_point"], ns)
    def nodes_of(value, shape):
        # a returned ListNode / TreeNode as the values tree_values / list_node write
        out, todo, head, count = [], [value], 0, 0
        while head < len(todo):
            x = todo[head]
            head += 1
            count += 1
            if count > MAX_NODES:
                return {"type": "a %s of more than %d nodes (or a cycle)" % (shape, MAX_NODES)}
            if shape == "list":
                if x is not None:
                    out.append(x.val)
                    todo.append(x.next)
                continue
            if x is None:
                out.append(None)
                continue
            if x.val is None:
                return {"type": "a tree node whose value is None"}
            out.append(x.val)
            todo.extend((x.left, x.right))
        while shape == "tree" and out and out[-1] is None:
            out.pop()
        return out

    if spec["mode"] == "calls":
        for i, (args, shape) in enumerate(spec["calls"]):
            ns["_sluice_candidate"] = candidate
            got = eval("_sluice_candidate(" + args + ")", ns)
            if shape != "value":
                got = nodes_of(got, shape)
                if type(got) is dict:
                    emit(str(i) + " " + dumps(got))
                    continue
            odd = odd_type(got, False)
            text = None if odd else repr(got)
            if text is not None and len(text) > MAX_REPR:
                odd, text = "a value whose repr is over %d characters" % MAX_REPR, None
            emit(str(i) + " " + dumps({"type": odd} if odd else text))
        return

    def guarded(*args, **kwargs):
        got = candidate(*args, **kwargs)
        odd = odd_type(got, True)
        if odd:
            raise SystemExit(
                "sluice: the solution returned a %s, which compares its own way "
                "(only plain values and objects without __eq__ are accepted)" % odd
            )
        return got

    if spec["mode"] == "check":
        exec(compile(spec["input"], "test.py", "exec"), ns)
        if "check" not in ns:
            raise SystemExit("test code defines no check(candidate) function")
        ns["check"](guarded)
        emit("ok")
        return
    ns["_sluice_candidate"] = guarded
    got = eval("_sluice_candidate(" + spec["input"] + ")", ns)
    lit = {"null": None, "true": True, "false": False, "inf": float("inf")}
    expected = eval(spec["output"], dict(ns, **lit))
    ok = got == expected
    if not ok and isinstance(got, float) and isinstance(expected, (int, float)):
        ok = abs(got - expected) <= 1e-6 * max(1.0, abs(expected))
    if ok:
        emit("ok")
    else:
        emit("differs " + dumps(repr(got)[:2000]))


_harness()
"""
