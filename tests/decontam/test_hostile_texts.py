"""Hostile training texts through every cheap detector of the default set (seeded, no new
dependency): empty, blank, punctuation only, control characters (C0, C1, NUL) anywhere, a BOM,
CR-only line ends, braces nested 10k deep, LaTeX commands only, an unclosed code fence,
right-to-left and combining soup, non-BMP emoji, full-width digits, 1000-digit numbers,
unterminated LeetCode signatures and a real AIME problem wrapped in all of it. Each detector
must score them without raising, draw every span inside its text, and still flag the quoted
problem. The embedding and fuzzy detectors (the sentence-transformers model) are left to their
own tests: a fit costs minutes on a busy CPU.
"""

from __future__ import annotations

import random

import pytest
from benchsets import load_set, text_table

from decontam.fingerprint import FingerprintDetector
from decontam.minhash import MinHashDetector
from decontam.ngram import NGramDetector
from decontam.problem_id import ProblemIdDetector
from decontam.signature import SignatureDetector

C0C1 = "".join(map(chr, range(32))) + "\x7f" + "".join(map(chr, range(0x80, 0xA0)))


def _hostile(problem: str) -> dict[str, str]:
    rng = random.Random(36)
    soup = "".join(
        rng.choice("\u05d0\u0627\u202e\u202b\u200f\u0301\u0308\u0489") for _ in range(500)
    )
    emoji = "".join(
        rng.choice(["\U0001f600", "\U0001f468\u200d\U0001f469", "\U0010ffff"]) for _ in range(300)
    )
    return {
        "empty": "",
        "blank": " \t\n\r\u00a0\u3000\u2028" * 20,
        "punct": "!?.,;:'\"()[]{}<>-_=+*&^%$#@~`|\\/" * 20,
        "one_char": "x",
        "nul": "\x00",
        "bom": "\ufeff",
        "controls": C0C1 * 10,
        "latex_only": "\\frac\\sqrt\\left\\right\\cdot\\begin{align}" * 200,
        "deep_braces": "{" * 10_000 + "x" + "}" * 10_000,
        "open_braces": "{" * 10_000,
        "fences": "```\n" * 2000,
        "soup": soup,
        "emoji": emoji,
        "fullwidth": "".join(chr(0xFF10 + rng.randrange(10)) for _ in range(2000)),
        "digits": " ".join(str(rng.randrange(10**999, 10**1000)) for _ in range(5)),
        "sig_open": "class Solution:\n    def f(self, x",
        "sig_parens": "class Solution:\n    def f(self, " + "(" * 5000,
        "sig_brackets": "def g(x: " + "List[" * 5000 + "int" + "]" * 5000 + "):",
        # the quoted problem: every evidence path runs on these
        "q_nul": problem[:100] + "\x00" + problem[100:],
        "q_bom": "\ufeff" + problem,
        "q_cr": problem.replace(" ", "\r"),
        "q_fence": "```python\n" + "x = 1\n" * 50 + problem,
        "q_wrapped": "\x00\ufeff{{{{" + soup[:200] + problem + emoji[:100] + "```\x85\x1b[31m",
        "q_controls": C0C1 + problem + C0C1,
        "q_combining": "\u0301" * 50 + problem + "\u0301" * 50,
        "q_braces": "{" * 10_000 + problem,
        "q_repeated": problem * 20,
    }  # fmt: skip


@pytest.fixture(scope="module")
def bench(benchmarks_dir):
    return load_set(benchmarks_dir, ["aime24", "aime25", "lcb_v6"])


@pytest.mark.parametrize(
    "cls",
    [NGramDetector, MinHashDetector, ProblemIdDetector, FingerprintDetector, SignatureDetector],
)
def test_hostile_texts_score_without_error_and_spans_stay_inside(bench, cls):
    det = cls()
    det.fit(bench)
    problem = bench.items.column("text")[0].as_py()
    cases = _hostile(problem)
    m = det.score(text_table(list(cases), list(cases.values())))
    for row in m.to_pylist():
        text = cases[row["sample_uid"]]
        for s in row["spans"] or []:
            assert 0 <= s["sample_start"] <= s["sample_end"] <= len(text), row["sample_uid"]
    if cls in (NGramDetector, MinHashDetector):  # the verbatim detectors find every quote
        flagged = {r["sample_uid"] for r in m.to_pylist() if r["score"] >= det.config.threshold}
        assert flagged == {k for k in cases if k.startswith("q_")}
