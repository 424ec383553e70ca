"""Declarative field maps: how one pool's columns become Sluice records.

A field map is a TOML file (shipped ones live in ``curation/maps/``; any ``*.toml`` path works
too). ``[map]`` holds constants, ``[fields]`` maps each output column to a *field spec*,
``[metadata]`` picks source fields for the ``metadata`` JSON column. See docs/ingest.md for the
full format; in short a field spec is either a path string (``"question"``, ``"reward_model.
ground_truth"``, ``"prompt[0].content"``) or a table with these keys:

``path``          a path, or a list of paths (the first that is present and not null wins)
``const``         a constant value instead of a path
``parse``         ``"json"`` | ``"python"`` (``ast.literal_eval``) | ``"auto"`` (json, then python,
                  else keep the string) -- for stringified fields
``extract``       ``"gsm8k"`` (text after ``####``, commas removed) | ``"boxed"`` (last
                  ``\\boxed{...}``) | ``"tag:NAME"`` (text inside ``<NAME>...</NAME>``) |
                  ``"regex:PATTERN"`` (group 1, else the whole match)
``strip_prefix``  string or list of strings removed from the start when present
``strip_suffix``  string or list of strings removed from the end when present
``as_list``       wrap a scalar in a one-element list (``solutions``)
``optional``      the column may be absent from the source (no column check at start)

``[fields.tests]`` takes ``path`` (a list concatenates), ``parse``, ``format`` (``auto`` |
``stdin`` | ``functional``) and ``entry_point`` (a path). Test cases in any of the shapes found in
public pools become the ``tests`` list<struct> of :data:`curation.records.PROBLEM_SCHEMA`.

Mapping a row never raises on bad data: it raises :class:`FieldError` (field + reason), which the
ingest turns into a reject. A map that is wrong (unknown keys, unknown output columns, columns the
file does not have) raises :class:`ConfigError` naming the fix.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from curation.errors import ConfigError, NotFoundError, did_you_mean
from curation.normalize import normalize_text
from curation.records import DOMAINS, content_uid, dumps_metadata

FIELD_MAP_FORMAT = "fieldmap/1"
SCHEMAS = ("problem", "sft_sample")
# Output columns a map may fill, per target schema (uid and metadata are computed).
TARGETS: dict[str, tuple[str, ...]] = {
    "problem": (
        "source_id",
        "domain",
        "problem",
        "answer",
        "solutions",
        "tests",
        "starter_code",
        "platform",
        "contest_id",
        "problem_id",
        "contest_date",
    ),
    "sft_sample": (
        "source_id",
        "problem_uid",
        "prompt",
        "response",
        "reasoning",
        "final_answer",
        "generator_model",
        "sampling_params",
        "verification",
    ),
}
TEXT_FIELD = {"problem": "problem", "sft_sample": "prompt"}
_SPEC_KEYS = {
    "path",
    "const",
    "parse",
    "extract",
    "strip_prefix",
    "strip_suffix",
    "as_list",
    "optional",
}
_TESTS_KEYS = {"path", "parse", "format", "entry_point", "optional"}
_MAP_KEYS = {
    "name",
    "description",
    "schema",
    "domain",
    "source",
    "tested_on",
    "hub",
    "version",
    "required",
    "keep_rest",
}
_MISSING = object()
# Tuples, not PEP 604 unions: ``isinstance(v, a | b)`` builds a union object on every call, and
# these checks run several times per row.
_SEQ = (list, tuple)
_CONTAINERS = (list, dict)
_STR_LIST = (str, list)
_STR_CONTAINERS = (str, list, dict)
_TOKEN = re.compile(r"\[(-?\d+)\]|\.?([^.\[\]]+)")
_ENTRY_RE = re.compile(r"check\((?P<ep>[^()]*(?:\(\))?[^()]*)\)\s*$")


class FieldError(Exception):
    """One field of one row cannot be mapped (becomes a reject, never a traceback)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


