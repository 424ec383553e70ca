"""Pass counts: how often a model solves each prompt, as their own versioned catalog dataset.

One row per ``(uid, model, params_hash, verifier_version)``, so the difficulties measured by
several models (or sampling settings, or verifier versions) live side by side in one dataset,
and a training pool records exactly which row set it was cut from. Publishing new counts merges
them into the latest version (same key: the new row wins) and publishes the result as a new
version whose parents are the previous counts and the rollouts they came from.

Imports: Skywork-OR1's ``model_difficulty`` (kept in a pool's metadata by the Skywork field
maps) and a plain table of ``(uid | problem, model, k, passed)`` or ``pass_rate``/``accuracy``.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from curation.errors import ConfigError, DatasetRef, InputError, NotFoundError, did_you_mean

PASSCOUNT_SCHEMA = pa.schema(
    [
        pa.field("uid", pa.string(), nullable=False),
        pa.field("model", pa.string(), nullable=False),
        pa.field("params_hash", pa.string(), nullable=False),  # "" when unknown (imports)
        pa.field("verifier_version", pa.string(), nullable=False),
        pa.field("sampling_params", pa.string()),  # JSON, or null when unknown
        pa.field("k", pa.int32()),  # samples graded; null when only a rate is known
        pa.field("passed", pa.int32()),
        pa.field("n_invalid", pa.int32()),  # verifier timeout/error: neither pass nor fail
        pa.field("pass_rate", pa.float64()),  # passed / (k - n_invalid); null if none gradable
        pa.field("origin", pa.string()),  # rollouts | skywork_model_difficulty | table:<file>
    ],
    metadata={b"sluice.schema": b"passcounts/1"},
)
KEY = ("uid", "model", "params_hash", "verifier_version")


def _rate(k: int | None, passed: int | None, invalid: int = 0) -> float | None:
    if k is None or passed is None:
        return None
    n = k - invalid
    return passed / n if n > 0 else None


def counts_table(rows: Iterable[dict[str, Any]]) -> pa.Table:
    out = []
    for r in rows:
        r = {f.name: r.get(f.name) for f in PASSCOUNT_SCHEMA}
        r["n_invalid"] = r["n_invalid"] or 0
        if r["pass_rate"] is None:
            r["pass_rate"] = _rate(r["k"], r["passed"], r["n_invalid"])
        r["params_hash"] = r["params_hash"] or ""
        out.append(r)
    out.sort(key=lambda r: tuple(r[c] for c in KEY))
    return pa.Table.from_pylist(out, schema=PASSCOUNT_SCHEMA)


def merge(old: pa.Table | None, new: pa.Table) -> pa.Table:
    """``old`` with every row of ``new`` added; a row with the same key is replaced."""
    if old is None or old.num_rows == 0:
        return counts_table(new.to_pylist())
    fresh = {tuple(r[c] for c in KEY) for r in new.to_pylist()}
    rows = [r for r in old.to_pylist() if tuple(r[c] for c in KEY) not in fresh]
    return counts_table(rows + new.to_pylist())


def publish_counts(
    catalog: Any,
    name: str,
    new: pa.Table,
    *,
    parents: Iterable[str] = (),
    config: dict | None = None,
) -> Any:
    """Merge ``new`` into the latest version of ``name`` and publish the result."""
    return catalog.commit([stage_counts(catalog, name, new, parents=parents, config=config)])[0]


def stage_counts(
    catalog: Any,
    name: str,
    new: pa.Table,
    *,
    parents: Iterable[str] = (),
    config: dict | None = None,
) -> Any:
    """:func:`publish_counts` up to the commit: the staged merged version (committed by the
    caller, with the versions it must be published together with)."""
    try:
        prev_v = catalog.resolve(f"{name}@latest")
        prev = catalog.load(prev_v.ref)
        parents = [prev_v.ref, *parents]
    except NotFoundError:
        prev = None
    merged = merge(prev, new)
    models = sorted(set(merged.column("model").to_pylist()))
    return catalog.stage(
        name,
        merged,
        parents=list(parents),
        step="rl.passcounts",
        config=config or {},
        metadata={"rows": merged.num_rows, "models": models},
    )


def select(counts: pa.Table, model: str, params_hash: str | None = None,
           verifier_version: str | Sequence[str] | None = None, *,
           ref: str | None = None) -> pa.Table:  # fmt: skip
    """The rows of one model (and sampling params / verifier version when given); an unknown
    model names the ones available. Two settings for one model without a choice is an error.
    ``verifier_version``: one version, or several (a list or comma-separated): a mixed math +
    code pool is graded by one verifier per domain, so its counts hold two versions that are one
    setting; then a prompt counted under two of them (or two sampling settings) is the error.
    ``ref``: the counts' dataset version, named when the table is not a pass-counts table."""
    missing = [f.name for f in PASSCOUNT_SCHEMA if f.name not in counts.column_names
               and f.name not in ("sampling_params", "n_invalid", "origin")]  # fmt: skip
    if missing:
        raise InputError(
            f"{ref or 'the counts table'} is not a pass-counts table (no column(s) "
            f"{', '.join(repr(m) for m in missing)})",
            hint="give --counts a BASE.passcounts version (made by `sluice rl rollouts` or "
            "`sluice rl import-counts`)",
        )
    rows = [r for r in counts.to_pylist() if r["model"] == model]
    if not rows:
        have = sorted(set(counts.column("model").to_pylist()))
        raise NotFoundError(f"no pass counts for model {model!r}", hint=did_you_mean(model, have))
    if params_hash is not None:
        have = sorted({r["params_hash"] for r in rows})
        rows = [r for r in rows if r["params_hash"] == params_hash]
        if not rows:
            raise NotFoundError(
                f"model {model!r} has no pass counts with params hash {params_hash!r} in "
                f"{ref or 'the counts'}",
                hint=(did_you_mean(params_hash, [h for h in have if h]) if any(have) else
                      "available: none; imported counts have no params hash: leave "
                      "--params-hash out"),
            )  # fmt: skip
    several = False
    if verifier_version is not None:
        allowed = (
            {v.strip() for v in verifier_version.split(",") if v.strip()}
            if isinstance(verifier_version, str)
            else set(verifier_version)
        )
        several = len(allowed) > 1
        have = sorted({r["verifier_version"] for r in rows})
        rows = [r for r in rows if r["verifier_version"] in allowed]
        if not rows:
            raise NotFoundError(
                f"model {model!r} has no pass counts with verifier version "
                f"{', '.join(sorted(allowed))} in {ref or 'the counts'}",
                hint=did_you_mean(sorted(allowed)[0] if allowed else "", have),
            )
    settings = sorted({(r["params_hash"], r["verifier_version"]) for r in rows})
    if several:  # one setting per domain: a prompt may have one row, the sampling one hash
        seen: dict[str, str] = {}
        twice = sorted(
            {(r["uid"], seen[r["uid"]], r["verifier_version"]) for r in rows
             if seen.setdefault(r["uid"], r["verifier_version"]) != r["verifier_version"]}
        )  # fmt: skip
        hashes = sorted({r["params_hash"] for r in rows})
        if twice:
            uid, a, b = twice[0]
            raise InputError(
                f"model {model!r}: {len(twice)} prompt(s) have pass counts under two of the "
                f"verifier versions given (e.g. {uid}: {a} and {b})",
                hint="pass the one version each prompt was graded with",
            )
        if len(hashes) > 1:
            raise InputError(
                f"model {model!r} has pass counts for {len(hashes)} sampling settings {hashes}",
                hint="pass --params-hash to choose one",
            )
        settings = []
    if len(settings) > 1:
        raise InputError(
            f"model {model!r} has pass counts for {len(settings)} sampling/verifier settings "
            f"{settings}",
            hint="pass --params-hash and/or --verifier-version to choose one (a mixed math + "
            "code pool: its two versions, comma-separated)",
        )
    return counts_table(rows)


