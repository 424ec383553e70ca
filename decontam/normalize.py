"""Versioned text normalizers for decontamination, with offset maps back to the original text.

Every detector compares a training text with a benchmark item *after* normalization, but must
report evidence as spans of the *original* text. Each normalizer therefore has two entry points
that always agree on the string:

* ``norm(text) -> str`` (fast path, plain ``re.sub`` / ``unicodedata``), and
* ``norm.with_offsets(text) -> (str, numpy.ndarray)`` where ``offsets[i]`` is the index in
  ``text`` of the character that normalized character ``i`` came from.

A normalizer is a sequence of *steps* (NFKC, casefold, ordered regex rewrites). The rewrites are
applied by one helper, :func:`_sub_tracked`, which carries the offset map through every
substitution: characters copied from a capture group keep their own offsets; literal characters
of a replacement map into the span of the text they replace. So an offset map is always composed
through every rewrite, and ``offsets`` is *not* necessarily monotonic (``\\frac{a}{b}`` becomes
``a / b``); use :func:`original_span` to turn a normalized span into an original one.

Normalizers (``name`` -> ``version``; bump the version whenever the output can change, since
match records and reports record it):

* ``text`` (``text/1``): NFKC, casefold, every run of non-alphanumeric characters -> one space,
  stripped. For plain prose. ``text/2`` (and ``latex/3``, ``code/5``): Unicode's
  default-ignorable characters (soft hyphen, zero-width space/joiners, bidi controls, variation
  selectors) are dropped after NFKC, so a copy with them inside its words still matches.
* ``latex`` (``latex/2``): LaTeX-aware math. Drops diagram source (``<asy>``, ``[asy]``,
  ``\\begin{asy}``, TikZ), math delimiters, ellipses (``\\dots``, ``\\ldots``, ``\\cdots``: new
  in ``/2``, so ``a_1, \\ldots, a_n`` and ``a_1, ..., a_n`` meet), ``\\left``/``\\right``, spacing
  commands, unwraps ``\\text{..}``-style commands and ``\\overline{AB}``, rewrites ``\\dfrac``/``\\tfrac``/``\\frac``
  to ``a / b``, ``\\sqrt{41}``/``√41`` to ``sqrt(41)``, ``^{2}`` to ``^2``, unifies ``\\cdot``/
  ``\\times`` and ``\\le``/``\\leq``/``<=``/``≤`` (and ge/ne), then applies ``text``.
  So ``$\\frac{1}{2}$`` and ``1/2`` meet, and ``\\sqrt{41}`` and ``sqrt(41)`` meet.
* ``code`` (``code/2``): programming statements. Markdown (headings, emphasis, backticks, code
  fences) is dropped, the ``latex`` rewrites apply (AtCoder/Codeforces write constraints in
  LaTeX), and powers of ten are expanded to digits (``10^5``, ``10^{18}``, ``2\\times 10^5``,
  ``2 * 10^5``, ``1e18``), so ``1 \\leq N \\leq 10^5`` and ``1<= N<= 100000`` meet.
  ``code/3``: one-letter subscripts and ordinals are joined (``x_i``, ``x_{i}`` -> ``xi``;
  ``i^th`` -> ``ith``), so LCB's LaTeX-style ``x_i`` and LeetCodeDataset's flat ``xi`` meet;
  ``code/4``: also after a word (``start_i`` -> ``starti``; ``max_value`` is left alone).

Batches (:meth:`Normalizer.batch`) are normalized column-wise with polars string kernels (Rust
``regex``) and Arrow's NFKC, with no Python per text, to exactly the same strings (tested on
every real pool and benchmark text). Rows the compiled path cannot treat exactly like Python
(characters whose Rust lowercase differs from ``casefold``, or unassigned in Python's Unicode
database) take the per-text path, and ``code``'s power-of-ten rule runs in Python on the rows
that may contain one, its subscript/ordinal rules on the rows with a chain of ordinals
(``i^th^th``, which the Rust form's second pass would join differently); all are counted. :func:`batch_normalize_many` runs several normalizers
over one batch and computes ``code`` only on the rows where it can differ from ``latex``.

Tokens (:func:`tokenize`): maximal runs of Unicode letters/digits (``[^\\W_]+``) in normalized
text. For ASCII input this is exactly "runs of ``[a-z0-9]``"; letters of other scripts stay
inside words instead of being dropped.

:func:`split_statement` separates a programming statement from its sample/example blocks, so
detectors can score the statement without the boilerplate I/O.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np

from curation.errors import ConfigError, did_you_mean

# --------------------------------------------------------------------------------------------
# Offset-tracking rewrite engine. Written by hand because no library tracks character offsets
# through a chain of regex substitutions (the whole point of span evidence in the original text).
# --------------------------------------------------------------------------------------------

Replacement = str | Callable[[re.Match], str]
# (pattern, replacement, needs). ``needs`` is a necessary condition for the pattern to match:
# literal substrings (one must occur) or a cheap regex that must find something; None = no
# guard. A rule whose condition fails is skipped: the same output without a regex scan of the
# text (about a third of the LaTeX/code normalizers' time). Tests check each guard on real texts.
Needs = tuple[str, ...] | re.Pattern | None
Rule = tuple[re.Pattern, Replacement, Needs]


def _may_match(needs: Needs, text: str) -> bool:
    if needs is None:
        return True
    if isinstance(needs, re.Pattern):
        return needs.search(text) is not None
    return any(x in text for x in needs)


_GROUP_REF = re.compile(r"\\(\d+)|\\g<(\d+)>")


@functools.cache  # a rule's template is parsed once, not at every tracked substitution
def _parse_template(template: str) -> tuple[str | int, ...]:
    """Split a ``re.sub`` template into literal strings and group numbers (``\\1``, ``\\g<1>``)."""
    parts: list[str | int] = []
    pos = 0
    for m in _GROUP_REF.finditer(template):
        if m.start() > pos:
            parts.append(template[pos : m.start()])
        parts.append(int(m.group(1) or m.group(2)))
        pos = m.end()
    if pos < len(template):
        parts.append(template[pos:])
    # Unescape literal backslashes the same way re.sub would for our simple templates.
    return tuple(p.replace("\\\\", "\\") if isinstance(p, str) else p for p in parts)


@dataclass(frozen=True)
class _Rules:
    """Ordered regex substitutions; optionally repeated until the text stops changing (for
    nested braces, innermost first)."""

    rules: tuple[Rule, ...]
    repeat: int = 1
    # an equivalent single-call implementation for the untracked path (tests check it agrees)
    fast: Callable[[str], str] | None = None
    # the columnar equivalent (:func:`_batch_apply`); None = rows that may match go through
    # ``apply`` in Python (``batch_candidates``: a Rust regex that every such row matches)
    batch: tuple[_RustRule, ...] | None = None
    batch_candidates: str | None = None
    # the same for the tracked path: (text, offsets) -> what ``apply_tracked`` gives (tested)
    fast_tracked: Callable[[str, list[int]], tuple[str, list[int]]] | None = None
    # a Rust regex that every row on which ``batch`` can differ from ``apply`` matches (inputs
    # its emulation of a look-around cannot follow): such rows take ``apply`` in Python
    batch_python: str | None = None

    def apply(self, text: str) -> str:
        if self.fast is not None:
            return self.fast(text)
        for _ in range(self.repeat):
            before = text
            for pat, repl, needs in self.rules:
                if _may_match(needs, text):
                    text = pat.sub(repl, text)
            if text == before:
                break
        return text

    def apply_tracked(self, text: str, offs: list[int]) -> tuple[str, list[int]]:
        if self.fast_tracked is not None:
            return self.fast_tracked(text, offs)
        for _ in range(self.repeat):
            before = text
            for pat, repl, needs in self.rules:
                if _may_match(needs, text):
                    text, offs = _sub_tracked(pat, repl, text, offs)
            if text == before:
                break
        return text, offs


def _sub_tracked(
    pat: re.Pattern, repl: Replacement, text: str, offs: list[int]
) -> tuple[str, list[int]]:
    """``pat.sub(repl, text)`` that also rewrites the offset list ``offs`` (one entry per char).

    Characters copied from a capture group keep their offsets; literal replacement characters map
    into the replaced span (spread evenly over it, first char -> span start, last -> span end-1).
    """
    template = _parse_template(repl) if isinstance(repl, str) else None
    if template is not None and (
        not template
        or (len(template) == 1 and isinstance(template[0], str) and len(template[0]) == 1)
    ):
        return _sub_one_char(pat, repl, text, offs)  # type: ignore[arg-type]
    return _sub_general(pat, repl, template, text, offs)


def _sub_general(
    pat: re.Pattern, repl: Replacement, template, text: str, offs: list[int]
) -> tuple[str, list[int]]:
    """:func:`_sub_tracked` for any replacement (``template``: the parsed string one, or None
    for a function)."""
    out_text: list[str] = []
    out_offs: list[int] = []
    pos = 0
    any_match = False
    for m in pat.finditer(text):
        any_match = True
        s, e = m.span()
        out_text.append(text[pos:s])
        out_offs.extend(offs[pos:s])
        pos = e
        if template is None:
            piece = repl(m)  # type: ignore[operator]
            out_text.append(piece)
            out_offs.extend(_spread(offs, s, e, len(piece)))
            continue
        cursor = s  # where the gap of text replaced by the next literal starts
        for k, part in enumerate(template):
            if isinstance(part, int):
                gs, ge = m.span(part)
                if gs < 0:
                    continue  # group did not participate: re.sub substitutes ""
                out_text.append(text[gs:ge])
                out_offs.extend(offs[gs:ge])
                cursor = max(cursor, ge)
            elif part:
                # the literal stands for the text between the previous group and the next one
                gap_end = next(
                    (
                        m.start(g)
                        for g in template[k + 1 :]
                        if isinstance(g, int) and m.start(g) >= cursor
                    ),
                    e,
                )
                out_text.append(part)
                if gap_end > cursor:
                    out_offs.extend(_align(part, text, offs, cursor, gap_end))
                else:
                    out_offs.extend(_spread(offs, min(cursor, e - 1) if e > s else s, e, len(part)))
    if not any_match:
        return text, offs
    out_text.append(text[pos:])
    out_offs.extend(offs[pos:])
    return "".join(out_text), out_offs


def _sub_one_char(pat: re.Pattern, repl: str, text: str, offs: list[int]):
    """:func:`_sub_tracked` for a replacement of at most one literal character (the text rule's
    runs of punctuation to one space, trims): what its general loop gives (a non-empty match's
    character takes the match's first offset, an empty match's the next character's, as
    :func:`_spread`), without the per-match template walk that was half of the tracked path's
    time on matched pool rows."""
    out_offs: list[int] = []
    pos = 0
    matched = False
    for m in pat.finditer(text):
        matched = True
        s, e = m.span()
        out_offs += offs[pos:s]
        if repl:
            out_offs += [offs[s]] if e > s else _spread(offs, s, e, 1)
        pos = e
    if not matched:
        return text, offs
    out_offs += offs[pos:]
    return pat.sub(repl, text), out_offs


_ALNUM_RUN = re.compile(r"[^\W_]+")


def _align(part: str, text: str, offs: list[int], s: int, e: int) -> list[int]:
    """Offsets for literal ``part`` replacing ``text[s:e]``: a word of ``part`` that also occurs
    in the replaced text (``sqrt`` in ``\\sqrt``) maps onto that occurrence char by char; the
    other chars are spread over the span."""
    if len(part) == 1:  # the common case (" " for a run of punctuation): no search needed
        return [offs[s]]
    out = _spread(offs, s, e, len(part))
    if part.isspace():
        return out
    gap = text[s:e]
    for m in _ALNUM_RUN.finditer(part):
        k = gap.find(m.group(0))
        if k >= 0:
            out[m.start() : m.end()] = offs[s + k : s + k + len(m.group(0))]
    return out


def _spread(offs: list[int], s: int, e: int, n: int) -> list[int]:
    """Offsets for ``n`` literal chars replacing ``text[s:e]``: spread evenly over the span."""
    if n == 0:
        return []
    if e <= s:  # zero-width match: attach to the next (or last) char
        k = min(s, len(offs) - 1)
        return [offs[k] if k >= 0 else 0] * n
    if n == 1:
        return [offs[s]]
    width = e - 1 - s
    return [offs[s + (i * width) // (n - 1)] for i in range(n)]


# --------------------------------------------------------------------------------------------
# Unicode steps
# --------------------------------------------------------------------------------------------

_NON_ASCII_CHUNK = re.compile(r"[\x00-\x7f]?[^\x00-\x7f]+")


def _nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def _nfkc_tracked(text: str, offs: list[int]) -> tuple[str, list[int]]:
    if text.isascii() or unicodedata.is_normalized("NFKC", text):
        return text, offs

    # ASCII is NFKC-stable and never composes with a preceding char, so only non-ASCII runs
    # (plus the one ASCII char before them, a possible base for combining marks) can change.
    def chunk(m: re.Match) -> str:
        return _nfkc(m.group(0))

    out_text: list[str] = []
    out_offs: list[int] = []
    pos = 0
    for m in _NON_ASCII_CHUNK.finditer(text):
        s, e = m.span()
        out_text.append(text[pos:s])
        out_offs.extend(offs[pos:s])
        pos = e
        seg = text[s:e]
        norm = chunk(m)
        if norm == seg:
            out_text.append(seg)
            out_offs.extend(offs[s:e])
            continue
        # per cluster: a starter and the combining marks after it
        pieces: list[str] = []
        piece_offs: list[int] = []
        i = s
        while i < e:
            j = i + 1
            while j < e and unicodedata.combining(text[j]):
                j += 1
            c = _nfkc(text[i:j])
            pieces.append(c)
            piece_offs.extend(_spread(offs, i, j, len(c)))
            i = j
        if "".join(pieces) != norm:  # composition across clusters (e.g. Hangul jamo)
            pieces, piece_offs = [norm], _spread(offs, s, e, len(norm))
        out_text.extend(pieces)
        out_offs.extend(piece_offs)
    out_text.append(text[pos:])
    out_offs.extend(offs[pos:])
    return "".join(out_text), out_offs


# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): invisible characters (soft
# hyphen, zero-width space and joiners, bidi controls, variation selectors, tags) that change no
# word a reader sees. Inside a word each split it in two, so a verbatim copy with soft hyphens
# (as scraped HTML has them) or zero-width spaces matched no n-gram. Dropped right after NFKC
# (which maps the Hangul fillers U+3164/U+FFA0 to U+1160, itself ignorable): text/2, latex/3,
# code/5. Listed here because Python's unicodedata has no such property.
_IGNORABLE_RANGES = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)  # fmt: skip
_IGNORABLE = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in _IGNORABLE_RANGES) + "]")
_IGNORABLE_RUST = "[" + "".join(f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in _IGNORABLE_RANGES) + "]"


def drop_ignorable(text: str) -> str:
    return text if text.isascii() else _IGNORABLE.sub("", text)


def _drop_ignorable_tracked(text: str, offs: list[int]) -> tuple[str, list[int]]:
    if text.isascii() or not _IGNORABLE.search(text):
        return text, offs
    kept = [i for i, c in enumerate(text) if not _IGNORABLE.match(c)]
    return "".join(text[i] for i in kept), [offs[i] for i in kept]


def _casefold_tracked(text: str, offs: list[int]) -> tuple[str, list[int]]:
    folded = text.casefold()
    if len(folded) == len(text):  # casefold never shrinks a char, so this is 1:1
        return folded, offs
    out_offs: list[int] = []
    for ch, o in zip(text, offs, strict=True):
        out_offs.extend([o] * len(ch.casefold()))
    return folded, out_offs


@dataclass(frozen=True)
class _Unicode:
    kind: str  # "nfkc" | "casefold"

    def apply(self, text: str) -> str:
        return drop_ignorable(_nfkc(text)) if self.kind == "nfkc" else text.casefold()

    def apply_tracked(self, text: str, offs: list[int]) -> tuple[str, list[int]]:
        if self.kind == "nfkc":
            return _drop_ignorable_tracked(*_nfkc_tracked(text, offs))
        return _casefold_tracked(text, offs)


_Step = _Rules | _Unicode


# --------------------------------------------------------------------------------------------
# Rule sets
# --------------------------------------------------------------------------------------------


def _r(pattern: str, repl: Replacement, flags: int = 0, needs: Needs = None) -> Rule:
    return (re.compile(pattern, flags), repl, needs)


_BS = ("\\",)  # needs a backslash


@dataclass(frozen=True)
class _RustRule:
    """One rewrite of the columnar path (:func:`_batch_apply`), in Rust ``regex`` syntax.

    ``<S>``, ``<D>`` and ``<ALNUM>`` in a pattern stand for the exact code point sets of
    Python's ``\\s``, ``\\d`` and ``[^\\W_]`` (Rust's Unicode classes differ from Python's)."""

    pattern: str
    repl: str
    passes: int = 1
    kind: str = "regex"  # "regex" | "literal" | "strip" (strip spaces at both ends)