# ----------------------------------------------------------------------------- paths and parsing
def parse_path(path: str) -> tuple[str | int, ...]:
    """``"prompt[0].content"`` -> ``("prompt", 0, "content")``."""
    toks: list[str | int] = []
    pos = 0
    for m in _TOKEN.finditer(path):
        if m.start() != pos:
            raise ConfigError(f"cannot parse field path {path!r}", hint="use a.b.c or a[0].b")
        toks.append(int(m.group(1)) if m.group(1) is not None else m.group(2))
        pos = m.end()
    if pos != len(path) or not toks or not isinstance(toks[0], str):
        raise ConfigError(f"cannot parse field path {path!r}", hint="use a.b.c or a[0].b")
    return tuple(toks)


def parse_value(value: Any, how: str, field_name: str) -> Any:
    """Parse a stringified value (``json`` | ``python`` | ``auto``); non-strings pass through.

    ``auto`` parses only text that looks like a container or a quoted literal (starts with
    ``[ { ( ' "``), so a bare ``"0.50"`` answer is never turned into the float ``0.5``.
    """
    if not isinstance(value, str):
        return value
    if how == "auto" and value.lstrip()[:1] not in ("[", "{", "(", "'", '"'):
        return value
    if how in ("json", "auto"):
        try:
            return json.loads(value)
        except ValueError as exc:
            if how == "json":
                raise FieldError(field_name, f"not valid JSON: {exc}") from None
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        if how == "python":
            raise FieldError(field_name, f"not a Python literal: {type(exc).__name__}") from None
    return value


def resolve(row: Any, path: tuple[str | int, ...]) -> Any:
    """Follow ``path`` into ``row``; stringified containers on the way are parsed (json/python)."""
    cur = row
    for i, tok in enumerate(path):
        if isinstance(cur, str) and cur[:1] in "[{":
            text, cur = cur, parse_value(cur, "auto", "")
            if isinstance(cur, str):  # looks like a container, parses as neither: a broken row
                where = "".join(f"[{t}]" if isinstance(t, int) else f".{t}" for t in path[:i])
                raise FieldError(
                    "",
                    f"{where.lstrip('.')} is a stringified container that does not parse as "
                    f"JSON or a Python literal ({len(text)} characters)",
                )
        if isinstance(tok, int):
            if not isinstance(cur, _SEQ) or not -len(cur) <= tok < len(cur):
                return _MISSING
            cur = cur[tok]
        else:
            if not isinstance(cur, dict) or tok not in cur:
                return _MISSING
            cur = cur[tok]
    return cur


def extract_boxed(text: str) -> str | None:
    r"""The content of the last ``\boxed{...}`` (balanced braces), or None.

    Written by hand: a regex cannot match nested braces, and this is ten lines.
    """
    start = text.rfind("\\boxed")
    while start != -1:
        i = text.find("{", start)
        if i != -1 and text[start + 6 : i].strip() == "":
            depth = 0
            for j in range(i, len(text)):
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                if depth == 0:
                    return text[i + 1 : j].strip()
        start = text.rfind("\\boxed", 0, start)
    return None


def _extract(value: Any, how: str, field_name: str) -> Any:
    if value is None:
        return None
    if not isinstance(value, str):
        raise FieldError(field_name, f"cannot extract from {type(value).__name__}, expected text")
    if how == "gsm8k":
        if "####" not in value:
            return None
        return value.rsplit("####", 1)[1].strip().replace(",", "") or None
    if how == "boxed":
        return extract_boxed(value)
    if how.startswith("tag:"):
        tag = how[4:]
        m = re.search(rf"<{re.escape(tag)}>(.*?)(?:</{re.escape(tag)}>|$)", value, re.S)
        return m.group(1).strip() if m else None
    if how.startswith("regex:"):
        m = re.search(how[6:], value, re.S)
        if not m:
            return None
        return (m.group(1) if m.groups() else m.group(0)).strip()
    raise FieldError(field_name, f"unknown extractor {how!r}")  # pragma: no cover - validated


