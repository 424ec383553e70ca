"""Math answer verification: extract a final answer, compare it with the reference, with a hard
per-item timeout.

Every item gets exactly one status, a reason and the extracted answer:

* ``correct`` / ``incorrect``: math-verify compared the extracted answer with the reference.
* ``no_answer``: nothing answer-like was found in the text.
* ``timeout``: extraction + comparison ran past ``timeout_s``; the worker doing it was killed.
* ``error``: the reference could not be parsed, the comparison raised, or a worker died.

A timeout or error is never folded into ``incorrect``: a reward function may map them to 0, but
it has to do so explicitly.

Why a hand-written pool: math-verify's own timeouts use ``signal.alarm``, which only works on the
main thread (called from a worker thread it raises, and frameworks that swallow the error scored
every answer 0). We turn those timeouts off (``parsing_timeout=None``, ``timeout_seconds=None``)
and run the comparison in child processes instead. ``concurrent.futures.ProcessPoolExecutor``
cannot stop a running task (``Future.cancel`` only works before it starts), so one sympy call
that never returns would hold a worker forever and hang shutdown; the pool below gives each task
a deadline and kills and replaces the worker that overruns it. It works from any thread.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing as mp
import re
import signal
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

import pyarrow as pa

from curation.errors import ConfigError, InputError, SluiceError
from curation.shutdown import ctrl_c_for_the_parent_only

STATUSES = ("correct", "incorrect", "no_answer", "timeout", "error")
MAX_TIMEOUT_S = 86400  # one day: larger deadlines overflow the waits (and mean no deadline)

VERIFY_RESULT_SCHEMA = pa.schema(
    [
        pa.field("status", pa.string(), nullable=False),  # one of STATUSES
        pa.field("reason", pa.string()),
        pa.field("extracted", pa.string()),  # the final answer found in the text, or null
        pa.field("method", pa.string()),  # how it was found (boxed, answer_line, last_number...)
        pa.field("elapsed_s", pa.float64()),  # time spent comparing (0 when not compared)
    ],
    metadata={b"sluice.schema": b"verify_result/1"},
)


class VerifierUnavailable(SluiceError):
    """The verification worker processes cannot start."""


class VerifierStopped(SluiceError):
    """A verification worker was stopped by a signal from outside (SIGTERM, SIGINT, SIGHUP)."""


# exit codes of a worker stopped from outside; SIGKILL is the memory limit or the OOM killer,
# which the answer caused (graded "error")
_STOPPED = {-signal.SIGTERM, -signal.SIGINT, -signal.SIGHUP}


@dataclass
class VerifyConfig:
    """Options of math verification (one config for library, CLI and pipelines)."""

    timeout_s: float = field(
        default=5.0, metadata={"help": "hard limit per item; the worker is killed past it"}
    )
    workers: int = field(default=2, metadata={"help": "worker processes"})
    memory_mb: int = field(
        default=4096, metadata={"help": "address-space limit of each worker (RLIMIT_AS), MiB"}
    )
    float_rounding: int = field(default=6, metadata={"help": "math-verify float_rounding"})
    allow_last_number: bool = field(
        default=True,
        metadata={"help": "fall back to the last number in the text (flagged as last_number)"},
    )

    def __post_init__(self) -> None:
        # NaN compares false with everything: it would disable the hard deadline; inf overflows
        if not math.isfinite(self.timeout_s) or self.timeout_s <= 0:
            raise ConfigError(
                f"VerifyConfig.timeout_s must be a finite number > 0, got {self.timeout_s}",
                hint="e.g. timeout_s = 5 (seconds)",
            )
        if self.timeout_s > MAX_TIMEOUT_S:  # a huge one overflowed the pool's wait()
            raise ConfigError(
                f"VerifyConfig.timeout_s must be at most {MAX_TIMEOUT_S} (one day), "
                f"got {self.timeout_s:g}",
                hint="e.g. timeout_s = 5 (seconds)",
            )
        if self.workers < 1:
            raise ConfigError(f"VerifyConfig.workers must be >= 1, got {self.workers}")
        if self.memory_mb <= 0:  # -1 became an unlimited RLIMIT_AS without a word
            raise ConfigError(
                f"VerifyConfig.memory_mb must be > 0 (MiB), got {self.memory_mb}",
                hint="e.g. memory_mb = 4096 (the default)",
            )


@dataclass
class VerifyResult:
    status: str
    reason: str
    extracted: str | None
    method: str
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------------------------
# Extraction (pure, linear-time; runs in the worker, under the item's deadline)
# --------------------------------------------------------------------------------------------

# Every pattern here is linear in the text: no two adjacent quantifiers can trade characters
# (possessive ``*+`` where they could), so model output such as 10 000 unclosed ``\\boxed{`` or
# 20 KB of newlines costs milliseconds, not minutes. Extraction also runs in the worker process
# under the item's deadline, so even a slow path ends as ``timeout``.
_BOX_RE = re.compile(r"\\(boxed|fbox)\s*")
_TOKEN_RE = re.compile(r"[^\s$]+")
_BRACE_RE = re.compile(r"\\.|[{}]", re.DOTALL)
_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_LINE_MARKERS = [
    ("final_answer", re.compile(r"final answer is\s*+:?\s*+(.+)", re.IGNORECASE)),
    ("answer_is", re.compile(r"\bthe answer is\s*+:?\s*+(.+)", re.IGNORECASE)),
    (
        "answer_line",
        re.compile(r"^[ \t]*+\**answer\**[ \t]*[:：]\s*+(.+)", re.IGNORECASE | re.MULTILINE),
    ),
    ("hashes", re.compile(r"####\s*+(.+)")),
]


def _brace_pairs(text: str) -> dict[int, int]:
    """Position of each ``{`` -> position of its matching ``}``, in one pass (``\\x`` skipped).

    One pass over the whole text instead of a scan from each ``\\boxed{`` to its closing brace,
    which was quadratic for unclosed braces.
    """
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE_RE.finditer(text):
        c = m.group()
        if c == "{":
            stack.append(m.start())
        elif c == "}" and stack:
            pairs[stack.pop()] = m.start()
    return pairs


def _last_box(text: str) -> str | None:
    found = None
    pairs: dict[int, int] | None = None
    for m in _BOX_RE.finditer(text):
        j = m.end()
        if j < len(text) and text[j] == "{":
            if pairs is None:
                pairs = _brace_pairs(text)
            end = pairs.get(j)
            if end is not None:
                found = text[j + 1 : end]
        elif j < len(text):  # \boxed 5
            tok = _TOKEN_RE.match(text, j)
            if tok:
                found = tok.group(0)
    return found.strip() if found is not None else None


def _clean(ans: str) -> str:
    ans = ans.strip().rstrip(".").strip()
    ans = ans.strip("$").strip()
    ans = re.sub(r"^\\\(|\\\)$|^\\\[|\\\]$", "", ans).strip()
    return ans.rstrip(".").strip()


def extract_answer(text: str | None, *, allow_last_number: bool = True) -> tuple[str | None, str]:
    """The final answer in ``text`` and how it was found.

    Only the text after the last ``</think>`` counts when there is one: a ``\\boxed{}`` inside
    the thinking is a step, not the answer (an answer part with nothing in it has no answer).
    Order: the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces allowed); else the last
    "final answer is ...", "Answer: ..." or "#### ..." line; else (flagged ``last_number``) the
    last number. Returns ``(None, "none")`` when nothing is found.
    """
    from rl_pools.answers import answer_part

    text = answer_part(text)
    if not text or not text.strip():
        return None, "none"
    boxed = _last_box(text)
    if boxed:
        inner = _last_box(boxed)  # \boxed{\boxed{5}}
        return _clean(inner or boxed), "boxed"
    best: tuple[int, str, str] | None = None
    for method, rx in _LINE_MARKERS:
        for m in rx.finditer(text):
            line = m.group(1).split("\n")[0]
            if _clean(line) and (best is None or m.start() > best[0]):
                best = (m.start(), method, _clean(line))
    if best:
        return best[2], best[1]
    if allow_last_number:
        nums = _NUMBER_RE.findall(text)
        if nums:
            return nums[-1].replace(",", ""), "last_number"
    return None, "none"


def _reference_text(ref: str) -> str:
    boxed = _last_box(ref)
    return _clean(boxed if boxed else ref)


# --------------------------------------------------------------------------------------------
# Worker side
# --------------------------------------------------------------------------------------------


def _is_name(expr: Any) -> bool:
    """A quantity's name: ``x``, ``a_n``, ``\\theta``; letters read as a product (``AB``, a
    segment; ``m\\angle ABC``); an undefined function applied (``f(2)``, ``P(A)``). Not ``3``,
    ``2x``, ``-x``, ``a+b``, ``x^2``, ``|x|``."""
    from sympy import Mul, Symbol
    from sympy.core.function import AppliedUndef

    if isinstance(expr, Symbol | AppliedUndef):
        return True
    return isinstance(expr, Mul) and all(isinstance(a, Symbol) for a in expr.args)


def _equations(x: Any) -> list[Any]:
    """The equations ``x`` is: itself, or every element of a set/tuple of equations."""
    from sympy import Eq, FiniteSet, Tuple
    from sympy.core.relational import Relational

    if isinstance(x, Relational):
        return [x] if isinstance(x, Eq) else []
    # finite containers only: iterating an infinite sympy set (Naturals) never ends
    items = list(x) if isinstance(x, FiniteSet | Tuple | tuple | list | set | frozenset) else []
    if items and all(isinstance(i, Relational) for i in items):
        return [i for i in items if isinstance(i, Eq)]
    return []


def _equation_for_a_value(gold: list[Any], pred: list[Any]) -> str | None:
    """Why ``pred`` (an equation) is no answer to ``gold`` (a value), or None.

    math-verify compares an equation's right-hand side with a value, so ``3 = 2`` (or
    ``1 + 1 = 2``, ``2x = 6``) matched the reference ``2``. As MATH-style graders do, an
    equation answers a value only in the form ``name = value`` (``x = 2``, ``AB = 2``,
    ``f(2) = 5``). A reference that is itself an equation is left to math-verify."""
    from sympy.core.relational import Relational

    if any(isinstance(g, Relational) or _equations(g) for g in gold if not isinstance(g, str)):
        return None
    for p in pred:
        if isinstance(p, str):
            continue
        for eq in _equations(p):
            if not _is_name(eq.lhs):
                shown = next((q for q in pred if isinstance(q, str)), str(p))
                return (
                    f"the answer {shown[:100]!r} is an equation whose left side is not a "
                    "variable name; the reference is a value"
                )
    return None


def _compare(extracted: str, reference: str, float_rounding: int) -> tuple[str, str]:
    """Runs in a worker process. math-verify's signal timeouts are off: the parent enforces time."""
    from math_verify import parse, verify

    gold = parse(f"${reference}$", parsing_timeout=None, raise_on_error=True)
    if not gold:
        return "error", f"reference {reference[:200]!r} could not be parsed"
    pred = parse(f"\\boxed{{{extracted}}}", parsing_timeout=None, raise_on_error=True)
    if not pred:
        return "incorrect", "the extracted answer could not be parsed as math"
    why = _equation_for_a_value(gold, pred)
    if why:
        return "incorrect", why
    ok = verify(
        gold, pred, float_rounding=float_rounding, timeout_seconds=None, raise_on_error=True
    )
    if ok:
        return "correct", "equivalent to the reference"
    return "incorrect", "not equivalent to the reference"