def _rx(pattern: str, repl: str, passes: int = 1) -> _RustRule:
    return _RustRule(pattern, repl, passes)


_BR = r"\{([^{}]*)\}"  # one brace group without nested braces (rules repeat, innermost first)

# Plain text: every run of non-alphanumerics (punctuation, symbols, whitespace, "_") -> " ".
# The two subs leave exactly the alphanumeric runs joined by single spaces, which one findall
# and join compute a third faster (a quarter of all normalization time was these two rules).
# For ASCII text (most of it) ``[^\W_]`` is exactly [0-9A-Za-z], so one bytes.translate that
# maps every other byte to a space, and a split/join, do it another 2x faster.
_ASCII_NON_ALNUM_TO_SPACE = bytes(c if chr(c).isalnum() else 32 for c in range(128)) + b" " * 128


def _alnum_words(text: str) -> str:
    if text.isascii():
        return " ".join(text.encode().translate(_ASCII_NON_ALNUM_TO_SPACE).decode().split())
    return " ".join(_ALNUM_RUN.findall(text))


def _alnum_words_tracked(text: str, offs: list[int]) -> tuple[str, list[int]]:
    # the two rules' tracked result built from the words: each word keeps its characters'
    # offsets, the space between two words takes the offset of the first character of the run
    # it replaced (as the first rule's one-character substitution gives it); the runs at both
    # ends go (the second rule). A sixth of the tracked path's time on matched pool rows.
    out: list[int] = []
    prev = -1
    for m in _ALNUM_RUN.finditer(text):
        s, e = m.span()
        if prev >= 0:
            out.append(offs[prev])
        out += offs[s:e]
        prev = e
    return _alnum_words(text), out