# ----------------------------------------------------------------------------- specs
@dataclass(frozen=True)
class FieldSpec:
    """How one output column is read from a source row."""

    paths: tuple[tuple[str | int, ...], ...] = ()
    raw_paths: tuple[str, ...] = ()
    const: Any = None
    parse: str | None = None
    extract: str | None = None
    strip_prefix: tuple[str, ...] = ()
    strip_suffix: tuple[str, ...] = ()
    as_list: bool = False
    optional: bool = False

    def get(self, row: dict[str, Any], field_name: str) -> Any:
        value: Any = _MISSING
        if not self.paths:
            value = self.const
        broken: FieldError | None = None
        for p in self.paths:
            try:
                value = resolve(row, p)
            except FieldError as exc:  # a later path may still hold the value
                broken, value = broken or exc, _MISSING
                continue
            if (
                isinstance(value, float) and value != value
            ):  # NaN: how pandas writes a missing value
                value = None
            if value is not _MISSING and value is not None:
                break
        if value is _MISSING or value is None:
            if broken is not None:
                raise FieldError(field_name, broken.reason)
            value = None
        if self.parse and value is not None:
            value = parse_value(value, self.parse, field_name)
        if self.extract:
            value = _extract(value, self.extract, field_name)
        if isinstance(value, str):
            for pre in self.strip_prefix:
                if value.startswith(pre):
                    value = value[len(pre) :].lstrip()
                    break
            for suf in self.strip_suffix:
                if value.rstrip().endswith(suf):
                    value = value.rstrip()[: -len(suf)].rstrip()
                    break
        if self.as_list and value is not None and not isinstance(value, list):
            value = [value]
        return value


@dataclass(frozen=True)
class TestsSpec:
    """How test cases are read: one path, or several concatenated."""

    paths: tuple[tuple[str | int, ...], ...]
    raw_paths: tuple[str, ...]
    parse: str | None = "auto"
    format: str = "auto"
    entry_point: FieldSpec | None = None
    optional: bool = False


def _as_tuple(v: Any, where: str = "", key: str = "") -> tuple[str, ...]:
    if v is None:
        return ()
    out = (v,) if isinstance(v, str) else tuple(v) if isinstance(v, list) else None
    if out is None or not all(isinstance(x, str) for x in out):
        raise ConfigError(
            f"{where}: {key} must be a string or a list of strings, not {v!r}",
            hint=f'e.g. {key} = "answer" or {key} = ["answer", "solution"]',
        )
    return out


def _flag(raw: dict[str, Any], key: str, where: str) -> bool:
    """A true/false key of a map file (bool('false') is True: text is refused)."""
    v = raw.get(key, False)
    if not isinstance(v, bool):
        raise ConfigError(f"{where}: {key} must be true or false, not {v!r}")
    return v