# ------------------------------------------------------------------------------------------
# Imports
# ------------------------------------------------------------------------------------------


def _pool_row_error(
    where: str | None,
    row: int,
    uid: str,
    msg: str,
    field: str = "model_difficulty",
    hint: str | None = None,
) -> InputError:
    """An error about one row of a pool: its dataset, 1-based row and uid, and the field."""
    return InputError(f"uid {uid}: {msg}", file=where, row=row, field=field, hint=hint)


def import_skywork(
    pool: pa.Table,
    *,
    k: int = 16,
    origin: str = "skywork_model_difficulty",
    source: str | None = None,
):
    """Pass counts from Skywork-OR1's ``model_difficulty`` ({model: n correct of 16}) found in
    the pool's ``metadata`` JSON (the ``hub_skywork_or1_*`` field maps keep it there), or in a
    ``model_difficulty`` column. Rows without it are skipped and counted (returned second).
    A bad value is an error naming ``source`` (the pool's ``name@version``), the row (1-based)
    and its uid; nothing is imported."""
    where = DatasetRef(source) if source else None
    cols = pool.column_names
    if "uid" not in cols:
        raise InputError("the pool has no 'uid' column", file=where, field="uid",
                         hint="ingest it first")  # fmt: skip
    md_col = pool.column("model_difficulty").to_pylist() if "model_difficulty" in cols else None
    meta_col = pool.column("metadata").to_pylist() if "metadata" in cols else None
    if md_col is None and meta_col is None:
        raise InputError(
            "the pool has neither a 'model_difficulty' column nor 'metadata'",
            file=where, field="model_difficulty",
            hint="ingest Skywork-OR1-RL-Data with the hub_skywork_or1_math / _code map",
        )  # fmt: skip
    rows, missing = [], 0
    for i, uid in enumerate(pool.column("uid").to_pylist()):
        bad = functools.partial(_pool_row_error, where, i + 1, uid)  # 1-based, as users count
        md = md_col[i] if md_col is not None else None
        if md is None and meta_col is not None and meta_col[i]:
            try:
                md = json.loads(meta_col[i]).get("model_difficulty")
            except (json.JSONDecodeError, AttributeError) as exc:
                raise bad(f"metadata is not a JSON object: {exc}", "metadata") from exc
        if isinstance(md, str):
            try:
                md = json.loads(md)
            except json.JSONDecodeError as exc:
                raise bad(f"model_difficulty is not JSON: {exc}") from exc
        if not md:
            missing += 1
            continue
        if not isinstance(md, dict):
            raise bad(f"model_difficulty must be an object of model: count, got {md!r}",
                      hint='e.g. {"DeepSeek-R1-Distill-Qwen-7B": 9}')  # fmt: skip
        for model, n in md.items():
            if n is None:
                continue
            if (isinstance(n, bool) or not isinstance(n, int | float) or not math.isfinite(n)
                    or n != int(n)):  # fmt: skip
                raise bad(f"model_difficulty {model}={n!r} is not a whole number of correct "
                          f"samples out of {k}", hint="fix the pool's counts; nothing was imported")  # fmt: skip
            if not 0 <= int(n) <= k:
                raise bad(f"model_difficulty {model}={n} is outside 0..{k}",
                          hint=f"pass the right k (got {k}); nothing was imported")  # fmt: skip
            rows.append({"uid": uid, "model": model, "params_hash": "", "k": k,
                         "verifier_version": "skywork-or1", "passed": int(n), "origin": origin})  # fmt: skip
    if not rows:
        raise InputError(
            "no row of the pool carries model_difficulty",
            file=where, field="model_difficulty",
            hint="is this the Skywork-OR1-RL-Data pool? ingest it with a hub_skywork_or1_* map",
        )  # fmt: skip
    return counts_table(rows), missing