_TEXT_RULES = _Rules(
    (_r(r"[\W_]+", " "), _r(r"^ | $", "")),
    fast=_alnum_words,
    fast_tracked=_alnum_words_tracked,
    batch=(_rx(r"[^<ALNUM>]+", " "), _RustRule("", "", kind="strip")),
)

_DIAGRAM_RULES = _Rules(
    (
        _r(r"<asy>.*?</asy>", " ", re.S | re.I),
        _r(r"\[asy\].*?\[/asy\]", " ", re.S | re.I),
        _r(r"\\begin\{asy\}.*?\\end\{asy\}", " ", re.S),
        _r(r"\\begin\{tikzpicture\}.*?\\end\{tikzpicture\}", " ", re.S),
    ),
    batch=(
        _rx(r"(?si)<asy>.*?</asy>", " "),
        _rx(r"(?si)\[asy\].*?\[/asy\]", " "),
        _rx(r"(?s)\\begin\{asy\}.*?\\end\{asy\}", " "),
        _rx(r"(?s)\\begin\{tikzpicture\}.*?\\end\{tikzpicture\}", " "),
    ),
)

_TEXT_COMMANDS = (
    "text|textbf|textit|textrm|texttt|textsf|mathrm|mathbf|mathit|mathsf|mathtt|mathbb|mathcal|"
    "boldsymbol|operatorname|mbox|emph|overline|underline|widehat|widetilde|overrightarrow|"
    "overleftrightarrow|hat|bar|vec|tilde"
)