def _table(doc: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    v = doc.get(key, {})
    if not isinstance(v, dict):
        raise ConfigError(f"{where}: [{key}] must be a table, not {v!r}", hint=f"write [{key}]")
    return v


def _check_known(where: str, raw: dict, allowed: set[str], table: str = "") -> None:
    """Name the keys of ``raw`` that are not ``allowed`` (``table``: which table, e.g. "[map] ")."""
    unknown = set(raw) - allowed
    if unknown:
        raise ConfigError(
            f"{where}: unknown {table}key(s) {sorted(unknown)}",
            hint=f"allowed: {', '.join(sorted(allowed))}",
        )


def _spec(where: str, raw: Any) -> FieldSpec:
    if isinstance(raw, str):
        return FieldSpec(paths=(parse_path(raw),), raw_paths=(raw,))
    if not isinstance(raw, dict):
        return FieldSpec(const=raw)  # a bare number/bool/list is a constant
    _check_known(where, raw, _SPEC_KEYS)
    if ("path" in raw) == ("const" in raw):
        raise ConfigError(f"{where}: give exactly one of 'path' or 'const'")
    parse = raw.get("parse")
    if parse not in (None, "json", "python", "auto"):
        raise ConfigError(f"{where}: parse must be json, python or auto, not {parse!r}")
    ext = raw.get("extract")
    if ext is not None and not (
        isinstance(ext, str)
        and (ext in ("gsm8k", "boxed") or ext.startswith("tag:") or ext.startswith("regex:"))
    ):
        raise ConfigError(
            f"{where}: unknown extractor {ext!r}",
            hint="use gsm8k, boxed, tag:NAME or regex:PATTERN",
        )
    if ext is not None and ext.startswith("regex:"):
        try:
            re.compile(ext[6:])
        except re.error as exc:
            raise ConfigError(
                f"{where}: extract {ext!r} is not a valid regular expression: {exc}",
                hint="Python `re` syntax; group 1, if any, is the value",
            ) from None
    raw_paths = _as_tuple(raw.get("path"), where, "path")
    if "path" in raw and not raw_paths:
        raise ConfigError(f"{where}: path names no column (every row would read null)")
    return FieldSpec(
        paths=tuple(parse_path(p) for p in raw_paths),
        raw_paths=raw_paths,
        const=raw.get("const"),
        parse=parse,
        extract=ext,
        strip_prefix=_as_tuple(raw.get("strip_prefix"), where, "strip_prefix"),
        strip_suffix=_as_tuple(raw.get("strip_suffix"), where, "strip_suffix"),
        as_list=_flag(raw, "as_list", where),
        optional=_flag(raw, "optional", where),
    )


def _tests_spec(where: str, raw: Any) -> TestsSpec:
    if isinstance(raw, str):
        raw = {"path": raw}
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{where}: tests must be a path or a table, not {raw!r}",
            hint='e.g. tests = "input_output" or tests = { path = "tests", format = "stdin" }',
        )
    _check_known(where, raw, _TESTS_KEYS)
    fmt = raw.get("format", "auto")
    if fmt not in ("auto", "stdin", "functional"):
        raise ConfigError(f"{where}: format must be auto, stdin or functional, not {fmt!r}")
    raw_paths = _as_tuple(raw.get("path"), where, "path")
    if not raw_paths:
        raise ConfigError(f"{where}: 'path' is required")
    parse = raw.get("parse", "auto")
    if parse not in (None, "json", "python", "auto"):
        raise ConfigError(f"{where}: parse must be json, python or auto, not {parse!r}")
    ep = raw.get("entry_point")
    return TestsSpec(
        paths=tuple(parse_path(p) for p in raw_paths),
        raw_paths=raw_paths,
        parse=parse,
        format=fmt,
        entry_point=_spec(f"{where}.entry_point", ep) if ep is not None else None,
        optional=_flag(raw, "optional", where),
    )