def _worker_main(conn: Connection, memory_mb: int, float_rounding: int) -> None:
    import logging
    import resource

    try:
        lim = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    except (ValueError, OSError):
        pass
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    # Warm up before saying ready (imports, the LaTeX grammar, sympy caches): startup is not
    # task time, and a cold first comparison could otherwise eat a short timeout.
    try:
        _compare(r"\frac{1}{2}", "0.5", float_rounding)
    except Exception:  # noqa: BLE001 - a broken install shows up as status=error per item
        pass
    try:
        _serve(conn, memory_mb, float_rounding)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        # the parent is gone (killed outright): end quietly; a traceback from here landed on
        # the terminal after the crash
        return


def _serve(conn: Connection, memory_mb: int, float_rounding: int) -> None:
    conn.send(("ready",))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        idx, answer, reference, allow_last_number = msg
        # Extraction touches model output: it runs here, under the deadline, not in the parent.
        try:
            extracted, method = extract_answer(answer, allow_last_number=allow_last_number)
        except MemoryError:
            conn.send(("done", idx, "error", f"memory limit {memory_mb} MiB exceeded", 0.0))
            continue
        conn.send(("extracted", idx, extracted, method))
        if extracted is None:
            conn.send(("done", idx, "no_answer", "no final answer found in the text", 0.0))
            continue
        t0 = time.perf_counter()
        try:
            status, reason = _compare(extracted, _reference_text(reference), float_rounding)
        except MemoryError:
            status, reason = "error", f"memory limit {memory_mb} MiB exceeded while comparing"
        except Exception as exc:  # noqa: BLE001 - reported as status=error with the reason
            status, reason = "error", f"{type(exc).__name__}: {str(exc)[:300]}"
        conn.send(("done", idx, status, reason, time.perf_counter() - t0))