def _read_rows(path: Path) -> tuple[list[str], list[tuple[int, dict[str, Any]]]]:
    """(columns, [(row, record)]) of a counts table. Rows are numbered as a user finds them: the
    line of a .jsonl / .csv file (a CSV header is line 1; a record whose quoted text spans lines
    is named by its first line), the 1-based row of a Parquet file. Values stay as the file
    wrote them (CSV: text), so each is checked on its own row."""
    from curation.readers import check_regular, iter_records, read_table

    if path.is_dir():
        raise InputError(f"--file {path} is a folder; a counts table file is expected",
                         hint="give one .jsonl, .csv or .parquet file")  # fmt: skip
    check_regular(path)  # a FIFO or a device: said as such (it was "does not exist")
    if not path.is_file():
        raise NotFoundError(f"file {path} does not exist")
    suf = path.suffix.lower()
    rows: list[tuple[int, dict[str, Any]]] = []
    if suf == ".parquet":
        t = read_table(path)  # a damaged file, a column name twice: one error naming the file
        cols = t.column_names
        rows = list(enumerate(t.to_pylist(), 1))
    elif suf == ".csv":
        data = path.read_bytes()
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:  # named like the JSON reader: line, byte in it
            line_start = data.rfind(b"\n", 0, exc.start) + 1
            line = data[: exc.start].count(b"\n") + 1
            # the row is the line its record starts on (a quoted text may span lines)
            records = _csv_records(data.decode("utf-8-sig", errors="replace"), path)
            row = next((first for first, last, _ in records if first <= line <= last), line)
            raise InputError(f"invalid UTF-8 at byte {exc.start - line_start} of line {line}",
                             file=str(path), row=row,
                             hint="save the table as UTF-8") from None  # fmt: skip
        records = _csv_records(text, path)
        cols = records[0][2] if records else []
        twice = sorted({c for c in cols if cols.count(c) > 1})
        if twice:  # a dict of the cells kept the last one: the other column was dropped unread
            raise InputError(
                f"the header names column {twice[0]!r} {cols.count(twice[0])} times",
                file=str(path), row=records[0][0], field=twice[0],
                hint="give each column one name in the header; nothing was imported",
            )  # fmt: skip
        for first, _, values in records[1:]:
            # as csv.DictReader read them: a short row's missing cells are empty (the checks
            # name a missing count); extra ones were dropped without a word, a count with them
            if len(values) > len(cols):
                raise InputError(
                    f"{len(values)} cells, but the header names {len(cols)} "
                    f"({', '.join(cols)})", file=str(path), row=first,
                    hint='quote a value that holds a comma ("a, b"), or name the extra '
                    "column(s) in the header (line 1)",
                )  # fmt: skip
            cells = dict(zip(cols, values + [""] * (len(cols) - len(values)), strict=False))
            rows.append((first, {k: (v if v != "" else None) for k, v in cells.items()}))
    elif suf in (".jsonl", ".json"):
        # the one reader: a bad line (malformed, not an object, not UTF-8) names its line
        rows = list(iter_records(path))
        cols = sorted({k for _, r in rows for k in r})
    else:
        raise InputError(f"unsupported file type {suf!r}", file=str(path),
                         hint="use .parquet, .csv or .jsonl")  # fmt: skip
    if not rows:
        raise InputError("the file has no rows", file=str(path),
                         hint="one row per (uid | problem, model) with k + passed or pass_rate")  # fmt: skip
    return cols, rows


