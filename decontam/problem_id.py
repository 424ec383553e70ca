"""Problem-identifier and contest-date matching against LiveCodeBench items.

Two detectors share one index over the code benchmark items (:class:`LcbIndex`):

* :class:`ProblemIdDetector` (``problem_id``) recognises problem identifiers in training text
  and in a pool's metadata columns, and matches them to benchmark items by canonical id:

  - AtCoder: ``abc387_c``, ``ABC387 C``, ``https://atcoder.jp/contests/abc387/tasks/abc387_c``
  - Codeforces: ``1985F``, ``1985_F``, ``codeforces.com/contest/1985/problem/F``,
    ``codeforces.com/problemset/problem/1985/F``
  - LeetCode: URL slug ``leetcode.com/problems/two-sum``, a bare slug equal to an item's
    ``question_title`` (``find-the-distinct-difference-array``), the title in Title Case
    (``Find the Distinct Difference Array``), frontend ids (``LeetCode 2777``, ``LC 2777``,
    ``problem 2777`` in a LeetCode context, a ``2777. <title>`` heading) and metadata
    (``question_id`` / ``task_id``).

  Score 1.0 for an unambiguous exact id; 0.5 for weak forms (``problem 2777`` without any
  LeetCode context, a numeric metadata id whose platform is unknown) so they are kept as
  evidence but do not pass the default threshold.

* :class:`ProblemDateDetector` (``problem_date``) flags problems whose contest date falls inside
  an evaluation window even when the statement was rewritten: the date comes from a pool's
  ``contest_date`` metadata, from the contest of a recognised AtCoder/Codeforces id, or is
  *estimated* for a LeetCode frontend id from the benchmark items' id -> date map (ids are
  assigned roughly in time order; the estimate uses the nearest known ids below and above).

Both detectors also accept structured metadata through ``score_metadata(table)``: a table with
``sample_uid`` (or ``uid``) and any of ``question_id``, ``task_id``, ``problem_id``,
``source_id``, ``contest_id``, ``platform``, ``contest_date`` and ``metadata``/``meta`` (a JSON
or Python-repr dict whose keys are read the same way). A numeric ``source_id`` is never read as a
LeetCode id (pools number their rows).
"""

from __future__ import annotations

import ast
import bisect
import datetime as dt
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from curation.errors import ConfigError, InputError
from decontam.base import Detector, DetectorConfig, empty_matches, matches_from_rows

if TYPE_CHECKING:  # pragma: no cover
    from decontam.benchmarks import BenchmarkSet

ID_FORMS: tuple[str, ...] = (
    "atcoder_url",
    "atcoder_id",
    "codeforces_url",
    "codeforces_id",
    "leetcode_url",
    "leetcode_slug",
    "leetcode_title",
    "leetcode_frontend_id",
)
METADATA_FIELDS: tuple[str, ...] = (
    "question_id",
    "task_id",
    "problem_id",
    "source_id",
    "contest_id",
    "platform",
    "contest_date",
)
STRONG, WEAK = 1.0, 0.5


# --------------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------------