# --------------------------------------------------------------------------------------------
# The pool (parent side)
# --------------------------------------------------------------------------------------------


def _context() -> mp.context.BaseContext:
    # forkserver: safe when the caller has threads (fork is not), and much faster to replace a
    # killed worker than spawn because the server has math_verify/sympy imported already.
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["math_verify", "rl_pools.verify"])
        return ctx
    return mp.get_context("spawn")


class _Worker:
    def __init__(self, ctx: mp.context.BaseContext, cfg: VerifyConfig) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_worker_main, args=(child, cfg.memory_mb, cfg.float_rounding), daemon=True
        )
        with ctrl_c_for_the_parent_only():  # the parent kills its workers on Ctrl-C
            self.proc.start()
        child.close()
        self.ready = False
        self.task: int | None = None
        self.deadline = 0.0

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=5)
        self.conn.close()


class MathVerifier:
    """A reusable pool of verification workers. Use as a context manager, or call :meth:`close`."""

    def __init__(self, config: VerifyConfig | None = None) -> None:
        self.config = config or VerifyConfig()
        self._ctx = _context()
        self._workers: list[_Worker] = []

    def __enter__(self) -> MathVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for w in self._workers:
            try:
                w.conn.send(None)
            except (OSError, ValueError):
                pass
        for w in self._workers:
            w.proc.join(timeout=2)
            w.kill()
        self._workers = []

    def _ensure_workers(self, n: int) -> None:
        while len(self._workers) < n:
            self._workers.append(_Worker(self._ctx, self.config))

    def verify(self, answers: Any, references: Any) -> pa.Table:
        """Verify ``answers[i]`` against ``references[i]``; a table of VERIFY_RESULT_SCHEMA."""
        ans = _to_list(answers, "answers")
        refs = _to_list(references, "references")
        if len(ans) != len(refs):
            raise InputError(
                f"{len(ans)} answers but {len(refs)} references; they must pair up row by row",
                field="references",
            )
        results: list[VerifyResult | None] = [None] * len(ans)
        todo: deque[int] = deque()
        # (answer, method) once the worker has extracted it: a timeout still reports it
        extracted: list[tuple[str | None, str]] = [(None, "none")] * len(ans)
        for i, (a, r) in enumerate(zip(ans, refs, strict=True)):
            if r is None or not str(r).strip():
                results[i] = VerifyResult("error", "the reference answer is missing", None, "none")
            elif a is None or not str(a).strip():
                results[i] = VerifyResult(
                    "no_answer", "no final answer found in the text", None, "none"
                )
            else:
                todo.append(i)
        if todo:
            self._run(todo, extracted, [_text(a) for a in ans], [_text(r) for r in refs], results)
        return pa.Table.from_pylist([r.to_dict() for r in results], schema=VERIFY_RESULT_SCHEMA)  # type: ignore[union-attr]

    def _run(
        self,
        todo: deque[int],
        extracted: list[tuple[str | None, str]],
        answers: list[str],
        refs: list[str],
        results: list[VerifyResult | None],
    ) -> None:
        cfg = self.config
        self._ensure_workers(min(cfg.workers, len(todo)))
        busy = 0

        def replace(w: _Worker) -> None:
            w.kill()
            self._workers[self._workers.index(w)] = _Worker(self._ctx, cfg)

        while todo or busy:
            now = time.monotonic()
            for w in self._workers:
                if w.ready and w.task is None and todo:
                    i = todo.popleft()
                    try:
                        w.conn.send((i, answers[i], refs[i], cfg.allow_last_number))
                    except (OSError, ValueError):
                        todo.appendleft(i)
                        replace(w)
                        continue
                    w.task, w.deadline = i, now + cfg.timeout_s
                    busy += 1
            waits = [w.deadline for w in self._workers if w.task is not None]
            timeout = max(0.0, min(waits) - time.monotonic()) if waits else 30.0
            handles: list[Any] = [w.conn for w in self._workers] + [
                w.proc.sentinel for w in self._workers
            ]
            ready = set(wait(handles, timeout=timeout))
            for w in list(self._workers):
                if w.conn in ready:
                    try:
                        msg = w.conn.recv()
                    except (EOFError, OSError):
                        msg = None
                    if msg and msg[0] == "ready":
                        w.ready = True
                        continue
                    if msg and msg[0] == "extracted":
                        extracted[msg[1]] = (msg[2], msg[3])
                        continue
                    if msg and msg[0] == "done":
                        _, i, status, reason, el = msg
                        ex = extracted[i]
                        results[i] = VerifyResult(status, reason, ex[0], ex[1], round(el, 4))
                        w.task = None
                        busy -= 1
                        continue
                if (w.conn in ready or w.proc.sentinel in ready) and not w.proc.is_alive():
                    if w.proc.exitcode in _STOPPED:
                        # stopped from outside (systemd, `kill`: SIGTERM to the whole process
                        # group), not by its answer: no grade. Recorded as "worker died", the
                        # answer's error grade went into the rollout grade log and a rerun
                        # reused it
                        raise VerifierStopped(
                            f"a math verification worker was stopped by signal {-w.proc.exitcode}",
                            hint="rerun: the grades finished before the stop are kept",
                        )
                    if w.task is not None:
                        i = w.task
                        ex = extracted[i]
                        results[i] = VerifyResult(
                            "error",
                            f"verification worker died (exit code {w.proc.exitcode})",
                            ex[0],
                            ex[1],
                        )
                        busy -= 1
                    elif not w.ready:
                        raise VerifierUnavailable(
                            f"math verification worker failed to start (exit code {w.proc.exitcode})",
                            hint="check that math-verify is installed (pip install math-verify); "
                            "a script that calls verify_batch at import time needs "
                            "`if __name__ == '__main__':` (the workers re-import __main__); "
                            f"memory_mb={cfg.memory_mb} may be too small for a worker to start "
                            "(the default is 4096)",
                        )
                    replace(w)
            now = time.monotonic()
            for w in list(self._workers):
                if w.task is not None and now >= w.deadline:
                    i = w.task
                    ex = extracted[i]
                    what = "comparison" if ex[0] is not None else "answer extraction"
                    results[i] = VerifyResult(
                        "timeout",
                        f"{what} exceeded {cfg.timeout_s:g}s; worker killed",
                        ex[0],
                        ex[1],
                        round(cfg.timeout_s, 4),
                    )
                    busy -= 1
                    replace(w)