# ----------------------------------------------------------------------------- tests conversion
def _text(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    return json.dumps(v, ensure_ascii=False)


def _case(kind: str, inp: Any, out: Any, ep: str | None) -> dict[str, Any]:
    if kind == "stdin" and out is None:  # no program can pass it: a broken case, not a test
        raise FieldError("tests", "a stdin/stdout test case has no expected output (null)")
    return {"kind": kind, "input": _text(inp), "output": _text(out), "entry_point": ep}


def convert_tests(value: Any, fmt: str = "auto", entry_point: str | None = None) -> list[dict]:
    """Turn test cases in any shape found in public pools into TEST_TYPE dicts.

    Shapes: ``{'inputs': [...], 'outputs': [...] (, 'fn_name')}`` (APPS/TACO/DeepCoder),
    ``{'input': [...], 'output': [...]}`` (CodeContests), ``[{'input', 'output'(, 'testtype')}]``
    (Codeforces/LiveCodeBench), ``{'functional': 'def check(candidate): ...'}`` or a bare
    ``check(candidate)`` code string (LeetCode), and lists of any of these.
    """
    if value is None:
        return []
    if isinstance(value, str):
        looks_structured = value.lstrip()[:1] in ("[", "{")
        parsed = parse_value(value, "auto", "tests") if looks_structured else value
        if isinstance(parsed, str) and looks_structured:
            raise FieldError("tests", "stringified tests are neither JSON nor a Python literal")
        if isinstance(parsed, str):
            if fmt == "stdin":
                raise FieldError("tests", "expected stdin/stdout cases, got a code string")
            m = _ENTRY_RE.search(parsed.rstrip())
            ep = entry_point or (m.group("ep").strip() if m else None)
            return [_case("functional", parsed, None, ep)]
        value = parsed
    if isinstance(value, list):
        out: list[dict] = []
        for i, item in enumerate(value, start=1):
            if item is None:  # dropped, the row would be graded on fewer tests than it has
                raise FieldError("tests", f"test case {i} is null")
            if isinstance(item, dict) and "input" in item and not isinstance(item["input"], list):
                kind = item.get("testtype") or ("functional" if fmt == "functional" else "stdin")
                out.append(_case(kind, item["input"], item.get("output"), entry_point))
            else:
                out.extend(convert_tests(item, fmt, entry_point))
        return out
    if not isinstance(value, dict):
        raise FieldError("tests", f"unsupported test format: {type(value).__name__}")
    if "functional" in value:
        return convert_tests(value["functional"], "functional", entry_point)
    for ik, ok in (("inputs", "outputs"), ("input", "output")):
        if ik in value:
            ins, outs = value.get(ik), value.get(ok)
            if not isinstance(ins, list):
                return [_case("stdin", ins, outs, entry_point)]
            if not isinstance(outs, list) or len(ins) != len(outs):
                raise FieldError("tests", f"{ik!r} and {ok!r} differ in length or type")
            fn = value.get("fn_name") or entry_point
            kind = "functional" if value.get("fn_name") or fmt == "functional" else "stdin"
            return [
                _case(kind, i, o, fn if kind == "functional" else None)
                for i, o in zip(ins, outs, strict=True)
            ]
    raise FieldError("tests", f"unsupported test format: dict with keys {sorted(value)[:8]}")


# ----------------------------------------------------------------------------- the map
@dataclass(frozen=True)
class FieldMap:
    """A loaded field map. :meth:`apply` turns one source row into one record dict."""

    name: str
    description: str
    schema: str
    domain: str | None
    source: str
    fields: dict[str, FieldSpec]
    tests: TestsSpec | None = None
    metadata: dict[str, FieldSpec] = field(default_factory=dict)
    keep_rest: bool = False
    required: tuple[str, ...] = ()
    tested_on: tuple[str, ...] = ()
    hub: str = ""
    version: int = 1
    path: str = ""
    sha256: str = ""

    @property
    def text_field(self) -> str:
        return TEXT_FIELD[self.schema]

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "schema": self.schema,
            "sha256": self.sha256,
            "format": FIELD_MAP_FORMAT,
        }

    def _specs(self) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = list(self.fields.items()) + list(self.metadata.items())
        if self.tests:
            out.append(("tests", self.tests))
        return out

    @cached_property
    def _used(self) -> frozenset[str]:
        return frozenset(p[0] for _, s in self._specs() for p in s.paths if isinstance(p[0], str))

    def used_columns(self) -> set[str]:
        """Top-level source columns the map reads."""
        return set(self._used)

    def check_columns(self, available: set[str], file: str) -> None:
        """Raise one clear ConfigError when the map reads a column the source does not have."""
        for name, spec in self._specs():
            if spec.optional or not spec.paths:
                continue
            if not any(p[0] in available for p in spec.paths):
                raise ConfigError(
                    f"field map {self.name!r} reads {name} from column "
                    f"{' or '.join(repr(p) for p in spec.raw_paths)}, which {file} does not have",
                    hint=f"columns in the file: {', '.join(sorted(available))}; pick another map "
                    f"(sluice ingest --list-maps) or fix {self.path}",
                )

    def nested_specs(self) -> dict[str, Any]:
        """Non-optional specs that read a path below a column ({label: spec}); check_columns
        sees only the column, so ingest checks that some row holds such a path."""
        labelled = [*self.fields.items(), *((f"metadata.{k}", s) for k, s in self.metadata.items())]
        if self.tests:
            labelled.append(("tests", self.tests))
        return {
            label: s for label, s in labelled if not s.optional and any(len(p) > 1 for p in s.paths)
        }

    @staticmethod
    def holds_path(row: dict[str, Any], spec: Any) -> bool:
        """Whether ``row`` holds any of ``spec``'s paths (a null value counts as held)."""
        try:
            return any(resolve(row, p) is not _MISSING for p in spec.paths)
        except FieldError:  # a stringified container on the way that does not parse
            return False

    def missing_path_error(self, label: str, spec: Any, sample: dict, where: str) -> ConfigError:
        """The error for a non-optional nested path that no row read holds."""
        held = ""
        for p in spec.paths:
            for i in range(len(p) - 1, 0, -1):
                try:
                    cur = resolve(sample, p[:i])
                except FieldError:
                    cur = _MISSING
                if isinstance(cur, dict):
                    inside = "".join(f"[{t}]" if isinstance(t, int) else f".{t}" for t in p[:i])
                    held = (
                        f"the first row's {inside.lstrip('.')} holds {', '.join(map(str, cur))}; "
                    )
                    break
            if held:
                break
        return ConfigError(
            f"field map {self.name!r} reads {label} from "
            f"{' or '.join(repr(r) for r in spec.raw_paths)}, which no row of {where} has",
            hint=f"{held}fix the path in {self.path}, or mark it optional = true",
        )

    def apply(self, row: dict[str, Any]) -> dict[str, Any]:
        """Map one source row onto the target schema (without uid). Raises FieldError."""
        rec: dict[str, Any] = {}
        for name, spec in self.fields.items():
            rec[name] = spec.get(row, name)
        if self.tests is not None:
            rec["tests"] = self._tests(row)
        rec.setdefault("domain", self.domain)
        if self.schema == "problem":
            self._check_problem(rec)
        else:
            self._check_sft(rec)
        for name in self.required:
            v = rec.get(name)
            if v is None or (
                isinstance(v, _STR_LIST) and not (v.strip() if isinstance(v, str) else v)
            ):
                spec = self.fields.get(name)
                if v is None and spec is not None and spec.extract:
                    raw = replace(spec, extract=None, as_list=False).get(row, name)
                    if isinstance(raw, str) and raw.strip():  # the text is there, no match in it
                        raise FieldError(
                            name,
                            f"extract = {spec.extract!r} found nothing in "
                            f"{' or '.join(spec.raw_paths)} (required by the field map)",
                        )
                raise FieldError(name, "missing or empty (required by the field map)")
        meta: dict[str, Any] = {}
        for key, spec in self.metadata.items():
            v = spec.get(row, f"metadata.{key}")
            if v is not None:
                meta[key] = v
        if self.keep_rest:
            used = self._used
            for k, v in row.items():
                if k not in used and k not in meta:
                    meta[k] = v
        rec["metadata"] = meta
        return rec

    def _tests(self, row: dict[str, Any]) -> list[dict] | None:
        spec = self.tests
        assert spec is not None
        ep = spec.entry_point.get(row, "tests.entry_point") if spec.entry_point else None
        if ep is not None and not isinstance(ep, str):
            raise FieldError("tests.entry_point", f"expected text, got {type(ep).__name__}")
        found, broken = [], None
        for p in spec.paths:
            try:
                found.append(resolve(row, p))
            except FieldError as exc:
                broken = broken or exc
        values = [v for v in found if v is not _MISSING and v is not None]
        if not values:
            if broken is not None:
                raise FieldError("tests", broken.reason)
            return None
        cases: list[dict] = []
        for v in values:
            if spec.parse in ("json", "python") and isinstance(v, str):
                v = parse_value(v, spec.parse, "tests")  # strict: a bad string is a reject
            cases.extend(convert_tests(v, spec.format, ep))
        return cases

    def _check_problem(self, rec: dict[str, Any]) -> None:
        prob = rec.get("problem")
        if prob is None:
            raise FieldError("problem", "missing")
        if not isinstance(prob, str):
            raise FieldError("problem", f"wrong type: expected text, got {type(prob).__name__}")
        if not normalize_text(prob):  # blank, or only zero-width characters (the uid's view)
            raise FieldError("problem", "empty text")
        if rec.get("domain") not in DOMAINS:
            raise FieldError("domain", f"must be one of {DOMAINS}, got {rec.get('domain')!r}")
        for name in ("answer", "source_id", "problem_id", "contest_id"):
            v = rec.get(name)
            if isinstance(v, list) and len(v) == 1 and not isinstance(v[0], _CONTAINERS):
                v = v[0]  # e.g. ground_truth stored as a one-element list
            if isinstance(v, _CONTAINERS):
                raise FieldError(name, f"wrong type: expected a scalar, got {type(v).__name__}")
            rec[name] = _scalar_text(v)
        for name in ("starter_code", "platform", "contest_date"):
            rec[name] = _text(_scalar_text(rec.get(name)))
        sols = rec.get("solutions")
        if sols is not None:
            if isinstance(sols, str):
                sols = [sols]
            if not isinstance(sols, list):
                raise FieldError(
                    "solutions", f"wrong type: expected a list of text, got {type(sols).__name__}"
                )
            rec["solutions"] = [
                s if isinstance(s, str) else _text(s) for s in sols if s is not None
            ]

    def _check_sft(self, rec: dict[str, Any]) -> None:
        for name in ("prompt", "response"):
            v = rec.get(name)
            if v is None:
                raise FieldError(name, "missing")
            if not isinstance(v, str):
                raise FieldError(name, f"wrong type: expected text, got {type(v).__name__}")
            if not normalize_text(v):
                raise FieldError(name, "empty text")
        for name in (
            "source_id",
            "problem_uid",
            "reasoning",
            "final_answer",
            "generator_model",
            "verification",
        ):
            rec[name] = _scalar_text(rec.get(name))
        sp = rec.get("sampling_params")
        rec["sampling_params"] = (
            None if sp is None else dumps_metadata(sp) if isinstance(sp, dict) else _text(sp)
        )
        rec["messages"] = [
            {"role": "user", "content": rec["prompt"]},
            {"role": "assistant", "content": rec["response"]},
        ]

    def uid(self, rec: dict[str, Any]) -> str:
        """The content uid of a mapped record."""
        if self.schema == "problem":
            return content_uid(rec["domain"], normalize_text(rec["problem"]))
        key = normalize_text(rec["prompt"]) + "\x1e" + normalize_text(rec["response"])
        return content_uid("sft", key, prefix="s")