_LATEX_FLAT = _Rules(
    (
        _r(r"\\[dt]frac(?![a-zA-Z])", r"\\frac", needs=_BS),
        # ellipses: \dots, \ldots, \cdots, \vdots, \ddots, \dotsc... are punctuation, like "..."
        _r(r"\\(?:[lcv]?dots[bcimo]?|ddots)(?![a-zA-Z])", " ", needs=_BS),
        _r(r"(\d)\{,\}(\d)", r"\1\2", needs=("{,}",)),  # 1{,}000 -> 1000
        _r(r"\\(?:leqslant|leq|le)(?![a-zA-Z])|<=|≤|⩽", " <= ", needs=(*_BS, "<=", "≤", "⩽")),
        _r(r"\\(?:geqslant|geq|ge)(?![a-zA-Z])|>=|≥|⩾", " >= ", needs=(*_BS, ">=", "≥", "⩾")),
        _r(r"\\(?:neq|ne)(?![a-zA-Z])|!=|≠", " != ", needs=(*_BS, "!=", "≠")),
        _r(r"\\lt(?![a-zA-Z])", " < ", needs=_BS),
        _r(r"\\gt(?![a-zA-Z])", " > ", needs=_BS),
        _r(r"\\(?:cdot|times|ast)(?![a-zA-Z])|[×·⋅∙]", " * ", needs=(*_BS, "×", "·", "⋅", "∙")),
        _r(
            r"\\(?:left|right|bigl|bigr|Bigl|Bigr|biggl|biggr|big|Big|bigg|Bigg|displaystyle|"
            r"textstyle|limits|nolimits|quad|qquad)(?![a-zA-Z])",
            " ",
            needs=_BS,
        ),
        _r(r"\\begin\{[a-zA-Z*]*\}|\\end\{[a-zA-Z*]*\}", " ", needs=_BS),
        _r(r"\\\\|\\[,;:! ]|~", " ", needs=(*_BS, "~")),  # line breaks and spacing commands
        _r(r"\\\(|\\\)|\\\[|\\\]|\$", " ", needs=(*_BS, "$")),  # math delimiters
        _r(r"√", " sqrt ", needs=("√",)),
    ),
    # Rust's regex has no lookahead: "(?![a-zA-Z])" becomes a consumed "([^a-zA-Z]|$)" that the
    # replacement puts back, and the rule runs twice (a match whose first char was consumed as
    # the previous match's lookahead is found on the second pass; no replacement can make a new
    # match). An alternation of such a command with plain symbols is split, symbols first: the
    # two kinds of match never overlap, and a replaced symbol keeps the lookahead's verdict.
    batch=(
        _rx(r"\\[dt]frac([^a-zA-Z]|$)", r"\frac${1}", passes=2),
        _rx(r"\\(?:[lcv]?dots[bcimo]?|ddots)([^a-zA-Z]|$)", " ${1}", passes=2),
        _rx(r"([<D>])\{,\}([<D>])", "${1}${2}"),
        _rx(r"<=|≤|⩽", " <= "),
        _rx(r"\\(?:leqslant|leq|le)([^a-zA-Z]|$)", " <= ${1}", passes=2),
        _rx(r">=|≥|⩾", " >= "),
        _rx(r"\\(?:geqslant|geq|ge)([^a-zA-Z]|$)", " >= ${1}", passes=2),
        _rx(r"!=|≠", " != "),
        _rx(r"\\(?:neq|ne)([^a-zA-Z]|$)", " != ${1}", passes=2),
        _rx(r"\\lt([^a-zA-Z]|$)", " < ${1}", passes=2),
        _rx(r"\\gt([^a-zA-Z]|$)", " > ${1}", passes=2),
        _rx(r"[×·⋅∙]", " * "),
        _rx(r"\\(?:cdot|times|ast)([^a-zA-Z]|$)", " * ${1}", passes=2),
        _rx(
            r"\\(?:left|right|bigl|bigr|Bigl|Bigr|biggl|biggr|big|Big|bigg|Bigg|displaystyle|"
            r"textstyle|limits|nolimits|quad|qquad)([^a-zA-Z]|$)",
            " ${1}",
            passes=2,
        ),
        _rx(r"\\begin\{[a-zA-Z*]*\}|\\end\{[a-zA-Z*]*\}", " "),
        _rx(r"\\\\|\\[,;:! ]|~", " "),
        _rx(r"\\\(|\\\)|\\\[|\\\]|\$", " "),
        _rx(r"√", " sqrt "),
    ),
)

_LATEX_NESTED = _Rules(
    (
        _r(r"\\(?:" + _TEXT_COMMANDS + r")(?![a-zA-Z])\s*" + _BR, r" \1 ", needs=_BS),
        _r(r"\\sqrt\s*\[([^\[\]]*)\]\s*" + _BR, r" sqrt[\1](\2)", needs=_BS),
        _r(r"\\sqrt\s*" + _BR, r" sqrt(\1)", needs=_BS),
        _r(r"\\frac\s*" + _BR + r"\s*" + _BR, r" \1 / \2 ", needs=_BS),
        # the trailing space keeps x^{2}y apart as "x^2 y" (and maps onto the closing brace)
        _r(r"\^\s*" + _BR, r"^\1 ", needs=("^",)),
        _r(r"_\s*" + _BR, r"_\1 ", needs=("_",)),
    ),
    repeat=8,
    # the text commands' lookahead is implied by the "\s*{" that must follow
    batch=(
        _rx(r"\\(?:" + _TEXT_COMMANDS + r")[<S>]*" + _BR, " ${1} "),
        _rx(r"\\sqrt[<S>]*\[([^\[\]]*)\][<S>]*" + _BR, " sqrt[${1}](${2})"),
        _rx(r"\\sqrt[<S>]*" + _BR, " sqrt(${1})"),
        _rx(r"\\frac[<S>]*" + _BR + r"[<S>]*" + _BR, " ${1} / ${2} "),
        _rx(r"\^[<S>]*" + _BR, "^${1} "),
        _rx(r"_[<S>]*" + _BR, "_${1} "),
    ),
)

_LATEX_TAIL = _Rules(
    (
        _r(r"\\sqrt\s*(\d+|[a-zA-Z])", r" sqrt(\1)", needs=_BS),
        _r(r"\\frac\s*(\d)\s*(\d)", r" \1 / \2 ", needs=_BS),  # \frac12
    ),
    batch=(
        _rx(r"\\sqrt[<S>]*([<D>]+|[a-zA-Z])", " sqrt(${1})"),
        _rx(r"\\frac[<S>]*([<D>])[<S>]*([<D>])", " ${1} / ${2} "),
    ),
)

_ENTITIES = {"lt": "<", "gt": ">", "le": "≤", "ge": "≥", "amp": "&", "quot": '"', "nbsp": " ",
             "#39": "'"}  # fmt: skip
_MARKDOWN_RULES = _Rules(
    (
        _r(r"```[\w+#.-]*", " ", needs=("```",)),  # code fences, with their language tag
        _r(r"^[ \t]{0,3}#{1,6}[ \t]+", " ", re.M, needs=("#",)),  # headings
        _r(r"\*\*|__|`", " ", needs=("**", "__", "`")),
        _r(r"&(lt|gt|le|ge|amp|quot|nbsp|#39);", lambda m: _ENTITIES[m.group(1)], needs=("&",)),
    ),
    # entities one literal at a time, "&amp;" last: matches never overlap and no other
    # replacement contains "&" or ";", so this equals the one-pass substitution
    batch=(
        _rx(r"```[<ALNUM>_+#.\-]*", " "),
        _rx(r"(?m)^[ \t]{0,3}#{1,6}[ \t]+", " "),
        _rx(r"\*\*|__|`", " "),
        *(
            _RustRule(f"&{k};", v, kind="literal")
            for k, v in sorted(_ENTITIES.items(), key=lambda kv: kv[0] == "amp")
        ),
    ),
)


def _decimal_to_digits(value: Decimal) -> str | None:
    if value != value.to_integral_value() or value.adjusted() > 40:
        return None
    return str(int(value))


_AFTER_COMPARISON = re.compile(r"\\(?:leq?|geq?|lt|gt)$")


def _starts_number(m: re.Match) -> bool:
    """A number starts after a non-word char, or right after a LaTeX comparison (``\\le10^5``).
    Checked here rather than with a regex lookbehind: patterns that begin with a digit let the
    regex engine skip ahead fast, which a leading lookbehind prevents (3x slower)."""
    i = m.start()
    if i == 0:
        return True
    prev = m.string[i - 1]
    if not (prev.isalnum() or prev in "._"):
        return True
    return bool(_AFTER_COMPARISON.search(m.string, max(0, i - 5), i))


def _expand_mantissa(m: re.Match) -> str:
    if not _starts_number(m):
        return m.group(0)
    exp = next(g for g in m.groups()[1:] if g is not None)
    try:
        v = Decimal(m.group(1)) * (Decimal(10) ** int(exp))
    except InvalidOperation:  # pragma: no cover - the regex only admits numbers
        return m.group(0)
    return _decimal_to_digits(v) or m.group(0)


def _expand_power(m: re.Match) -> str:
    if not _starts_number(m):
        return m.group(0)
    return "1" + "0" * int(m.group(1) or m.group(2))