def _csv_records(text: str, path: Path) -> list[tuple[int, int, list[str]]]:
    """(first line, last line, values) of each record of a CSV text, the header first; blank
    lines skipped. A quoted value may span lines: the record is named by its first line (csv's
    ``line_num`` is the last one read). A value of any length is read (csv's own limit, 128 KiB,
    was a traceback for a long problem text); a quote never closed, or text after a closing
    quote, is an error naming the record (it was read as one value running to the end of the
    file, or as the two parts glued together)."""
    import csv
    import io
    import sys

    out = []
    limit = csv.field_size_limit(sys.maxsize)
    try:
        with io.StringIO(text, newline="") as f:
            reader = csv.reader(f, strict=True)
            last = 0
            while True:
                try:
                    values = next(reader)
                except StopIteration:
                    break
                except csv.Error as exc:
                    what = {"unexpected end of data": "a quoted value is never closed"}.get(
                        str(exc), f"not a well-formed CSV record: {exc}"
                    )
                    raise InputError(what, file=str(path), row=last + 1,
                                     hint='quote a whole value ("a, b"), and double a quote '
                                     'inside one ("say ""hi""")') from None  # fmt: skip
                first, last = last + 1, reader.line_num
                if values:
                    out.append((first, last, values))
    finally:
        csv.field_size_limit(limit)
    return out