def _scalar_text(v: Any) -> Any:
    if v is None or isinstance(v, _STR_CONTAINERS):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)  # ints and floats as Python writes them: 4.0 stays "4.0", never re-formatted


# ----------------------------------------------------------------------------- loading
def maps_dir() -> Path:
    """The folder with the shipped field maps (package data)."""
    # Relative to this file, not importlib.resources: under pytest's rootdir sys.path insertion
    # ``curation`` can resolve as a namespace package that also spans tests/curation.
    return Path(__file__).resolve().parent / "maps"


def available_maps() -> list[str]:
    """Names of the shipped field maps."""
    return sorted(p.stem for p in maps_dir().glob("*.toml"))


def load_map(name_or_path: str) -> FieldMap:
    """Load a shipped map by name, or any map from a ``.toml`` path."""
    p = Path(name_or_path)
    if name_or_path.endswith(".toml"):
        if not p.is_file():
            raise NotFoundError(f"field map file not found: {name_or_path}")
    else:
        p = maps_dir() / f"{name_or_path}.toml"
        if not p.is_file():
            raise NotFoundError(
                f"unknown field map {name_or_path!r}",
                hint=did_you_mean(name_or_path, available_maps())
                + "; or pass a path to a .toml map",
            )
    data = p.read_bytes()
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"field map {p} is not valid TOML: {exc}") from None
    return _build(doc, p, hashlib.sha256(data).hexdigest())