# Applied to the raw statement (before the LaTeX rewrites), so a number's offsets cover all of
# "2\times 10^{5}" including the closing brace.
_POW10 = r"10\s*\^\s*(?:\{\s*(\d{1,2})\s*\}|(\d{1,2})(?!\d))"
_TIMES = r"\s*(?:\\times|\\cdot|\*|×|·|⋅)\s*"
_CODE_NUMBER_RULES = _Rules(
    (
        _r(r"(\d+(?:\.\d+)?)" + _TIMES + _POW10, _expand_mantissa, needs=("10",)),  # 2\times 10^{5}
        _r(_POW10, _expand_power, needs=("10",)),  # 10^5, 10^{18}
        _r(
            r"(\d+(?:\.\d+)?)[eE]\+?(\d{1,2})(?!\w|\.\d)",
            _expand_mantissa,
            needs=re.compile(r"\d[eE]"),
        ),  # 1e18
    ),
    # no columnar form yet (the mantissa arithmetic and the number-start check are callbacks):
    # rows that may match go through ``apply``; every match contains "10^" or "<digit>e<digit>"
    batch_candidates=r"10[<S>]*\^|[<D>][eE]\+?[<D>]",
)

# Subscripts and ordinals written the LaTeX/HTML way or flat (code/3): LCB's ``x_i``, ``x_{i}``,
# ``a_1`` and ``i^th`` are LeetCodeDataset's ``xi``, ``a1`` and ``ith`` (one HTML ``<sub>`` or
# ``<sup>`` rendered two ways); code/4: the base may be a word (``start_i`` -> ``starti``), the
# subscript stays one letter or a number, so identifiers (``max_value``) keep their underscore;
# not inside a chain (``T_H_T_H``: where Python's look-behind and Rust's
# consumed neighbour would split it differently). Runs on the raw statement, before the LaTeX
# rules; the replacement is a function, so its characters map onto the whole ``x_{i}`` (the
# offset map then covers the closing brace). The Rust form consumes its look-behind and
# look-ahead characters and puts them back; two passes find the matches whose neighbour
# character the previous match consumed.
_SCRIPT = r"(?:\{([A-Za-z]|[0-9]+)\}|([A-Za-z]|[0-9]+))"
_ORDINAL = r"(?:\{(st|nd|rd|th)\}|(st|nd|rd|th))"


def _joined(m: re.Match) -> str:
    return m.group(1) + (m.group(2) or m.group(3))


_CODE_SCRIPT_RULES = _Rules(
    (
        _r(r"(?<![A-Za-z0-9_])([A-Za-z]+)_" + _SCRIPT + r"(?![A-Za-z0-9_])", _joined, needs=("_",)),
        _r(r"([A-Za-z0-9])\^" + _ORDINAL + r"(?![A-Za-z])", _joined, needs=("^",)),
    ),
    batch=(
        _rx(
            r"(^|[^A-Za-z0-9_])([A-Za-z]+)_" + _SCRIPT + r"([^A-Za-z0-9_]|$)",
            "${1}${2}${3}${4}${5}",
            passes=2,
        ),
        _rx(r"([A-Za-z0-9])\^" + _ORDINAL + r"([^A-Za-z]|$)", "${1}${2}${3}${4}", passes=2),
    ),
    # a chain of ordinals (``i^th^th``, ``i^{th}^st``): Python's match consumes the ordinal's
    # last letter, but the second Rust pass sees the rewritten ``ith^th`` and joins ``h^th``
    # too; only an ordinal right before a "^" lets a pass match a letter Python consumed
    batch_python=r"(?:st|nd|rd|th)\}?\^",
)

# --------------------------------------------------------------------------------------------
# Normalizers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Normalizer:
    """A named, versioned sequence of normalization steps (see the module docstring)."""

    name: str
    version: str
    steps: tuple[_Step, ...]
    description: str = ""
    # columnar path only: a Rust regex that every text the rule steps before casefold can
    # change must match (one of their rules' necessary characters). Rows without one skip
    # those steps: none of their rules matches, so the text reaches casefold unchanged (a
    # third of math pool rows hold no LaTeX/markdown character). Tested on real texts.
    batch_guard: str | None = None

    def __reduce__(self):
        # a registered normalizer pickles as its name (its steps hold lambdas): a fitted
        # detector can be sent to scan worker processes instead of being fitted again there
        if NORMALIZERS.get(self.name) is not self:
            raise TypeError(f"normalizer {self.name!r} is not registered: it cannot be pickled")
        return (get_normalizer, (self.name,))

    def __call__(self, text: str) -> str:
        for step in self.steps:
            text = step.apply(text)
        return text

    def with_offsets(self, text: str) -> tuple[str, np.ndarray]:
        """Normalized text and, for each of its chars, the index in ``text`` it came from."""
        offs: list[int] = list(range(len(text)))
        for step in self.steps:
            text, offs = step.apply_tracked(text, offs)
        return text, np.asarray(offs, dtype=np.int64)

    def batch(
        self,
        texts: Sequence[str],
        stats: dict[str, int] | None = None,
        *,
        ascii_words: bool = True,
    ) -> list[str]:
        """``[self(t) for t in texts]``, computed column-wise with polars string kernels.

        Rows with characters the compiled path cannot treat exactly as Python does (see
        :func:`_unsafe_patterns`) go through ``self`` whole; rules without a columnar form
        (``code``'s powers of ten) run in Python on the rows that may match. ``stats``, when
        given, counts ``rows``, ``python_rows`` and ``python_step_rows``.

        ``ascii_words=False`` (for a caller that splits words itself): rows that are ASCII
        before the last step, the text rule (non-alphanumeric runs -> one space, stripped),
        are returned without it (unless they hold a NUL, the buffer's row separator). Their
        words, the maximal ``[0-9a-z]`` runs, are the final text's; :func:`ascii_word_bytes`
        finishes a joined buffer of them in two byte passes (the rule rewrites every string
        in polars: about a third of a ``latex`` batch)."""
        return _batch_normalize(
            self, texts, stats if stats is not None else {}, ascii_words=ascii_words
        )

    def tokens(self, text: str) -> list[str]:
        """The word tokens of ``text`` after normalization."""
        return _ALNUM_RUN.findall(self(text))


_TEXT_TAIL: tuple[_Step, ...] = (_Unicode("casefold"), _TEXT_RULES)
# the characters one of which every match of a diagram, LaTeX-flat, nested or tail rule holds
# (``code`` adds markdown's, and ``1e18``'s digit-e-digit, the only number rule without one)
_LATEX_GUARD = r"[\\<\[{>!~$^_√≤⩽≥⩾≠×·⋅∙]"

TEXT = Normalizer(
    "text",
    "text/2",
    (_Unicode("nfkc"), *_TEXT_TAIL),
    "NFKC, default-ignorable characters dropped, casefold, non-alphanumeric runs -> one space",
)
LATEX = Normalizer(
    "latex",
    "latex/3",
    (_Unicode("nfkc"), _DIAGRAM_RULES, _LATEX_FLAT, _LATEX_NESTED, _LATEX_TAIL, *_TEXT_TAIL),
    "LaTeX-aware math: diagrams dropped, \\frac/sqrt/operators unified, then text/2",
    batch_guard=_LATEX_GUARD,
)
CODE = Normalizer(
    "code",
    "code/5",
    (
        _Unicode("nfkc"),
        _MARKDOWN_RULES,
        _CODE_NUMBER_RULES,
        _CODE_SCRIPT_RULES,
        _LATEX_FLAT,
        _LATEX_NESTED,
        _LATEX_TAIL,
        *_TEXT_TAIL,
    ),
    "programming statements: markdown dropped, latex/3 rewrites, powers of ten as digits, "
    "x_i/x_{i}/start_i -> xi/starti and i^th -> ith",
    batch_guard=_LATEX_GUARD[:-1] + r"`#*&]|[<D>][eE]\+?[<D>]",
)