def _number(v: Any) -> Any:
    """CSV text as a number; other values as they are (a bad one is left for the caller)."""
    if isinstance(v, str):
        if not v.strip():
            return None
        try:
            return float(v.strip())
        except ValueError:
            return v
    return v


_INT32_MAX = 2**31 - 1  # k, passed and n_invalid are int32 columns of PASSCOUNT_SCHEMA


def _count(v: Any, path: Path, row: int, name: str) -> int | None:
    """A whole number from a JSON/Parquet number or CSV text; None when missing."""
    n = _number(v)
    if n is None:
        return None
    if (isinstance(n, bool) or not isinstance(n, (int, float)) or not math.isfinite(n)
            or n != int(n)):  # fmt: skip
        raise InputError(f"{name} must be a whole number, got {v!r}", file=str(path), row=row,
                         field=name)  # fmt: skip
    if abs(n) > _INT32_MAX:  # the counts table's int32 column cannot hold it
        raise InputError(f"{name} must be at most 2**31 - 1, got {v!r}", file=str(path),
                         row=row, field=name)  # fmt: skip
    return int(n)


def _fraction(v: Any, path: Path, row: int, name: str) -> float | None:
    n = _number(v)
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, (int, float)) or not 0 <= n <= 1:
        raise InputError(f"{name} must be a number in [0, 1], got {v!r}", file=str(path),
                         row=row, field=name)  # fmt: skip
    return float(n)


def _text(v: Any, path: Path, row: int, name: str, hint: str) -> str:
    if not isinstance(v, str) or not v.strip():
        what = "missing" if v is None else "empty" if isinstance(v, str) else f"not text: {v!r}"
        raise InputError(f"{name} is {what}", file=str(path), row=row, field=name, hint=hint)
    return v