_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _text(x: Any) -> str:
    """``str(x)`` with lone surrogates (e.g. ``json.loads('"\\ud800"')``) replaced by U+FFFD: they
    cannot be encoded as UTF-8, so one of them sank the whole batch when the table was built."""
    s = str(x)
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        s = _SURROGATE_RE.sub("\ufffd", s)
    return s


def _to_list(col: Any, name: str) -> list[str | None]:
    if isinstance(col, str):
        raise InputError(f"{name} must be a sequence of strings, got one string", field=name)
    if isinstance(col, pa.ChunkedArray | pa.Array):
        return col.to_pylist()
    if hasattr(col, "to_list"):  # polars / pandas Series
        return list(col.to_list())
    return list(col)


def verify_batch(
    answers: Sequence[str | None] | pa.Array | pa.ChunkedArray | Any,
    references: Sequence[str | None] | pa.Array | pa.ChunkedArray | Any,
    *,
    timeout_s: float = 5.0,
    workers: int = 2,
    config: VerifyConfig | None = None,
) -> pa.Table:
    """Verify model answers (full responses) against reference answers, row by row.

    Accepts lists, Arrow arrays or Polars series. Returns a table of :data:`VERIFY_RESULT_SCHEMA`
    (status, reason, extracted, method, elapsed_s), one row per input row. Safe to call from any
    thread. ``config`` overrides ``timeout_s`` and ``workers`` when given.
    """
    cfg = config or VerifyConfig(timeout_s=timeout_s, workers=workers)
    with MathVerifier(cfg) as v:
        return v.verify(answers, references)


def verify_one(
    answer: str | None,
    reference: str,
    *,
    timeout_s: float = 5.0,
    config: VerifyConfig | None = None,
) -> VerifyResult:
    """Verify one answer (a full response or just the answer) against ``reference``."""
    cfg = config or VerifyConfig(timeout_s=timeout_s, workers=1)
    cfg = dataclasses.replace(cfg, workers=1)
    row = verify_batch([answer], [reference], config=cfg).to_pylist()[0]
    return VerifyResult(**row)


__all__ = [
    "STATUSES",
    "VERIFY_RESULT_SCHEMA",
    "MathVerifier",
    "VerifyConfig",
    "VerifyResult",
    "VerifierUnavailable",
    "extract_answer",
    "verify_batch",
    "verify_one",
]