NORMALIZERS: dict[str, Normalizer] = {n.name: n for n in (TEXT, LATEX, CODE)}


# --------------------------------------------------------------------------------------------
# Columnar path: whole batches through polars string kernels (Rust ``regex``), no Python per
# text. Written here because the rules are Sluice's own; the kernels are polars'.
# --------------------------------------------------------------------------------------------


def _code_point_ranges(chars: Sequence[int]) -> str:
    """A Rust regex class body (no brackets) for the sorted code points ``chars``."""
    out: list[str] = []
    start = prev = None
    for c in chars:
        if prev is not None and c == prev + 1:
            prev = c
            continue
        if start is not None:
            out.append(f"\\x{{{start:X}}}" + (f"-\\x{{{prev:X}}}" if prev != start else ""))
        start = prev = c
    if start is not None:
        out.append(f"\\x{{{start:X}}}" + (f"-\\x{{{prev:X}}}" if prev != start else ""))
    return "".join(out)


@functools.cache
def _all_chars() -> tuple[str, str]:
    """Every Unicode scalar value in order, as two strings (below and above the surrogates)."""
    return "".join(map(chr, range(0xD800))), "".join(map(chr, range(0xE000, 0x110000)))


def _ranges_of(pattern: str) -> list[int]:
    """Code points that ``pattern`` (one char wide, Python ``re``) matches."""
    rx = re.compile(f"(?:{pattern})+")
    out: list[int] = []
    for chars in _all_chars():
        for m in rx.finditer(chars):
            out.extend(range(ord(m.group(0)[0]), ord(m.group(0)[-1]) + 1))
    return out


def _cached_tables(name: str, compute: Callable[[], Any]) -> Any:
    """``compute()`` (JSON-able), kept in the temp folder per Python Unicode database and
    polars/pyarrow version: building the character tables takes about a second, which every
    ``sluice`` process would otherwise pay."""
    import json
    import os
    import sys
    import tempfile
    from importlib.metadata import version

    tag = "-".join(
        (name, sys.version.split()[0], unicodedata.unidata_version, version("polars"),
         version("pyarrow"), "1")
    )  # fmt: skip
    path = os.path.join(tempfile.gettempdir(), f"sluice-normalize-{tag}.json")
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        pass
    value = compute()
    try:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(value, fh)
        os.replace(tmp, path)
    except OSError:  # a read-only temp folder: compute each time
        pass
    return value


@functools.cache
def _classes() -> dict[str, str]:
    return _cached_tables("classes", _compute_classes)


@functools.cache
def _unsafe_patterns() -> tuple[str, str]:
    a, b = _cached_tables("unsafe", _compute_unsafe_patterns)
    return a, b


def _compute_classes() -> dict[str, str]:
    """Python's ``\\s``, ``\\d`` and ``[^\\W_]`` as explicit code point sets for Rust patterns
    (Rust's ``\\w`` counts combining marks and not ``No``; its ``\\s`` lacks U+001C..U+001F)."""
    return {
        key: _code_point_ranges(_ranges_of(pat))
        for key, pat in (("<S>", r"\s"), ("<D>", r"\d"), ("<ALNUM>", r"[^\W_]"))
    }


@functools.cache
def _rust_pattern(pattern: str) -> str:
    for key, body in _classes().items():
        pattern = pattern.replace(key, body)
    return pattern


def _compute_unsafe_patterns() -> tuple[str, str]:
    """Rust classes of the characters the compiled path cannot treat exactly like Python:
    (1) NFKC: characters unassigned in Python's Unicode database (Arrow's may be newer) or
    that Arrow normalizes differently on their own; (2) case: characters whose Rust
    lowercase differs from Python's casefold (``ß`` -> ``ss``, ``ς`` -> ``σ``, Cherokee...)
    and ``Σ``, whose Rust lowercase depends on its neighbours. Rows holding one take the
    Python path. Each check is one call over all characters joined by newlines (a newline
    never composes with a neighbour, and no character normalizes or folds to one)."""
    import polars as pl

    nfkc_bad: list[int] = []
    case_bad: list[int] = []
    for chars in _all_chars():
        chars = chars.replace("\n", "")  # the separator (ASCII: safe)
        joined = "\n".join(chars)
        ser = pl.Series([joined], dtype=pl.String)
        checks = (
            (nfkc_bad, unicodedata.normalize("NFKC", joined), _nfkc_column(ser)[0]),
            (case_bad, joined.casefold(), ser.str.to_lowercase()[0]),
        )
        for bad, py, rust in checks:
            py_parts, rust_parts = py.split("\n"), rust.split("\n")
            assert len(py_parts) == len(rust_parts) == len(chars)
            bad.extend(
                ord(c)
                for c, x, y in zip(chars, py_parts, rust_parts, strict=True)
                if x != y or (bad is case_bad and c == "Σ")
            )
        nfkc_bad.extend(ord(c) for c in chars if unicodedata.category(c) == "Cn")
    return (
        f"[{_code_point_ranges(sorted(set(nfkc_bad)))}]",
        f"[{_code_point_ranges(sorted(set(case_bad)))}]",
    )


def _nfkc_column(ser):
    """NFKC of a polars string Series with Arrow's kernel (utf8proc; 10x polars' own)."""
    import polars as pl
    import pyarrow.compute as pc

    return pl.Series(pc.utf8_normalize(ser.to_arrow(), "NFKC"))


_LOOKAHEAD = "([^a-zA-Z]|$)"


def _replace_rows(ser, pat: str, repl: str, *, literal: bool = False):
    """``ser.str.replace_all(pat, repl)``, run only on the rows that contain a match when they
    are few (a read-only ``contains`` scan is about twice as fast as a rewrite of every row)."""
    idx = ser.str.contains(pat, literal=literal).arg_true()
    if not len(idx):
        return ser
    if 2 * len(idx) > len(ser):
        return ser.str.replace_all(pat, repl, literal=literal)
    out = ser.clone()  # copy on write: the caller's series stays as it was
    out.scatter(idx, ser.gather(idx).str.replace_all(pat, repl, literal=literal))
    return out


def _rust_rules(ser, rules: tuple[_RustRule, ...]):
    for rule in rules:
        if rule.kind == "strip":
            ser = ser.str.strip_chars(" ")
        elif rule.kind == "literal":
            ser = _replace_rows(ser, rule.pattern, rule.repl, literal=True)
        elif rule.passes == 2 and rule.pattern.endswith(_LOOKAHEAD):
            # the second pass only matters where a match was directly followed by a backslash
            # (its consumed lookahead char may start the next match); such a row matches, so
            # both that check and the passes run on the matching rows only (others stay as is)
            pat = _rust_pattern(rule.pattern)
            idx = ser.str.contains(pat).arg_true()
            if not len(idx):
                continue
            sub = ser.gather(idx)
            again = sub.str.contains(pat[: -len(_LOOKAHEAD)] + r"\\").any()
            sub = sub.str.replace_all(pat, rule.repl)
            if again:
                sub = _replace_rows(sub, pat, rule.repl)
            ser = ser.clone()  # copy on write: the caller's series stays as it was
            ser.scatter(idx, sub)
        else:
            for _ in range(rule.passes):
                ser = _replace_rows(ser, _rust_pattern(rule.pattern), rule.repl)
    return ser