def _build(doc: dict[str, Any], p: Path, sha: str) -> FieldMap:
    where = str(p)
    unknown_sections = set(doc) - {"map", "fields", "metadata"}
    if unknown_sections:
        raise ConfigError(
            f"{where}: unknown section(s) {sorted(unknown_sections)}",
            hint="use [map], [fields], [metadata]",
        )
    m = _table(doc, "map", where)
    _check_known(where, m, _MAP_KEYS, "[map] ")
    schema = m.get("schema", "problem")
    if schema not in SCHEMAS:
        raise ConfigError(f"{where}: schema must be one of {SCHEMAS}, not {schema!r}")
    targets = TARGETS[schema]
    fields_raw = dict(_table(doc, "fields", where))
    tests_raw = fields_raw.pop("tests", None)
    if tests_raw is not None and schema != "problem":
        raise ConfigError(f"{where}: tests are only mapped for the problem schema")
    fields: dict[str, FieldSpec] = {}
    for name, raw in fields_raw.items():
        if name not in targets:
            raise ConfigError(
                f"{where}: unknown output field {name!r}",
                hint=did_you_mean(name, list(targets) + ["tests"]),
            )
        fields[name] = _spec(f"{where} [fields] {name}", raw)
    text = TEXT_FIELD[schema]
    if text not in fields:
        raise ConfigError(f"{where}: [fields] must map {text!r}")
    domain = m.get("domain")
    if schema == "problem" and "domain" not in fields and domain not in DOMAINS:
        raise ConfigError(f"{where}: [map] domain must be one of {DOMAINS}, got {domain!r}")
    if not m.get("source"):
        raise ConfigError(f"{where}: [map] source is required (the pool label stored in every row)")
    for key in ("source", "name", "description", "hub"):
        if key in m and not isinstance(m[key], str):
            raise ConfigError(f"{where}: [map] {key} must be text, not {m[key]!r}")
    version = m.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise ConfigError(f"{where}: [map] version must be a whole number, not {version!r}")
    metadata = {
        k: _spec(f"{where} [metadata] {k}", v) for k, v in _table(doc, "metadata", where).items()
    }
    required = _as_tuple(m.get("required"), where, "[map] required")
    for r in required:
        if r not in targets:
            raise ConfigError(
                f"{where}: required field {r!r} is not an output field",
                hint=did_you_mean(r, list(targets)),
            )
    return FieldMap(
        name=m.get("name", p.stem),
        description=m.get("description", ""),
        schema=schema,
        domain=domain,
        source=m["source"],
        fields=fields,
        tests=_tests_spec(f"{where} [fields.tests]", tests_raw) if tests_raw is not None else None,
        metadata=metadata,
        keep_rest=_flag(m, "keep_rest", f"{where} [map]"),
        required=required,
        tested_on=_as_tuple(m.get("tested_on")),
        hub=m.get("hub", ""),
        version=version,
        path=str(p),
        sha256=sha,
    )


def list_maps() -> list[FieldMap]:
    """Every shipped map, loaded (so a broken shipped map fails loudly)."""
    return [load_map(n) for n in available_maps()]