def _parse_window(value: Any) -> tuple[str, str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = value.split("..", 1)
    try:
        start, end = (dt.date.fromisoformat(str(v)[:10]).isoformat() for v in value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"window must be (START, END) ISO dates, got {value!r}",
            hint='e.g. ("2024-08-01", "2025-02-01") or "2024-08-01..2025-02-01"',
        ) from None
    if start >= end:
        raise ConfigError(f"window start {start} is not before end {end}")
    return start, end


@dataclass
class ProblemIdConfig(DetectorConfig):
    threshold: float = field(
        default=1.0, metadata={"help": "score at or above which an id match flags (1.0 = exact)"}
    )
    forms: tuple[str, ...] = field(
        default=ID_FORMS, metadata={"help": f"id forms to recognise: {', '.join(ID_FORMS)}"}
    )
    min_title_words: int = field(
        default=3,
        metadata={"help": "bare LeetCode slugs / titles need at least this many words"},
    )
    window: tuple[str, str] | None = field(
        default=None,
        metadata={
            "help": "only match items dated in (START, END), END exclusive; None: every loaded item"
        },
    )

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ConfigError(f"problem_id threshold must be in (0, 1], got {self.threshold}")
        self.window = _parse_window(self.window)
        self.forms = tuple(self.forms)
        bad = [f for f in self.forms if f not in ID_FORMS]
        if bad:
            raise ConfigError(f"unknown id form {bad[0]!r}", hint=f"forms: {', '.join(ID_FORMS)}")
        if self.min_title_words < 1:
            raise ConfigError("min_title_words must be >= 1")


@dataclass
class ProblemDateConfig(DetectorConfig):
    threshold: float = field(
        default=1.0, metadata={"help": "score at or above which a date-in-window match flags"}
    )
    window: tuple[str, str] | None = field(
        default=None,
        metadata={
            "help": "evaluation window (START, END), END exclusive; None: each benchmark's loaded "
            "window, else the span of its item dates"
        },
    )
    estimate_leetcode_dates: bool = field(
        default=True, metadata={"help": "estimate dates of LeetCode frontend ids from the items"}
    )

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ConfigError(f"problem_date threshold must be in (0, 1], got {self.threshold}")
        self.window = _parse_window(self.window)


# --------------------------------------------------------------------------------------------
# Recognising ids in text
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IdHit:
    """One identifier found in a text or a metadata value."""

    form: str  # one of ID_FORMS
    key: tuple[
        str, str
    ]  # ("atcoder", "abc387_c") | ("codeforces", "1985_F") | ("leetcode", "2777") | ("slug", s)
    start: int
    end: int
    text: str
    strength: float = STRONG


_AT_URL = re.compile(r"atcoder\.jp/contests/([a-z0-9_-]+)/tasks/([a-z]{3}\d{3}_[a-z]\d?)", re.I)
_AT_ID = re.compile(r"(?<![A-Za-z0-9])(abc|arc|agc)(\d{3})(?:[_-]| ?)([a-h])(?![A-Za-z0-9])", re.I)
_CF_URL = re.compile(
    r"codeforces\.com/(?:contest|gym)/(\d{1,5})/problem/([A-Z]\d?)"
    r"|codeforces\.com/problemset/problem/(\d{1,5})/([A-Z]\d?)",
    re.I,
)
_CF_ID = re.compile(r"(?<![\w.])(?:CF ?)?(\d{3,4})_?([A-H]\d?)(?![\w])")
_LC_URL = re.compile(r"leetcode\.(?:com|cn)/problems/([a-z0-9]+(?:-[a-z0-9]+)*)", re.I)
_LC_FRONTEND = re.compile(
    r"(?<![A-Za-z0-9])(?:leetcode|LC)\s*(?:problem\s*)?(?:no\.?\s*|#\s*)?(\d{1,4})(?![\d])", re.I
)
_LC_PROBLEM_NO = re.compile(
    r"(?<![A-Za-z0-9])(?:problem|question)\s*(?:no\.?\s*|#\s*)?(\d{4})(?!\d)", re.I
)
_LC_CONTEXT = re.compile(r"leetcode|class Solution\b", re.I)
_HEADING_ID = re.compile(r"^[ \t#>*]*(\d{1,4})\.\s+(\S.*?)\s*$", re.M)
_WORD = re.compile(r"[A-Za-z0-9]+")
_SMALL_WORDS = {"a", "an", "the", "of", "in", "on", "to", "and", "or", "for", "with", "by", "at",
                "from", "into", "is", "ii", "iii", "iv"}  # fmt: skip


def _slug_words(s: str) -> tuple[str, ...]:
    return tuple(w.lower() for w in _WORD.findall(s))


def find_ids(
    text: str,
    *,
    slugs: TitleIndex | None = None,
    forms: Iterable[str] = ID_FORMS,
    min_title_words: int = 3,
) -> list[IdHit]:
    """All problem identifiers in ``text`` (spans are offsets into ``text``).

    ``slugs`` (the known LeetCode slugs) enables the bare-slug and title forms: titles are only
    recognised from a known list, never by "slugifying" free text.
    """
    forms = set(forms)
    hits: list[IdHit] = []
    taken: list[tuple[int, int]] = []  # URL spans: ids inside them are not counted twice

    def add(h: IdHit, claim: bool = False) -> None:
        if any(s <= h.start and h.end <= e for s, e in taken):
            return
        hits.append(h)
        if claim:
            taken.append((h.start, h.end))

    if "atcoder_url" in forms:
        for m in _AT_URL.finditer(text):
            add(IdHit("atcoder_url", ("atcoder", m.group(2).lower()), *m.span(), m.group(0)), True)
    if "codeforces_url" in forms:
        for m in _CF_URL.finditer(text):
            contest, idx = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            add(
                IdHit(
                    "codeforces_url",
                    ("codeforces", f"{contest}_{idx.upper()}"),
                    *m.span(),
                    m.group(0),
                ),
                True,
            )
    if "leetcode_url" in forms:
        for m in _LC_URL.finditer(text):
            add(IdHit("leetcode_url", ("slug", m.group(1).lower()), *m.span(), m.group(0)), True)
    if "atcoder_id" in forms:
        for m in _AT_ID.finditer(text):
            key = f"{m.group(1).lower()}{m.group(2)}_{m.group(3).lower()}"
            add(IdHit("atcoder_id", ("atcoder", key), *m.span(), m.group(0)))
    if "codeforces_id" in forms:
        for m in _CF_ID.finditer(text):
            add(
                IdHit(
                    "codeforces_id",
                    ("codeforces", f"{m.group(1)}_{m.group(2)}"),
                    *m.span(),
                    m.group(0),
                )
            )
    if "leetcode_frontend_id" in forms:
        for m in _LC_FRONTEND.finditer(text):
            add(
                IdHit(
                    "leetcode_frontend_id",
                    ("leetcode", str(int(m.group(1)))),
                    *m.span(),
                    m.group(0),
                )
            )
        context = bool(_LC_CONTEXT.search(text))
        for m in _LC_PROBLEM_NO.finditer(text):
            strength = STRONG if context else WEAK
            add(
                IdHit(
                    "leetcode_frontend_id",
                    ("leetcode", str(int(m.group(1)))),
                    *m.span(),
                    m.group(0),
                    strength,
                )
            )
    if slugs and ({"leetcode_slug", "leetcode_title"} & forms):
        hits += _find_titles(text, slugs, forms, min_title_words, taken)
        if "leetcode_frontend_id" in forms:  # "2777. Find the Distinct Difference Array"
            for m in _HEADING_ID.finditer(text):
                if _slug_words(m.group(2)) in slugs.slugs:
                    add(
                        IdHit(
                            "leetcode_frontend_id",
                            ("leetcode", str(int(m.group(1)))),
                            *m.span(1),
                            m.group(1),
                        )
                    )
    hits.sort(key=lambda h: (h.start, h.end, h.form))
    return hits


def _find_titles(
    text: str,
    slugs: TitleIndex,
    forms: set[str],
    min_words: int,
    taken: list[tuple[int, int]],
) -> list[IdHit]:
    """Known LeetCode slugs (``a-b-c``) and titles in Title Case (``A B C``) in ``text``."""
    words = [(m.group(0).lower(), m.start(), m.end()) for m in _WORD.finditer(text)]
    starts = slugs.starts(min_words)
    out: list[IdHit] = []
    i = 0
    while i < len(words):
        for n in starts.get(words[i][0], ()):
            if i + n > len(words):
                continue
            key = tuple(w for w, _, _ in words[i : i + n])
            if key not in slugs.slugs:
                continue
            s, e = words[i][1], words[i + n - 1][2]
            if any(a <= s and e <= b for a, b in taken):
                continue
            span = text[s:e]
            seps = [text[words[j][2] : words[j + 1][1]] for j in range(i, i + n - 1)]
            if all(sep == "-" for sep in seps) and span == span.lower():
                form = "leetcode_slug"
            elif all(sep.strip() == "" for sep in seps) and _title_case(text, words[i : i + n]):
                form = "leetcode_title"
            else:
                continue
            if form in forms:
                out.append(IdHit(form, ("slug", slugs.slugs[key]), s, e, span))
                i += n - 1
                break
        i += 1
    return out


class TitleIndex:
    """Known LeetCode slugs by their words, with a first-word index so that most words of a
    text are rejected by one dict lookup."""

    def __init__(self, slugs: Iterable[str] = ()) -> None:
        self.slugs: dict[tuple[str, ...], str] = {}
        for s in slugs:
            self.slugs[_slug_words(s)] = s
        self._starts: dict[int, dict[str, tuple[int, ...]]] = {}

    def __bool__(self) -> bool:
        return bool(self.slugs)

    def starts(self, min_words: int) -> dict[str, tuple[int, ...]]:
        if min_words not in self._starts:
            acc: dict[str, set[int]] = {}
            for k in self.slugs:
                if len(k) >= min_words:
                    acc.setdefault(k[0], set()).add(len(k))
            self._starts[min_words] = {w: tuple(sorted(n, reverse=True)) for w, n in acc.items()}
        return self._starts[min_words]


def _title_case(text: str, words: list[tuple[str, int, int]]) -> bool:
    """Every significant word starts with a capital (a heading-like title, not prose)."""
    significant = [text[s:e] for w, s, e in words if w not in _SMALL_WORDS]
    return bool(significant) and all(t[0].isupper() or t[0].isdigit() for t in significant)


# --------------------------------------------------------------------------------------------
# Index over the code benchmark items
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Item:
    benchmark: str
    version: str
    item_id: str
    variant: str
    platform: str
    contest_id: str | None
    date: str | None  # YYYY-MM-DD
    text_len: int


def _canonical(platform: str, item_id: str) -> tuple[str, str] | None:
    p = (platform or "").lower()
    if p == "atcoder":
        return ("atcoder", item_id.lower())
    if p == "codeforces":
        m = re.fullmatch(r"(\d+)[_-]?([A-Za-z]\d?)", item_id)
        return ("codeforces", f"{m.group(1)}_{m.group(2).upper()}") if m else None
    if p == "leetcode":
        return ("leetcode", str(int(item_id))) if item_id.isdigit() else None
    return None


def _contest_key(key: tuple[str, str]) -> tuple[str, str] | None:
    """("atcoder", "abc387_c") -> ("atcoder", "abc387"); ("codeforces", "1985_F") -> (.., "1985")."""
    if key[0] in ("atcoder", "codeforces"):
        return (key[0], key[1].split("_")[0])
    return None


class LcbIndex:
    """Canonical ids, slugs and dates of the code items in a :class:`BenchmarkSet`."""

    def __init__(self, benchmarks: BenchmarkSet) -> None:
        self.by_key: dict[tuple[str, str], list[_Item]] = {}
        self.slug_to_id: dict[str, str] = {}
        self.contest_dates: dict[tuple[str, str], str] = {}
        self.contest_items: dict[tuple[str, str], list[_Item]] = {}
        self.windows: dict[str, tuple[str, str]] = {}
        self.versions: dict[str, str] = {}
        lc_dates: dict[int, str] = {}
        series: dict[tuple[str, str], dict[int, str]] = {}
        cols = ["benchmark", "benchmark_version", "item_id", "variant", "platform", "contest_id",
                "contest_date", "title", "text"]  # fmt: skip
        items = benchmarks.items.select(cols).to_pylist()
        dates_by_bench: dict[str, list[str]] = {}
        for r in items:
            if r["variant"] != "primary" or not r["platform"]:
                continue
            key = _canonical(r["platform"], r["item_id"])
            if key is None:
                continue
            date = (r["contest_date"] or "")[:10] or None
            it = _Item(r["benchmark"], r["benchmark_version"], r["item_id"], r["variant"],
                       key[0], r["contest_id"], date, len(r["text"] or ""))  # fmt: skip
            self.by_key.setdefault(key, []).append(it)
            self.versions[r["benchmark"]] = r["benchmark_version"]
            if date:
                dates_by_bench.setdefault(r["benchmark"], []).append(date)
            if key[0] == "leetcode":
                if r["title"]:
                    slug = r["title"].strip().lower()
                    self.by_key.setdefault(("slug", slug), []).append(it)
                    self.slug_to_id[slug] = key[1]
                if date:
                    lc_dates[int(key[1])] = date
            ck = _contest_key(key)
            if ck:
                self.contest_items.setdefault(ck, []).append(it)
            if ck and date:
                self.contest_dates[ck] = min(date, self.contest_dates.get(ck, date))
                m = re.fullmatch(r"([a-z]*)(\d+)", ck[1])
                if m:
                    series.setdefault((ck[0], m.group(1)), {})[int(m.group(2))] = date
        for info in benchmarks.infos:
            if info.name in dates_by_bench:
                ds = dates_by_bench[info.name]
                end = (dt.date.fromisoformat(max(ds)) + dt.timedelta(days=1)).isoformat()
                self.windows[info.name] = tuple(info.window) if info.window else (min(ds), end)
        self.slugs = TitleIndex(self.slug_to_id)
        self._lc_ids = sorted(lc_dates)
        self._lc_dates = [lc_dates[i] for i in self._lc_ids]
        self._series = {k: (sorted(v), [v[n] for n in sorted(v)]) for k, v in series.items()}

    def lookup(self, key: tuple[str, str]) -> list[_Item]:
        return self.by_key.get(key, [])

    def estimate_date(self, key: tuple[str, str]) -> tuple[str, str, list[_Item]] | None:
        """(low, high, neighbour items) bounding the date of a LeetCode id or an AtCoder /
        Codeforces contest that is not itself among the items, from the nearest known ids below
        and above; None outside the range the items cover."""
        if key[0] == "leetcode":
            ids, dates = self._lc_ids, self._lc_dates
            n = int(key[1])

            def items_of(i: int) -> list[_Item]:
                return self.lookup(("leetcode", str(i)))

        else:
            ck = _contest_key(key) if "_" in key[1] else key
            m = re.fullmatch(r"([a-z]*)(\d+)", ck[1]) if ck else None
            if not ck or not m or (ck[0], m.group(1)) not in self._series:
                return None
            ids, dates = self._series[(ck[0], m.group(1))]
            n = int(m.group(2))

            def items_of(i: int, plat=ck[0], prefix=m.group(1)) -> list[_Item]:
                return self.contest_items.get((plat, f"{prefix}{i}"), [])

        pos = bisect.bisect_left(ids, n)
        if pos < len(ids) and ids[pos] == n:
            return dates[pos], dates[pos], items_of(n)
        if pos == 0 or pos == len(ids):
            return None
        lo, hi = dates[pos - 1], dates[pos]
        return min(lo, hi), max(lo, hi), items_of(ids[pos - 1]) + items_of(ids[pos])


# --------------------------------------------------------------------------------------------
# Metadata
# --------------------------------------------------------------------------------------------


def _parse_metadata(value: Any, row: int) -> dict[str, Any]:
    if value is None or value == "":
        return {}
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            out = json.loads(value)
        except json.JSONDecodeError:
            try:  # Python-repr dicts (LeetCodeDataset's `meta`)
                out = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                raise InputError(
                    "metadata is neither JSON nor a Python dict literal", row=row, field="metadata"
                ) from None
        if isinstance(out, dict):
            return out
    raise InputError(
        f"metadata must be a dict, got {type(value).__name__}", row=row, field="metadata"
    )


def metadata_rows(table: pa.Table) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(sample_uid, {field: value})`` for each row; nested ``metadata``/``meta`` dicts are
    merged under the top-level columns (top-level wins)."""
    uid_col = next((c for c in ("sample_uid", "uid") if c in table.column_names), None)
    if uid_col is None:
        raise InputError(
            "metadata table needs a sample_uid (or uid) column",
            field="sample_uid",
            hint=f"columns: {', '.join(table.column_names)}",
        )
    wanted = (*METADATA_FIELDS, "metadata", "meta", uid_col)
    cols = [c for c in table.column_names if c in wanted]
    for i, r in enumerate(table.select(cols).to_pylist()):
        r["sample_uid"] = r.pop(uid_col)
        merged: dict[str, Any] = {}
        for nested in ("metadata", "meta"):
            if nested in r:
                merged.update(_parse_metadata(r[nested], i))
        merged.update({k: v for k, v in r.items() if k in METADATA_FIELDS and v is not None})
        yield str(r["sample_uid"]), merged


def metadata_ids(meta: dict[str, Any]) -> list[tuple[str, tuple[str, str], str, float]]:
    """``(field, key, value_text, strength)`` for each id a metadata dict names."""
    platform = str(meta.get("platform") or "").lower()
    out: list[tuple[str, tuple[str, str], str, float]] = []
    for f in ("question_id", "task_id", "problem_id", "source_id"):
        v = meta.get(f)
        if v is None or v == "":
            continue
        s = str(v).strip()
        if re.fullmatch(r"\d+", s):
            if f == "source_id" or (f == "problem_id" and meta.get("contest_id")):
                continue  # a row number / an index inside a contest, not a LeetCode id
            if platform in ("leetcode", ""):
                strength = STRONG if platform == "leetcode" or f == "question_id" else WEAK
                out.append((f, ("leetcode", str(int(s))), s, strength))
            continue
        m = re.fullmatch(r"(abc|arc|agc)(\d{3})[_-]?([a-h])", s, re.I)
        if m:
            out.append(
                (
                    f,
                    ("atcoder", f"{m.group(1).lower()}{m.group(2)}_{m.group(3).lower()}"),
                    s,
                    STRONG,
                )
            )
            continue
        m = re.fullmatch(r"(\d{1,5})[_/-]?([A-Za-z]\d?)", s)
        if m and platform in ("codeforces", ""):
            out.append((f, ("codeforces", f"{m.group(1)}_{m.group(2).upper()}"), s, STRONG))
            continue
        if re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)+", s):
            out.append((f, ("slug", s), s, STRONG))
            continue
        m = re.fullmatch(r"([A-Za-z]\d?)", s)  # a problem index: combine with contest_id
        c = str(meta.get("contest_id") or "")
        if m and c:
            if re.fullmatch(r"\d+", c):
                out.append((f, ("codeforces", f"{c}_{m.group(1).upper()}"), f"{c}{s}", STRONG))
            elif re.fullmatch(r"(abc|arc|agc)\d{3}", c, re.I):
                out.append((f, ("atcoder", f"{c.lower()}_{s.lower()}"), f"{c} {s}", STRONG))
    return out


# --------------------------------------------------------------------------------------------
# Detectors
# --------------------------------------------------------------------------------------------


def _row(uid, fld, item: _Item, det, score, threshold, spans, overlap, details) -> dict:
    return {
        "sample_uid": uid,
        "field": fld,
        "benchmark": item.benchmark,
        "benchmark_version": item.version,
        "benchmark_item": item.item_id,
        "benchmark_variant": item.variant,
        "detector": det.name,
        "detector_version": det.version,
        "score": score,
        "threshold": threshold,
        "spans": spans,
        "overlap_text": overlap,
        "details": details,
    }


def _merge(rows: list[dict]) -> pa.Table:
    """One match per (sample, field, benchmark, item): the best score, all spans and forms."""
    best: dict[tuple, dict] = {}
    for r in rows:
        k = (r["sample_uid"], r["field"], r["benchmark"], r["benchmark_item"])
        cur = best.get(k)
        if cur is None:
            r["details"] = dict(r["details"], forms=[r["details"]["form"]])
            best[k] = r
            continue
        cur["spans"] = (cur["spans"] or []) + (r["spans"] or []) or None
        if r["details"]["form"] not in cur["details"]["forms"]:
            cur["details"]["forms"].append(r["details"]["form"])
        if r["score"] > cur["score"]:
            cur.update(score=r["score"], overlap_text=r["overlap_text"])
            cur["details"].update({k2: v for k2, v in r["details"].items() if k2 != "forms"})
    return matches_from_rows(list(best.values())) if best else empty_matches()


def _text_spans(start: int, end: int) -> list[dict]:
    """The spans of an id found in a text (the item's side has no place: ids are not in it)."""
    return [{"sample_start": start, "sample_end": end, "bench_start": None, "bench_end": None}]


class _LcbDetector(Detector):
    """What the problem-id and problem-date detectors share: a fit that indexes the
    LiveCodeBench items (plain data, so the fitted instance ships to scan workers)."""

    ships_fitted = True
    index: LcbIndex | None = None  # set by fit

    def fit(self, benchmarks: BenchmarkSet) -> None:
        self.index = LcbIndex(benchmarks)


class ProblemIdDetector(_LcbDetector):
    """Exact problem-id matches (text and metadata) against LiveCodeBench items."""

    name: ClassVar[str] = "problem_id"
    version: ClassVar[str] = "problem_id/1"
    config_cls: ClassVar[type[DetectorConfig]] = ProblemIdConfig
    config: ProblemIdConfig

    def _matches(
        self, uid: str, fld: str, hits: Iterable[IdHit], from_metadata: bool
    ) -> list[dict]:
        rows = []
        win = self.config.window
        for h in hits:
            for item in self.index.lookup(h.key):
                if win and not (item.date and win[0] <= item.date < win[1]):
                    continue
                if h.key[0] == "slug":
                    canonical = f"leetcode:{self.index.slug_to_id.get(h.key[1], '?')} ({h.key[1]})"
                else:
                    canonical = f"{h.key[0]}:{h.key[1]}"
                details = {"form": h.form, "id": canonical, "platform": item.platform}
                spans = None if from_metadata else _text_spans(h.start, h.end)
                rows.append(
                    _row(
                        uid,
                        fld,
                        item,
                        self,
                        h.strength,
                        self.config.threshold,
                        spans,
                        h.text,
                        details,
                    )
                )
        return rows

    def score(self, texts: pa.Table) -> pa.Table:
        rows: list[dict] = []
        cfg = self.config
        batch = self._text_batch(texts, fitted=self.index is not None)
        if batch is None:
            return empty_matches()
        for uid, fld, t in zip(*batch, strict=True):
            if not t:
                continue
            hits = find_ids(
                t, slugs=self.index.slugs, forms=cfg.forms, min_title_words=cfg.min_title_words
            )
            rows += self._matches(uid, fld, hits, False)
        return _merge(rows)

    def score_metadata(self, table: pa.Table) -> pa.Table:
        """Matches from a pool's metadata columns (``field`` is ``metadata.<column>``)."""
        rows: list[dict] = []
        for uid, meta in metadata_rows(table):
            for fld, key, value, strength in metadata_ids(meta):
                form = {"slug": "leetcode_slug", "leetcode": "leetcode_frontend_id"}.get(
                    key[0], f"{key[0]}_id"
                )
                hit = IdHit(form, key, 0, 0, value, strength)
                rows += self._matches(uid, f"metadata.{fld}", [hit], True)
        return _merge(rows)


class ProblemDateDetector(_LcbDetector):
    """Problems dated inside an evaluation window (exact contest dates or estimated from ids)."""

    name: ClassVar[str] = "problem_date"
    version: ClassVar[str] = "problem_date/1"
    config_cls: ClassVar[type[DetectorConfig]] = ProblemDateConfig
    config: ProblemDateConfig

    def _windows(self) -> dict[str, tuple[str, str]]:
        if self.config.window:
            return {b: self.config.window for b in self.index.windows}
        return self.index.windows

    def _date_for(self, key: tuple[str, str]) -> tuple[str, str, str, list[_Item]] | None:
        """(low, high, how, related items) for an id key; low == high for an exact date."""
        if key[0] == "slug":
            lid = self.index.slug_to_id.get(key[1])
            if lid is None:
                return None
            key = ("leetcode", lid)
        items = [i for i in self.index.lookup(key) if i.date]
        if items:
            return items[0].date, items[0].date, "item_date", items
        ck = _contest_key(key)
        if ck and ck in self.index.contest_dates:
            d = self.index.contest_dates[ck]
            return d, d, "contest_date", self.index.contest_items.get(ck, [])
        if key[0] == "leetcode" and not self.config.estimate_leetcode_dates:
            return None
        est = self.index.estimate_date(key)
        if est is None:
            return None
        lo, hi, near = est
        return lo, hi, "estimated", near

    def _flag(self, uid: str, fld: str, lo: str, hi: str, how: str, related: list[_Item],
              shown: str, span: tuple[int, int] | None) -> list[dict]:  # fmt: skip
        rows = []
        for bench, (ws, we) in self._windows().items():
            lo_in, hi_in = ws <= lo < we, ws <= hi < we
            if not (lo_in or hi_in):
                continue
            score = STRONG if (lo_in and hi_in) else WEAK
            item = next((i for i in related if i.benchmark == bench), None)
            if item is None:  # no related item in this benchmark: point at the window itself
                version = self.index.versions.get(bench, bench)
                item = _Item(bench, version, f"window:{ws}..{we}", "primary", "", None, None, 0)
            details = {
                "form": how,
                "date": lo if lo == hi else [lo, hi],
                "window": [ws, we],
                "via": sorted({i.item_id for i in related})[:4],
            }
            spans = None if span is None else _text_spans(*span)
            rows.append(
                _row(uid, fld, item, self, score, self.config.threshold, spans, shown, details)
            )
        return rows

    def score(self, texts: pa.Table) -> pa.Table:
        rows: list[dict] = []
        batch = self._text_batch(texts, fitted=self.index is not None)
        if batch is None:
            return empty_matches()
        for uid, fld, t in zip(*batch, strict=True):
            if not t:
                continue
            for h in find_ids(t, slugs=self.index.slugs):
                if h.strength < STRONG:
                    continue
                d = self._date_for(h.key)
                if d is not None:
                    rows += self._flag(uid, fld, *d, h.text, (h.start, h.end))
        return _merge(rows)

    def score_metadata(self, table: pa.Table) -> pa.Table:
        rows: list[dict] = []
        for uid, meta in metadata_rows(table):
            date = meta.get("contest_date")
            if date:
                try:
                    d = dt.date.fromisoformat(str(date)[:10]).isoformat()
                except ValueError:
                    raise InputError(
                        f"contest_date {date!r} is not a date", field="contest_date"
                    ) from None
                rows += self._flag(
                    uid, "metadata.contest_date", d, d, "metadata_date", [], str(date), None
                )
                continue
            for fld, key, value, strength in metadata_ids(meta):
                if strength < STRONG:
                    continue
                d2 = self._date_for(key)
                if d2 is not None:
                    rows += self._flag(uid, f"metadata.{fld}", *d2, value, None)
                    break
        return _merge(rows)