def _batch_step(step: _Step, ser, stats: dict[str, int]):
    """One normalizer step over a polars string Series, exactly as ``step.apply`` per text."""
    import polars as pl

    if isinstance(step, _Unicode):
        if step.kind == "nfkc":
            return _replace_rows(_nfkc_column(ser), _IGNORABLE_RUST, "")
        return ser.str.to_lowercase()
    if step.batch is None:  # Python on the rows that may match, in place
        idx = ser.str.contains(_rust_pattern(step.batch_candidates or ".")).arg_true()
        if len(idx):
            stats["python_step_rows"] = stats.get("python_step_rows", 0) + len(idx)
            new = [step.apply(t) for t in ser.gather(idx).to_list()]
            ser = ser.scatter(idx, pl.Series(new, dtype=pl.String))
        return ser
    if step.batch_python is not None:  # rows the Rust form cannot follow: Python, in place
        hit = ser.str.contains(_rust_pattern(step.batch_python))
        if hit.any():
            idx, rest = hit.arg_true(), (~hit).arg_true()
            stats["python_step_rows"] = stats.get("python_step_rows", 0) + len(idx)
            new = [step.apply(t) for t in ser.gather(idx).to_list()]
            rust = replace(step, batch_python=None)
            ser = ser.clone()
            ser.scatter(idx, pl.Series(new, dtype=pl.String))
            if len(rest):
                ser.scatter(rest, _batch_step(rust, ser.gather(rest), stats))
            return ser
    if step.repeat == 1:
        return _rust_rules(ser, step.batch)
    # repeated until a row stops changing (as ``apply``: one unchanged round is a fixed point)
    active = None
    for _ in range(step.repeat):
        sub = ser if active is None else ser.gather(active)
        new = _rust_rules(sub, step.batch)
        changed = (new != sub).arg_true()
        if active is None:
            ser, active = new, changed
        else:
            ser = ser.scatter(active, new)
            active = active.gather(changed)
        if not len(active):
            break
    return ser


def _batch_normalize(
    norm: Normalizer, texts: Sequence[str], stats: dict[str, int], ascii_words: bool = True
) -> list[str]:
    import polars as pl

    n = len(texts)
    stats["rows"] = stats.get("rows", 0) + n
    try:
        ser = pl.Series(list(texts), dtype=pl.String)
    except Exception:  # lone surrogates are not UTF-8: the batch goes through Python
        stats["python_rows"] = stats.get("python_rows", 0) + n
        return [norm(t) for t in texts]
    if ser.null_count():
        raise TypeError("Normalizer.batch: every text must be a str")
    import pyarrow.compute as pc

    nfkc_bad, case_bad = _unsafe_patterns()
    steps = norm.steps
    # ASCII text is NFKC-stable and folds like Rust lowercases it: only the other rows are
    # checked for unsafe characters and normalized (a few percent of real pools)
    wide = pl.Series(pc.invert(pc.string_is_ascii(ser.to_arrow()))).arg_true()
    sub = ser.gather(wide)
    bad_sub = sub.str.contains(nfkc_bad)
    if steps and isinstance(steps[0], _Unicode) and steps[0].kind == "nfkc":
        if len(wide):
            sub = _replace_rows(_nfkc_column(sub), _IGNORABLE_RUST, "")
            ser = ser.clone()
            ser.scatter(wide, sub)
        steps = steps[1:]
    if any(isinstance(s, _Unicode) and s.kind == "casefold" for s in steps):
        # the rules add only ASCII (and the entities' ≤ ≥), so the NFKC text decides
        bad_sub = bad_sub | sub.str.contains(case_bad)
    bad = pl.Series(np.zeros(n, dtype=bool))
    if bad_sub.any():
        bad.scatter(wide.filter(bad_sub), True)
    bad_idx = bad.arg_true().to_list()
    if bad_idx:
        stats["python_rows"] = stats.get("python_rows", 0) + len(bad_idx)
        ser = ser.filter(~bad)
    head = 0
    if norm.batch_guard is not None:  # the rule steps before casefold, on the rows they can change
        while head < len(steps) and isinstance(steps[head], _Rules):
            head += 1
        idx = ser.str.contains(_rust_pattern(norm.batch_guard)).arg_true()
        if len(idx) == len(ser):
            head = 0
        elif len(idx):
            sub = ser.gather(idx)
            for step in steps[:head]:
                sub = _batch_step(step, sub, stats)
            ser = ser.clone()
            ser.scatter(idx, sub)
    defer = not ascii_words and len(steps) > head and steps[-1] is _TEXT_RULES
    for step in steps[head : len(steps) - defer]:
        ser = _batch_step(step, ser, stats)
    if defer:  # the text rule on the rows that are not ASCII now (see ``Normalizer.batch``)
        # and on those holding a NUL, the separator of :func:`ascii_word_bytes`'s buffer (which
        # keeps it, so a NUL left in a text would make a row boundary of it)
        not_ascii = pc.invert(pc.string_is_ascii(ser.to_arrow()))
        wide = (pl.Series(not_ascii) | ser.str.contains("\x00", literal=True)).arg_true()
        if len(wide):
            ser = ser.clone()
            ser.scatter(wide, _batch_step(_TEXT_RULES, ser.gather(wide), stats))
    good = ser.to_list()
    if not bad_idx:
        return good
    out: list[str] = []
    it = iter(good)
    bad_set = set(bad_idx)
    for i, t in enumerate(texts):
        out.append(norm(t) if i in bad_set else next(it))
    return out


# ``code`` and ``latex`` share their last steps (latex-flat, nested, tail, casefold, text): for
# an ASCII text (NFKC leaves it as it is) on which neither code's first steps (markdown, powers
# of ten, subscripts) nor latex's diagram rule can match, code's output *is* latex's. This
# regex is a necessary condition for one of those rules to match an ASCII text (each
# alternative is a substring every match of a rule holds); :func:`batch_normalize_many` runs
# code's own steps only on the rows that hold one (non-ASCII rows always).
_CODE_LIKE_LATEX = (
    r"(?i:asy)|tikzpicture"  # latex's diagrams
    r"|[`#&]|\*\*|__"  # markdown: fences, backticks, headings, emphasis, entities
    r"|10[<S>]*\^|[<D>][eE]\+?[<D>]"  # powers of ten
    r"|[A-Za-z]_[{A-Za-z0-9]|[A-Za-z0-9]\^\{?(?:st|nd|rd|th)"  # subscripts and ordinals
)
_SHARED_TAIL = {("code", "latex"): _CODE_LIKE_LATEX}


def batch_normalize_many(
    norms: Sequence[Normalizer],
    texts: Sequence[str],
    stats: dict[str, int] | None = None,
    *,
    ascii_words: bool = True,
) -> dict[str, list[str]]:
    """``{n.name: n.batch(texts) for n in norms}``, with ``code`` computed only on the rows
    where it can differ from ``latex`` when both are asked for (a third of the work of a scan
    with a math and a code index). Same strings (tested on every real text).
    ``ascii_words``: as in :meth:`Normalizer.batch`."""
    import polars as pl
    import pyarrow.compute as pc

    stats = stats if stats is not None else {}
    out: dict[str, list[str]] = {}
    by_name = {n.name: n for n in norms}
    for n in sorted(by_name.values(), key=lambda n: any(k[0] == n.name for k in _SHARED_TAIL)):
        base = next((b for (a, b) in _SHARED_TAIL if a == n.name and b in out), None)
        if base is None or not texts:
            out[n.name] = n.batch(texts, stats, ascii_words=ascii_words)
            continue
        try:
            ser = pl.Series(list(texts), dtype=pl.String)
        except Exception:  # lone surrogates: the whole batch as usual
            out[n.name] = n.batch(texts, stats, ascii_words=ascii_words)
            continue
        wide = pl.Series(pc.invert(pc.string_is_ascii(ser.to_arrow())))
        own = (wide | ser.str.contains(_rust_pattern(_SHARED_TAIL[(n.name, base)]))).arg_true()
        res = list(out[base])
        idx = own.to_list()
        if idx:
            own_texts = n.batch([texts[i] for i in idx], stats, ascii_words=ascii_words)
            for i, t in zip(idx, own_texts, strict=True):
                res[i] = t
        out[n.name] = res
    return out


