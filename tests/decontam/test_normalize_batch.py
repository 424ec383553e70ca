"""The columnar normalizer path (``Normalizer.batch``) against the per-text path (``norm(text)``,
itself checked against the offset-tracking path in test_normalize_decontam.py)."""

from __future__ import annotations

import functools
import json

import pytest

from decontam.normalize import NORMALIZERS, get_normalizer


@functools.cache
def _real_texts(shared_dir) -> list[str]:
    """Every string of every row of every pool file and benchmark file (read once per session)."""
    files = sorted((shared_dir / "pools").rglob("*.jsonl")) + sorted(
        (shared_dir / "benchmarks").rglob("*.jsonl")
    )
    assert len(files) >= 20
    texts: list[str] = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    _texts_of(json.loads(line), texts)
    return texts


@functools.cache
def _per_text(shared_dir, name: str) -> list[str]:
    """``[norm(t) for t in _real_texts(shared_dir)]``, the reference the three whole-data tests
    below compare with: computed once per process (they share an xdist group, so one worker)."""
    norm = get_normalizer(name)
    return [norm(t) for t in _real_texts(shared_dir)]


# the three tests over every real text share their per-text references on one worker
_ONE_WORKER = pytest.mark.xdist_group("normalize_every_text")


def _texts_of(value, out: list[str]) -> None:
    """Every string in a JSON value (problems, answers, chat turns, test cases...)."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, list):
        for v in value:
            _texts_of(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _texts_of(v, out)


@pytest.mark.shared_data
@_ONE_WORKER
def test_batch_equals_per_text_on_every_pool_and_benchmark_text(shared_dir):
    """Every string of every row of every pool file and every benchmark file (all variant
    wordings) normalizes to exactly the same text through both paths, for every normalizer."""
    texts = _real_texts(shared_dir)
    assert len(texts) > 100_000
    for name, norm in sorted(NORMALIZERS.items()):
        stats: dict[str, int] = {}
        got = norm.batch(texts, stats)
        want = _per_text(shared_dir, name)
        bad = [i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b]
        assert not bad, (name, texts[bad[0]][:200], got[bad[0]][:200], want[bad[0]][:200])
        assert stats["rows"] == len(texts)
        # the Python fallback is for rare characters, not a way around the compiled path
        assert stats.get("python_rows", 0) < len(texts) / 1000, (name, stats)


# rules whose Rust form needed care: emulated lookaheads next to each other and at the end,
# split alternations, nested braces, Unicode classes that differ between Python and Rust
EDGE_CASES = [
    r"\dfrac\dfrac{1}{2}\tfrac",
    r"\le\le\leq\leqslant<=\le≤",
    r"a\ge>=b\ne!=c\neq≠\lt\gt\lt",
    r"\left\right\left(\Bigl\bigr)\quad\qquad x",
    r"\ldots\cdots\dotsb\dotsx\vdots\ddots",
    r"\cdot\times\ast×·⋅∙\timesx",
    r"\frac{\frac{\sqrt{\sqrt[3]{x^{y^{z_{w}}}}}}{2}}{\text{\textbf{\mathrm{a}}}}",
    r"1{,}000{,}000 and \sqrt 41 \sqrt x \frac 1 2 \frac12",
    "x\x1c\x1dy\u2028z\u00a0w \u3000 v",  # Python \s (not Rust \s); NBSP
    "a\u0301b \u0660\u0661 ½ ² Ⅻ x\u0300",  # combining marks, Arabic-Indic digits, No, Nl
    "Straße ΣΑΣ σς ﬁ İ",  # casefold != lowercase: the Python fallback
    "<ASY>draw((0,0));</asy>keep[asy]x[/asy]\\begin{tikzpicture}y\\end{tikzpicture}z",
    "# Title\n   ## Sub\n#### not\n```python3\ncode```**b** __u__ `c`",
    "&lt;&gt;&le;&ge;&quot;&nbsp;&#39;&amp;lt;&amp;&unknown;",
    r"1 \le N \le 10^5, 2\times 10^{5}, 1e18, x12 * 10^5, 1.5 * 10^3, 10^123, \le10^9",
    "",
    "   ",
    "\\",
    "$",
]


@pytest.mark.parametrize("name", sorted(NORMALIZERS))
def test_batch_equals_per_text_on_edge_cases(name):
    norm = get_normalizer(name)
    stats: dict[str, int] = {}
    assert norm.batch(EDGE_CASES, stats) == [norm(t) for t in EDGE_CASES]
    assert stats["rows"] == len(EDGE_CASES)
    assert stats["python_rows"] == 1  # only the casefold row
    assert norm.batch([]) == []


def test_batch_counts_rows_that_took_the_python_path():
    code = get_normalizer("code")
    stats: dict[str, int] = {}
    texts = ["n <= 10^5", "no numbers", "Straße", "1e9 queries"]
    assert code.batch(texts, stats) == [code(t) for t in texts]
    assert stats == {"rows": 4, "python_rows": 1, "python_step_rows": 2}
    # a lone surrogate is not UTF-8: that batch goes through Python whole
    stats = {}
    assert code.batch(["a\ud800b", "x"], stats) == [code("a\ud800b"), "x"]
    assert stats["python_rows"] == 2


@pytest.mark.shared_data
@_ONE_WORKER
def test_batch_normalize_many_equals_per_text_on_every_pool_and_benchmark_text(shared_dir):
    """``batch_normalize_many`` (code derived from latex on the rows where code's own first steps
    and latex's diagram rule cannot match) gives every normalizer's own output on every real
    text, and really does skip code's own steps on most rows."""
    from decontam.normalize import CODE, LATEX, batch_normalize_many

    texts = _real_texts(shared_dir)
    stats: dict[str, int] = {}
    got = batch_normalize_many([CODE, LATEX], texts, stats)
    assert sorted(got) == ["code", "latex"]
    for norm in (CODE, LATEX):
        want = _per_text(shared_dir, norm.name)
        bad = [i for i, (a, b) in enumerate(zip(got[norm.name], want, strict=True)) if a != b]
        assert not bad, (norm.name, texts[bad[0]][:200], got[norm.name][bad[0]][:200])
    assert stats["rows"] < 1.9 * len(texts), stats  # code ran on a part of the rows only


def _words(texts: list[str], finish: bool) -> list[bytes]:
    from decontam.normalize import ascii_word_bytes

    joined = b" \x00 ".join(t.encode() for t in texts)
    return (ascii_word_bytes(joined) if finish else joined).split()


@pytest.mark.shared_data
@_ONE_WORKER
def test_ascii_words_are_the_final_words_on_every_pool_and_benchmark_text(shared_dir):
    """``ascii_words=False`` leaves the text rule to a caller that splits words on bytes:
    :func:`ascii_word_bytes` of the joined texts gives exactly the words of the final texts,
    row by row (the NUL separators are words of their own), on every real text, through
    ``batch`` and ``batch_normalize_many`` alike; and most rows really skipped the rule."""
    from decontam.normalize import CODE, LATEX, TEXT, batch_normalize_many

    texts = _real_texts(shared_dir)
    deferred = batch_normalize_many([CODE, LATEX], texts, ascii_words=False)
    deferred["text"] = TEXT.batch(texts, ascii_words=False)
    for norm in (CODE, LATEX, TEXT):
        final = _per_text(shared_dir, norm.name)
        assert _words(deferred[norm.name], True) == _words(final, False), norm.name
        assert sum(a != b for a, b in zip(deferred[norm.name], final, strict=True)) > len(texts) / 2


@pytest.mark.parametrize("name", sorted(NORMALIZERS))
def test_ascii_words_on_edge_cases(name):
    norm = get_normalizer(name)
    got = norm.batch(EDGE_CASES, ascii_words=False)
    assert _words(got, True) == _words([norm(t) for t in EDGE_CASES], False)
    # final texts pass through unchanged
    final = "\x00".join(norm(t) for t in EDGE_CASES).encode()
    from decontam.normalize import ascii_word_bytes

    assert ascii_word_bytes(final) is final or ascii_word_bytes(final) == final


def test_nonblank_is_python_strip_on_every_code_point():
    """``nonblank`` (one compiled pass) keeps exactly the texts ``t.strip()`` leaves non-empty:
    every Unicode scalar value alone and between ASCII blanks, nulls and empty strings."""
    import pyarrow as pa

    from decontam.normalize import nonblank

    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    values = [*chars, *(f" {c}\t" for c in chars), None, "", " \u3000\u2003", "\x1c\x1f", "a"]
    got = nonblank(pa.array(values, pa.string())).tolist()
    assert got == [v is not None and bool(v.strip()) for v in values]
    assert sum(got) < len(values) - 30  # Python's whitespace (about 30 code points) is blank