def read_table_rows(
    path: str | Path,
    *,
    model: str | None = None,
    k: int | None = None,
    domain: str | None = "math",
    verifier_version: str = "external",
    problem_field: str = "problem",
    repeats: list[tuple[int, int]] | None = None,
) -> list[tuple[int, dict[str, Any]]]:
    """The checked count rows of a plain table with their row numbers (see :func:`import_table`).

    Every value is checked where it is read: a bad one is an error naming the file, the row and
    the field, never a row imported as ungraded. The same (uid, model) twice with different
    counts is an error naming both rows; an exact repeat is kept once, and ``(its row, the row
    it repeats)`` is appended to ``repeats`` when given, so the caller can say it was skipped."""
    from curation.normalize import problem_uid

    path = Path(path)
    cols, raw = _read_rows(path)
    if "uid" not in cols and problem_field not in cols:
        raise InputError(
            f"the table has neither 'uid' nor {problem_field!r}", file=str(path), field="uid",
            hint="add a uid column (the pool's content uid) or the problem text",
        )  # fmt: skip
    if "model" not in cols and not model:
        raise InputError("the table has no 'model' column", file=str(path), field="model",
                         hint="pass --model NAME (the model that produced the counts)")  # fmt: skip
    rate_cols = [c for c in ("pass_rate", "accuracy") if c in cols]
    rate_col = rate_cols[0] if rate_cols else None
    if "passed" not in cols and rate_col is None:
        raise InputError(
            "the table has neither 'passed' nor 'pass_rate'/'accuracy'", file=str(path),
            field="passed", hint="add passed (with k) or a pass_rate column",
        )  # fmt: skip
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ConfigError(f"--k must be a whole number >= 1, got {k!r}")
    if k is not None and k > _INT32_MAX:
        raise ConfigError(f"--k must be at most 2**31 - 1, got {k!r}")
    out: list[tuple[int, dict[str, Any]]] = []
    first: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
    for i, r in raw:
        if r.get("uid") is not None:
            uid = _text(r.get("uid"), path, i, "uid", "the pool's content uid of the problem")
        else:
            text = _text(r.get(problem_field), path, i, problem_field,
                         "each row needs a uid or the problem text")  # fmt: skip
            dom = r.get("domain") or domain
            if dom and dom not in ("math", "code"):  # the uid of a text depends on it
                raise InputError(
                    f"domain {dom!r} is not math or code", file=str(path), row=i, field="domain",
                    hint="the domain column names the problem's domain (math | code), which "
                    "its content uid depends on; rename another meaning (a subject) or drop it",
                )  # fmt: skip
            if not dom:
                raise InputError(
                    "the row gives the problem text but no domain", file=str(path), row=i,
                    field="domain", hint="the pool mixes domains: pass --domain math|code or "
                    "add a domain column (the uid of a problem text depends on its domain)",
                )  # fmt: skip
            uid = problem_uid(dom, text)
        m = r.get("model")
        m = model if m is None or (isinstance(m, str) and not m.strip() and model) else m
        m = _text(m, path, i, "model", "name the model in the row, or pass --model NAME")
        if model and m != model:  # --model fills empty cells; it never relabels a row
            raise InputError(
                f"the row names model {m!r}, but --model {model!r} was given", file=str(path),
                row=i, field="model", hint="--model only fills rows without a model: drop it "
                "(the table names its models), or fix the table's model column",
            )  # fmt: skip
        kk = _count(r.get("k"), path, i, "k")
        if k is not None and kk is not None and kk != k:
            raise InputError(
                f"the row says k={kk}, but --k {k} was given", file=str(path), row=i, field="k",
                hint="--k only fills rows without k: drop it (the table gives k), or fix the "
                "table's k column",
            )  # fmt: skip
        kk = k if kk is None else kk
        if kk is not None and kk < 1:
            raise InputError(f"k must be >= 1, got {kk}", file=str(path), row=i, field="k",
                             hint="k is the number of samples graded per prompt")  # fmt: skip
        passed = _count(r.get("passed"), path, i, "passed")
        # a row may give its rate as pass_rate or accuracy; both given, they must agree (below)
        rates = [(c, v) for c in rate_cols
                 if (v := _fraction(r.get(c), path, i, c)) is not None]  # fmt: skip
        rcol, rate = rates[0] if rates else (rate_col, None)
        if passed is None and rate is None:
            field = "passed" if "passed" in cols else rate_col
            raise InputError(f"{field} is missing", file=str(path), row=i, field=field,
                             hint="every row needs passed (with k) or a pass rate")  # fmt: skip
        if passed is not None and kk is None:
            raise InputError("'passed' given without k", file=str(path), row=i, field="k",
                             hint="add a k column or pass --k")  # fmt: skip
        if passed is not None and not 0 <= passed <= kk:
            raise InputError(f"passed={passed} is outside 0..{kk}", file=str(path), row=i,
                             field="passed")  # fmt: skip
        # grades that were neither pass nor fail (verifier timeouts): the rate is over the rest
        invalid = _count(r.get("n_invalid"), path, i, "n_invalid")
        if invalid is not None:
            if invalid < 0:
                raise InputError(f"n_invalid must be >= 0, got {invalid}", file=str(path),
                                 row=i, field="n_invalid")  # fmt: skip
            if passed is None or kk is None:
                raise InputError("n_invalid given without k and passed", file=str(path), row=i,
                                 field="n_invalid",
                                 hint="n_invalid counts grades out of k: give k and passed")  # fmt: skip
            if invalid > kk - passed:
                raise InputError(f"n_invalid={invalid} is more than k - passed = {kk - passed}",
                                 file=str(path), row=i, field="n_invalid")  # fmt: skip
        denom = kk - (invalid or 0) if kk is not None else None
        if len(rates) == 2:
            # pass_rate and accuracy both given: the same rate twice, or the table disagrees
            # with itself (the second was ignored without a word). With k known they must name
            # the same count, as a rate beside passed must; without, agree to 0.005 (a rate
            # printed to two decimals)
            (a, x), (b, y) = rates
            same = (round(x * denom) == round(y * denom) if denom is not None and denom > 0
                    else abs(x - y) <= 0.005)  # fmt: skip
            if not same:
                counts = (f" ({round(x * denom)} and {round(y * denom)} passes of "
                          f"{denom})" if denom else "")  # fmt: skip
                raise InputError(
                    f"{a} {x!r} and {b} {y!r} disagree{counts}", file=str(path), row=i, field=b,
                    hint=f"fix one of them, or drop the {b} column (the same rate as {a})",
                )  # fmt: skip
        if passed is not None and rate is not None:
            # both given: the rate must name the same count (a rate printed to a few decimals,
            # 0.33 for 1/3, still does); one that does not is a table that disagrees with itself
            if denom > 0 and round(rate * denom) != passed:
                raise InputError(
                    f"{rcol} {rate!r} disagrees with passed={passed} of k={kk}"
                    + (f" ({invalid} invalid)" if invalid else "")
                    + f" (that is {passed / denom:.4g})", file=str(path), row=i, field=rcol,
                    hint=f"fix one of them, or drop the {rcol} column (passed and k are used)",
                )  # fmt: skip
        if passed is None and rate is not None and kk is not None:
            passed = round(rate * kk)
            if abs(rate * kk - passed) > 1e-6:  # rounding would publish another rate
                raise InputError(
                    f"{rcol} {rate!r} is not a whole number of passes out of k={kk} "
                    f"({rate * kk:.4g})", file=str(path), row=i, field=rcol,
                    hint="give the k these rates were measured with, or leave --k out (the "
                    "rates are then imported as they are, k unknown)",
                )  # fmt: skip
        rec = {"uid": uid, "model": m, "params_hash": "", "verifier_version": verifier_version,
               "k": kk, "passed": passed, "n_invalid": invalid,
               "pass_rate": rate if passed is None else None, "origin": f"table:{path.name}"}  # fmt: skip
        prev = first.get((uid, m))
        if prev is not None:
            if prev[1] == rec:
                if repeats is not None:
                    repeats.append((i, prev[0]))
                continue
            raise InputError(
                f"uid {uid} of model {m!r} has two different counts: row {prev[0]} "
                f"(k={prev[1]['k']}, passed={prev[1]['passed']}, pass_rate={prev[1]['pass_rate']})"
                f" and row {i} (k={kk}, passed={passed}, pass_rate={rec['pass_rate']})",
                file=str(path), row=i, field="uid",
                hint="keep one row per (uid | problem, model); nothing was imported",
            )  # fmt: skip
        first[(uid, m)] = (i, rec)
        out.append((i, rec))
    return out


def import_table(
    path: str | Path,
    *,
    model: str | None = None,
    k: int | None = None,
    domain: str = "math",
    verifier_version: str = "external",
    problem_field: str = "problem",
) -> pa.Table:
    """A plain table: ``uid`` (or the problem text in ``problem_field``, turned into the same
    content uid as ingest, for ``domain`` or the row's own ``domain`` column), ``model`` (or
    ``--model``), and ``k`` + ``passed`` (or ``--k``) or a ``pass_rate`` / ``accuracy`` column
    (k may then stay unknown). Bad values are errors naming file, row and field (see
    :func:`read_table_rows`)."""
    rows = read_table_rows(path, model=model, k=k, domain=domain,
                           verifier_version=verifier_version, problem_field=problem_field)  # fmt: skip
    return counts_table(r for _, r in rows)