# ASCII bytes that are not letters or digits -> space; NUL (a caller's row separator) and the
# bytes of non-ASCII characters (only letters and digits are left of those: such rows went
# through the text rule) stay
_ASCII_WORD_TABLE = bytes(
    c if chr(c).isascii() and (chr(c).isalnum() or c == 0) or c >= 0x80 else 0x20
    for c in range(256)
)


def ascii_word_bytes(buf: bytes) -> bytes:
    """Finish a buffer of texts from ``batch(..., ascii_words=False)`` joined with spaces and
    NUL separators: each ASCII non-letter-or-digit byte becomes a space and each run of spaces
    one space, so the buffer holds exactly the words of the fully normalized texts, one space
    apart (``bytes.translate``, then one numpy mask). A buffer of final texts comes back as it
    is. Why by hand: this is the text rule on bytes, where the caller already holds them;
    polars rewrites every string instead (about a third of a ``latex`` batch)."""
    out = buf.translate(_ASCII_WORD_TABLE)
    if out == buf:
        return buf
    a = np.frombuffer(out, np.uint8)
    space = a == 0x20
    keep = np.ones(len(a), bool)
    keep[1:] = ~(space[1:] & space[:-1])
    return a[keep].tobytes()


def nonblank(texts) -> np.ndarray:
    """``[t is not None and bool(t.strip()) for t in texts]`` for a pyarrow string array, one
    compiled pass (a character outside Python's whitespace, the set ``str.strip`` removes)."""
    import polars as pl
    import pyarrow as pa

    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if not len(texts):
        return np.zeros(0, bool)
    ser = pl.Series(texts.cast(pa.large_string()))
    return ser.str.contains(_rust_pattern("[^<S>]")).fill_null(False).to_numpy()


def get_normalizer(name: str) -> Normalizer:
    """The normalizer called ``name`` (``text``, ``latex`` or ``code``)."""
    try:
        return NORMALIZERS[name]
    except KeyError:
        raise ConfigError(
            f"unknown normalizer {name!r}", hint=did_you_mean(name, list(NORMALIZERS))
        ) from None


def tokenize(norm_text: str) -> list[tuple[int, int]]:
    """Word spans ``(start, end)`` in *normalized* text: maximal runs of letters/digits."""
    return [m.span() for m in _ALNUM_RUN.finditer(norm_text)]


def words(norm_text: str) -> list[str]:
    """The words of :func:`tokenize`'s spans (``[norm_text[a:b] for a, b in ...]``), faster."""
    return _ALNUM_RUN.findall(norm_text)


def original_span(offsets: np.ndarray | Sequence[int], start: int, end: int) -> tuple[int, int]:
    """The span of the original text that normalized chars ``[start, end)`` came from."""
    if end <= start:
        raise ValueError(f"empty span [{start}, {end})")
    seg = offsets[start:end]
    return int(min(seg)), int(max(seg)) + 1


def original_spans(offsets: np.ndarray, spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """:func:`original_span` for many spans at once (vectorized; spans must be non-empty)."""
    if not len(spans):
        return []
    idx = np.asarray(spans, dtype=np.int64).reshape(-1)  # s0, e0, s1, e1, ...
    if np.any(idx[1::2] <= idx[0::2]):
        raise ValueError("empty span")
    arr = np.append(np.asarray(offsets, dtype=np.int64), 0)  # sentinel so end == len is valid
    lo = np.minimum.reduceat(arr, idx)[0::2]
    hi = np.maximum.reduceat(arr, idx)[0::2] + 1
    return list(zip(lo.tolist(), hi.tolist(), strict=True))


# --------------------------------------------------------------------------------------------
# Statement vs. samples
# --------------------------------------------------------------------------------------------

# Headers that start sample / example material. "Sample Input 1:" may follow the statement on the
# same line (LiveCodeBench AtCoder texts), so it is matched anywhere; the others at line start.
_SAMPLE_HEADER = re.compile(
    r"(?:Sample\s+(?:Input|Output)(?:\s*\d+)?\s*:?)"
    r"|(?:^[ \t>#*]*(?:Examples?|Sample(?:\s+Tests?|\s+Cases?)?)(?:\s*\d+)?\s*:?[ \t*]*$)"
    r"|(?:^[ \t>#*]*Example\s*\d+\s*:)"
    r"|(?:^[ \t>#*]*(?:Input|Output|Explanation)\s*:[ \t*]*\S)"
    r"|(?:^[ \t>#*]*Notes?\s*:?[ \t*]*$)",
    re.M | re.I,
)
# Headers that bring us back to statement material (LeetCode puts constraints after examples).
_STATEMENT_HEADER = re.compile(
    r"^[ \t>#*]*(?:Constraints|Follow[- ]?up|Input(?:\s+Format)?|Output(?:\s+Format)?|"
    r"Problem(?:\s+Statement)?|Statement)\s*:?[ \t*]*(?:$|(?=\S))",
    re.M | re.I,
)


def section_spans(text: str) -> list[tuple[str, int, int]]:
    """Split ``text`` into ``("statement" | "samples", start, end)`` spans covering all of it.

    Samples start at a "Sample Input"/"Example 1:"/"Examples"/"Input: ..."/"Note" header and run
    until a statement header ("Constraints", "Follow-up", a bare "Input"/"Output" format
    heading...). Example-internal lines ("Input: x = 1", "Output: 2") stay inside samples.
    """
    events: list[tuple[int, str]] = []
    for m in _SAMPLE_HEADER.finditer(text):
        events.append((m.start(), "samples"))
    for m in _STATEMENT_HEADER.finditer(text):
        # "Input: nums = [..]" is an example line, matched by _SAMPLE_HEADER; a bare "Input"
        # heading (own line) or "Constraints:" is statement.
        line_end = text.find("\n", m.end())
        rest = text[m.end() : line_end if line_end >= 0 else len(text)].strip(" \t*")
        head = m.group(0).strip(" \t>#*").lower()
        if head.startswith(("input", "output")) and (rest or head.endswith(":")):
            continue
        events.append((m.start(), "statement"))
    events.sort()
    spans: list[tuple[str, int, int]] = []
    kind, start = "statement", 0
    for pos, new in events:
        if new == kind:
            continue
        if pos > start:
            spans.append((kind, start, pos))
        kind, start = new, pos
    if len(text) > start:
        spans.append((kind, start, len(text)))
    return spans


def split_statement(text: str) -> tuple[str, str]:
    """``(statement_part, samples_part)``: the statement (constraints and I/O format included)
    and the sample/example blocks, each the concatenation of its spans joined by newlines."""
    parts: dict[str, list[str]] = {"statement": [], "samples": []}
    for kind, s, e in section_spans(text):
        parts[kind].append(text[s:e].strip())
    return "\n".join(p for p in parts["statement"] if p), "\n".join(
        p for p in parts["samples"] if p
    )
