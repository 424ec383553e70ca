"""The contamination report on a small fixed run built from real AIME 2024 data.

Golden files: ``tests/reports/golden/report.json`` and ``report.md`` (volatile fields normalised).
Regenerate with ``SLUICE_UPDATE_GOLDEN=1 pytest tests/reports``.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fixture_run import build_fixture_run

from curation.errors import InputError, IntegrityError, NotFoundError, StorageError
from curation.rundir import reseal
from reports.contamination import (
    REPORT_SCHEMA_VERSION,
    build_report,
    highlight,
    merge_intervals,
    render_markdown_summary,
    render_report,
)

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("SLUICE_UPDATE_GOLDEN") == "1"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, benchmarks_dir, pools_dir) -> Path:
    return build_fixture_run(tmp_path_factory.mktemp("run") / "run-a", benchmarks_dir, pools_dir)


@pytest.fixture(scope="module")
def report_dir(run_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    render_report(run_dir, out)
    return out


def _digest(text: str) -> str:
    """Stand-in for benchmark/pool text in golden files: the repository must not hold copies of
    benchmark problems, and a digest still changes whenever the reported text changes."""
    import hashlib

    return f"<text sha256:{hashlib.sha256(text.encode()).hexdigest()[:16]} chars:{len(text)}>"


def _redact(obj):
    if isinstance(obj, dict):
        return {
            k: _digest(v) if k == "overlap_text" and isinstance(v, str) else _redact(v)
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_redact(v) for v in obj]
    return obj


def normalize_json(report: dict, run_dir: Path, benchmarks_dir: Path) -> str:
    r = _redact(json.loads(json.dumps(report)))
    r["generated_at"] = "<generated_at>"
    r["report_sluice_version"] = "<version>"
    p = r["provenance"]
    p["created_at"] = "<created_at>"
    p["sluice_version"] = "<version>"
    # the files the report read (run.json holds times; Parquet bytes vary with the writer)
    r["run_files_sha256"] = dict.fromkeys(r["run_files_sha256"], "<sha256>")
    if "sha256" in r["evidence"]:
        r["evidence"]["sha256"] = "<sha256>"
    r["report_files_sha256"] = dict.fromkeys(r["report_files_sha256"], "<sha256>")
    text = json.dumps(r, indent=2, sort_keys=True) + "\n"
    return normalize_text(text, run_dir, benchmarks_dir)


def normalize_text(text: str, run_dir: Path, benchmarks_dir: Path) -> str:
    """Replace what changes between machines and runs: temp paths, the data folder, times,
    the Sluice version."""
    text = text.replace(str(run_dir.parent), "<tmp>").replace(str(benchmarks_dir), "<benchmarks>")
    if len(os.getcwd()) > 1:  # the run records where it ran (its reproduce line: cd <cwd>)
        text = text.replace(os.getcwd(), "<cwd>")
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)?", "<time>", text)
    text = re.sub(r"(Sluice version \(run\) \| )[^|]+", r"\1<version> ", text)
    return re.sub(r"Sluice \d+\.\d+\.\d+\S*", "Sluice <version>", text)


def check_golden(name: str, actual: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
    assert path.is_file(), f"{path} missing: run with SLUICE_UPDATE_GOLDEN=1 to create it"
    expected = path.read_text(encoding="utf-8")
    assert actual == expected, (
        f"{name} differs from the golden file (SLUICE_UPDATE_GOLDEN=1 to accept)"
    )


# ----------------------------------------------------------------------------- golden files


def test_json_matches_golden(report_dir, run_dir, benchmarks_dir):
    report = json.loads((report_dir / "report.json").read_text())
    assert report["schema_version"] == REPORT_SCHEMA_VERSION
    check_golden("report.json", normalize_json(report, run_dir, benchmarks_dir))


def test_markdown_matches_golden(report_dir, run_dir, benchmarks_dir):
    md = (report_dir / "report.md").read_text()
    # evidence rows end with an excerpt of the training text: keep its digest, not the text
    md = re.sub(
        r"^(\| \d+ \|.*\| )([^|]+?)( \|)$",
        lambda m: m.group(1) + _digest(m.group(2)) + m.group(3),
        md,
        flags=re.M,
    )
    check_golden("report.md", normalize_text(md, run_dir, benchmarks_dir))


# ----------------------------------------------------------------------------- oracles


def test_summary_counts_agree_with_an_independent_count(report_dir, run_dir):
    """Recount flagged rows per detector/source straight from the Parquet files."""
    report = json.loads((report_dir / "report.json").read_text())
    s = report["summary"]
    dec = pq.read_table(run_dir / "decisions.parquet").to_pylist()
    m = pq.read_table(run_dir / "matches.parquet").to_pylist()

    assert s["rows"] == len(dec) == 9
    assert s["flagged"] == sum(r["contaminated"] for r in dec)
    assert s["kept"] == len(dec) - s["flagged"]
    over = defaultdict(set)
    for r in m:
        if r["score"] >= r["threshold"]:
            over[r["detector"]].add(r["sample_uid"])
    assert {d["detector"]: d["samples_over_threshold"] for d in s["by_detector"]} == {
        d: len(u) for d, u in over.items()
    }
    per_source = defaultdict(lambda: [0, 0])
    for r in dec:
        per_source[r["source"]][0] += 1
        per_source[r["source"]][1] += r["contaminated"]
    assert {x["source"]: [x["rows"], x["flagged"]] for x in s["by_source"]} == per_source
    # the five AIME 2024 copies and the half copy are removed; the older AIME rows are kept
    removed = {r["sample_uid"] for r in dec if r["contaminated"]}
    assert removed == {f"ttrl-{i}" for i in range(5)} | {"ttrl-8-half"}


def _run_texts(run_dir) -> tuple[dict, dict]:
    """The run's training texts by (sample_uid, field) and benchmark wordings by (item, variant)."""
    texts = {
        (r["sample_uid"], r["field"]): r["text"]
        for r in pq.read_table(run_dir / "texts.parquet").to_pylist()
    }
    items = {
        (r["item_id"], r["variant"]): r["text"]
        for r in pq.read_table(run_dir / "benchmark_items.parquet").to_pylist()
    }
    return texts, items


def test_evidence_spans_point_at_the_same_text_on_both_sides(report_dir, run_dir):
    texts, items = _run_texts(run_dir)
    ev = pq.read_table(report_dir / "evidence.parquet").to_pylist()
    assert len(ev) == 6
    checked = 0
    for r in ev:
        assert r["highlight_detector"] == "ngram"  # exact-overlap spans are preferred
        st = texts[(r["sample_uid"], r["field"])]
        bt = items[(r["benchmark_item"], r["benchmark_variant"])]
        for sp in r["spans"]:
            a = set(re.findall(r"\w+", st[sp["sample_start"] : sp["sample_end"]].lower()))
            b = set(re.findall(r"\w+", bt[sp["bench_start"] : sp["bench_end"]].lower()))
            assert len(a & b) >= 0.8 * len(a | b), (r["sample_uid"], sp)
            checked += 1
    assert checked >= 6


def _marked_runs(text: str, spans: list[tuple[int, int]]) -> list[str]:
    """The pieces of ``text`` a reader should see highlighted: maximal runs of characters that
    some span covers (a naive oracle for the report's interval merging)."""
    covered = {i for a, b in spans for i in range(max(a, 0), min(b, len(text)))}
    runs: list[str] = []
    for i in sorted(covered):
        if i - 1 in covered:
            runs[-1] += text[i]
        else:
            runs.append(text[i])
    return runs


def test_html_evidence_marks_the_spans_in_the_right_texts(report_dir, run_dir):
    """Each evidence row of the HTML shows the training text and the benchmark wording the
    match was found in, each with its own side of the spans marked."""
    from html import unescape

    texts, items = _run_texts(run_dir)
    ev = json.loads((report_dir / "report.json").read_text())["evidence"]["rows"]
    html = (report_dir / "report.html").read_text()
    body = html[html.index('id="evidence-table"') :]
    body = body[: body.index("</tbody>")]
    rows = re.findall(r"<tr data-detectors=.*?</tr>", body, flags=re.S)
    assert len(rows) == len(ev) == 6
    spans_differ = 0
    for row, e in zip(rows, ev, strict=True):
        assert f'<span class="uid">{e["sample_uid"]}</span>' in row
        sample_div, bench_div = re.findall(r'<div class="text">(.*?)</div>', row, flags=re.S)
        sample = texts[(e["sample_uid"], e["field"])]
        bench = items[(e["benchmark_item"], e["benchmark_variant"])]
        s_spans = [(s["sample_start"], s["sample_end"]) for s in e["spans"]]
        b_spans = [(s["bench_start"], s["bench_end"]) for s in e["spans"]]
        spans_differ += s_spans != b_spans
        for div, text, spans in ((sample_div, sample, s_spans), (bench_div, bench, b_spans)):
            assert unescape(re.sub(r"</?mark>", "", div)) == text  # whole text, nothing cut
            marked = [unescape(m) for m in re.findall(r"<mark>(.*?)</mark>", div, flags=re.S)]
            assert marked == _marked_runs(text, spans), e["sample_uid"]
    assert spans_differ  # a row whose two sides differ, so swapped sides would show


def test_agreement_and_single_detector_items(report_dir):
    report = json.loads((report_dir / "report.json").read_text())
    ag = report["agreement"]
    combos = {c["label"]: c["pairs"] for c in ag["combinations"]}
    assert combos == {"minhash + ngram": 5, "ngram": 1}
    assert ag["single_detector_total"] == 1
    assert ag["single_detector_pairs"][0]["sample_uid"] == "ttrl-8-half"  # half of 2024-I-9
    assert ag["single_detector_pairs"][0]["benchmark_item"] == "2024-I-9"


def test_sensitivity_curve_at_threshold_matches_flag_count(report_dir):
    report = json.loads((report_dir / "report.json").read_text())
    by_det = {d["detector"]: d["samples_over_threshold"] for d in report["summary"]["by_detector"]}
    # every detector that flagged rows has its curve (an empty sensitivity passed the loop)
    assert by_det and sorted(report["sensitivity"]) == sorted(by_det)
    for det, curve in report["sensitivity"].items():
        thr = report["thresholds"][det]
        at = [n for t, n in curve if abs(t - thr) < 1e-9]
        assert at == [by_det[det]]
        counts = [n for _, n in curve]
        assert counts == sorted(counts, reverse=True)  # monotone: higher threshold, fewer rows


def test_max_evidence_caps_the_report_but_not_the_parquet(run_dir, report_dir, tmp_path):
    paths = render_report(run_dir, tmp_path, max_evidence=2)
    report = json.loads(paths.json.read_text())
    full = json.loads((report_dir / "report.json").read_text())  # the default cap shows all 6
    assert report["evidence"]["total"] == 6 and report["evidence"]["shown"] == 2
    assert report["evidence"]["rows"] == full["evidence"]["rows"][:2]  # the first two, in order
    assert pq.read_table(paths.evidence).equals(pq.read_table(report_dir / "evidence.parquet"))
    # only the list is capped: the counts, agreement and curves still describe every pair
    for key in ("summary", "agreement", "thresholds", "sensitivity"):
        assert report[key] == full[key], key
    assert "Showing 2 of 6 flagged pairs" in paths.html.read_text()
    assert "Showing 2 of 6 flagged pairs" in paths.markdown.read_text()
    html, md, js = paths  # the tuple form flows.tasks relies on
    assert html.name == "report.html" and md.name == "report.md" and js.name == "report.json"


def test_a_clean_run_gives_an_empty_but_complete_report(run_dir, tmp_path):
    """No match at all: every section is there and says so, the plots still render."""
    from decontam.base import MATCH_SCHEMA

    clean = tmp_path / "clean-run"
    clean.mkdir()
    for f in run_dir.iterdir():
        if f.is_file():
            (clean / f.name).write_bytes(f.read_bytes())
    pq.write_table(MATCH_SCHEMA.empty_table(), clean / "matches.parquet")
    dec = pq.read_table(clean / "decisions.parquet")
    n = dec.num_rows
    dec = dec.set_column(1, "contaminated", pa.array([False] * n))
    dec = dec.set_column(2, "reasons", pa.array([[]] * n, pa.list_(pa.string())))
    pq.write_table(dec, clean / "decisions.parquet")
    reseal(clean)  # run.json records its files' hashes; a report refuses edited files
    paths = render_report(clean, tmp_path / "out")
    report = json.loads(paths.json.read_text())
    assert report["summary"]["flagged"] == 0 and report["summary"]["kept"] == n
    assert report["evidence"]["total"] == 0 and report["agreement"]["combinations"] == []
    assert pq.read_table(paths.evidence).num_rows == 0
    html = paths.html.read_text()
    assert "No pair was flagged." in html and html.count("data:image/png;base64,") == 3
    md = paths.markdown.read_text()
    assert "**0 of 9 rows flagged and removed (0.0%)**" in md
    # run.json still counts 6 contaminated rows: the report does not hide the inconsistency
    assert "run.json counts 6 contaminated rows but decisions.parquet marks 0" in md
    assert report["summary"]["consistency_note"] in html


def test_a_sparse_manifest_still_renders(run_dir, tmp_path):
    """A run.json with its schema and files record but little else: missing fields show as
    empty, never crash."""
    sparse = tmp_path / "sparse-run"
    sparse.mkdir()
    for f in run_dir.iterdir():
        if f.is_file():
            (sparse / f.name).write_bytes(f.read_bytes())
    files = json.loads((run_dir / "run.json").read_text())["files"]
    (sparse / "run.json").write_text(
        json.dumps(
            {
                "schema_version": "decontam_run/1",
                "files": files,
                "benchmarks": [{"name": "aime24"}],
                "detectors": [{"name": "ngram"}],
            }
        )
    )
    paths = render_report(sparse, tmp_path / "out")
    report = json.loads(paths.json.read_text())
    assert report["summary"]["flagged"] == 6
    # minhash is not in the manifest: its threshold comes from its match rows
    assert report["thresholds"] == {"minhash": 0.5, "ngram": 0.3}
    assert "(the run did not record its command)" in paths.html.read_text()


# ----------------------------------------------------------------------------- untrusted text


def test_highlight_escapes_text_and_merges_spans():
    text = "a<b>&c <script>x</script> tail"
    out = str(highlight(text, [(0, 3), (2, 6), (8, 16), (100, 200)]))
    assert "<script>" not in out and "<b>" not in out
    assert out.startswith("<mark>a&lt;b&gt;&amp;c</mark> &lt;<mark>")
    assert "<mark>script&gt;x</mark>" in out
    assert merge_intervals([(5, 9), (0, 2), (1, 3), (9, 9), (8, 50)], 20) == [(0, 3), (5, 20)]
    # a span inside an earlier one does not cut it short; touching spans are one mark
    assert merge_intervals([(0, 10), (2, 4), (10, 12)], 20) == [(0, 12)]


def test_hostile_texts_are_escaped_in_html_and_markdown(run_dir, tmp_path):
    hostile = tmp_path / "hostile-run"
    hostile.mkdir()
    for f in run_dir.iterdir():
        (hostile / f.name).write_bytes(f.read_bytes())
    payload = "<script>window.__pwned=1</script><img src=x onerror=alert(1)>"
    t = pq.read_table(hostile / "texts.parquet").to_pylist()
    for r in t:
        r["text"] = r["text"] + payload  # appended: the spans still point at the right text
    pq.write_table(
        pa.Table.from_pylist(t, schema=pq.read_schema(hostile / "texts.parquet")),
        hostile / "texts.parquet",
    )
    dec = pq.read_table(hostile / "decisions.parquet")
    src = [s + "|<b>x</b>" for s in dec.column("source").to_pylist()]
    dec = dec.set_column(dec.schema.get_field_index("source"), "source", pa.array(src, pa.string()))
    pq.write_table(dec, hostile / "decisions.parquet")
    reseal(hostile)

    paths = render_report(hostile, tmp_path / "out")
    html = paths.html.read_text()
    assert "window.__pwned" in html  # the text is shown ...
    assert "<script>window.__pwned" not in html and "<img src=x" not in html  # ... never run
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html
    assert "<b>x</b>" not in html
    md = paths.markdown.read_text()
    assert "<b>x</b>" not in md and "&lt;b&gt;x&lt;/b&gt;" in md
    assert "ttrl_aime24\\|" in md  # a pipe in a cell cannot break the table


# ----------------------------------------------------------------------------- measured quality


def _write_eval(d: Path, thresholds: dict[str, float], versions: dict[str, str]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    ev = {
        "schema_version": "decontam_eval/1",
        "config_hash": "abc123",
        "detectors": [
            {"name": n, "version": versions[n], "config": {"threshold": t}}
            for n, t in thresholds.items()
        ],
        "metrics": {
            "overall": {"precision": 0.9, "recall": 0.75, "f1": 0.818},
            "per_detector": {"ngram": {"precision": 1.0, "recall": 0.6, "f1": 0.75}},
            "fpr_per_negative_kind": {"lookalike": {"fpr": 0.1}},
        },
    }
    (d / "evaluation.json").write_text(json.dumps(ev))
    return d


# the versions of the detectors the fixture run used (an evaluation of the same configuration)
VERSIONS = {"ngram": "ngram/3", "minhash": "minhash/1"}


def test_evaluation_of_the_same_configuration_is_shown(run_dir, tmp_path):
    ev = _write_eval(tmp_path / "eval", {"ngram": 0.3, "minhash": 0.5}, VERSIONS)
    report, _, _ = build_report(run_dir, evaluation_dir=ev)
    q = report["measured_quality"]
    assert q["status"] == "same_configuration" and q["differences"] == []
    scopes = {row["scope"]: row["metrics"] for row in q["metrics"]}
    assert scopes["overall"]["recall"] == 0.75
    assert scopes["per_detector / ngram"]["precision"] == 1.0
    assert scopes["fpr_per_negative_kind / lookalike"]["fpr"] == 0.1


def test_evaluation_of_another_configuration_is_called_out(run_dir, tmp_path):
    ev = _write_eval(
        tmp_path / "eval",
        {"ngram": 0.7, "minhash": 0.5},
        VERSIONS | {"minhash": "minhash/0"},
    )
    paths = render_report(run_dir, tmp_path / "out", evaluation_dir=ev)
    q = json.loads(paths.json.read_text())["measured_quality"]
    assert q["status"] == "different_configuration"
    assert "ngram threshold: run 0.3, evaluated 0.7" in q["differences"]
    assert "minhash version: run minhash/1, evaluated minhash/0" in q["differences"]
    for text in (paths.html.read_text(), paths.markdown.read_text()):
        assert "DIFFERENT configuration" in text


@pytest.fixture(scope="module")
def real_evaluation(tmp_path_factory, contam_dev_path, benchmarks_dir) -> Path:
    """A real ``decontam.evaluate`` run (ngram + minhash, AIME 2024) on the dev set's AIME 2024
    rows plus its first 40 clean math rows."""
    from decontam.benchmarks import load_benchmarks
    from decontam.evaluate import EvalConfig, evaluate, write_outputs

    base = tmp_path_factory.mktemp("eval")
    rows = [json.loads(line) for line in contam_dev_path.read_text(encoding="utf-8").splitlines()]
    pos = [r for r in rows if r["benchmark"] == "aime24"]
    neg = [r for r in rows if r["label"] == "clean" and r["domain"] == "math"][:40]
    labels = base / "labels.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in pos + neg))
    cfg = EvalConfig(detectors=["ngram", "minhash"], benchmarks=["aime24"])
    bench = load_benchmarks(["aime24"], benchmarks_dir=benchmarks_dir, include_variants=True)
    # the fixture run's policy (the detectors' own thresholds), so the evaluation measures it
    from decontam.policy import PolicyConfig

    write_outputs(evaluate(labels, cfg, benchmarks=bench, policy=PolicyConfig()), base / "out")
    return base / "out"


def test_real_evaluation_of_the_same_detectors_is_shown(run_dir, real_evaluation, tmp_path):
    paths = render_report(run_dir, tmp_path / "out", evaluation_dir=real_evaluation)
    q = json.loads(paths.json.read_text())["measured_quality"]
    ev = json.loads((real_evaluation / "evaluation.json").read_text())
    assert q["status"] == "same_configuration", q["differences"]
    rows = {r["scope"]: r for r in q["metrics"]}
    assert (
        rows["combined (evaluated policy)"]["metrics"]["recall (item)"]
        == ev["combined"]["item"]["recall"]
    )
    assert (
        rows["ngram alone"]["metrics"]["precision (item)"]
        == ev["per_detector"]["ngram"]["item"]["precision"]
    )
    assert all(r["applies"] for r in q["metrics"])
    assert any(s.startswith("combined: recall on kind verbatim") for s in rows)
    html = paths.html.read_text()
    assert "same detectors, versions and thresholds" in html and 'id="quality-table"' in html
    assert (real_evaluation / "sweep.png").is_file() and 'id="plot-eval-sweep"' in html


def test_real_evaluation_with_another_threshold_is_called_out(
    real_evaluation, benchmarks_dir, pools_dir, tmp_path
):
    """The run's policy lowers the MinHash threshold: the evaluation no longer describes the
    combined result nor MinHash, but still describes n-grams alone. (A run made with that
    policy: run.json's thresholds edited alone are refused, they did not decide the run.)"""
    c = build_fixture_run(tmp_path / "run-policy", benchmarks_dir, pools_dir, variant="b")
    assert json.loads((c / "run.json").read_text())["policy"]["thresholds"] == {"minhash": 0.45}
    paths = render_report(c, tmp_path / "out", evaluation_dir=real_evaluation)
    q = json.loads(paths.json.read_text())["measured_quality"]
    assert q["status"] == "different_configuration"
    assert q["differences"] == ["minhash threshold: run 0.45, evaluated 0.5"]
    applies = {r["scope"]: r["applies"] for r in q["metrics"]}
    assert applies["ngram alone"] is True
    assert applies["minhash alone"] is False and applies["combined (evaluated policy)"] is False
    assert "DIFFERENT configuration" in paths.markdown.read_text()


def test_evaluation_lacking_some_of_the_runs_benchmarks_does_not_apply(
    run_dir, real_evaluation, tmp_path
):
    """An evaluation on aime24 only does not describe a run that also checked aime25 and
    lcb_v5: those benchmarks are differences, named, and no row applies."""
    c = tmp_path / "run-more-benchmarks"
    c.mkdir()
    for f in run_dir.iterdir():
        if f.is_file():
            (c / f.name).write_bytes(f.read_bytes())
    m = json.loads((c / "run.json").read_text())
    m["benchmarks"] += [
        dict(m["benchmarks"][0], name=n, version=f"{n}@1") for n in ("aime25", "lcb_v5")
    ]
    (c / "run.json").write_text(json.dumps(m))
    paths = render_report(c, tmp_path / "out", evaluation_dir=real_evaluation)
    q = json.loads(paths.json.read_text())["measured_quality"]
    assert q["status"] == "different_configuration"
    assert q["differences"] == [
        "benchmarks aime25, lcb_v5 are in this run but not in the evaluation (it covered "
        "aime24): its numbers do not describe matches against them"
    ]
    assert not any(r["applies"] for r in q["metrics"])
    md = paths.markdown.read_text()
    assert "same detectors, versions and thresholds" not in md and "aime25, lcb_v5" in md


def test_unverified_benchmark_copies_are_a_warning_at_the_top(run_dir, tmp_path):
    """A run on a benchmark copy that does not match its pins (--allow-benchmark-mismatch)
    says so in the headline of every format, not only in the provenance table; the reproduce
    line carries the working directory and SLUICE_BENCHMARKS_DIR the run recorded."""
    c = tmp_path / "run-unverified"
    c.mkdir()
    for f in run_dir.iterdir():
        if f.is_file():
            (c / f.name).write_bytes(f.read_bytes())
    m = json.loads((c / "run.json").read_text())
    m["benchmarks"][0]["verified"] = False
    m["environment"] = {"cwd": "/work/x y", "SLUICE_BENCHMARKS_DIR": "/data/bench copy"}
    (c / "run.json").write_text(json.dumps(m))
    paths = render_report(c, tmp_path / "out")
    warning = json.loads(paths.json.read_text())["summary"]["benchmark_warning"]
    assert warning.startswith("UNVERIFIED BENCHMARKS: this run used copies of aime24 that do not")
    assert "must not be signed" in warning
    md = paths.markdown.read_text()
    assert md.index("UNVERIFIED BENCHMARKS") < md.index("rows flagged and removed")
    html = paths.html.read_text()
    assert html.index('id="benchmark-warning"') < html.index('class="cards"')
    assert f"cd '/work/x y' && SLUICE_BENCHMARKS_DIR='/data/bench copy' {m['command']}" in md
    # a verified run has no warning
    assert "UNVERIFIED" not in render_report(run_dir, tmp_path / "ok").markdown.read_text()


def test_malformed_run_json_names_line_and_column(run_dir, tmp_path):
    from reports.run_data import load_run

    c = tmp_path / "run-bad-json"
    c.mkdir()
    for f in run_dir.iterdir():
        if f.is_file():
            (c / f.name).write_bytes(f.read_bytes())
    (c / "run.json").write_text('{\n  "command": "a\x01b"\n}\n')
    with pytest.raises(
        InputError, match=r"malformed JSON: Invalid control character at \(line 2, column 16\)"
    ):
        load_run(c)


def test_missing_evaluation_is_a_clear_error(run_dir, tmp_path):
    with pytest.raises(NotFoundError, match="evaluation.json"):
        build_report(run_dir, evaluation_dir=tmp_path)


# ----------------------------------------------------------------------------- inputs and API


def test_markdown_summary_for_artifacts(run_dir):
    md = render_markdown_summary(run_dir, html_link="file:///reports/report.html")
    assert "**6 of 9 rows flagged and removed (66.7%)**" in md
    assert "[Full report](file:///reports/report.html)" in md
    assert "| ttrl-8-half | aime24/2024-I-9 | removed | ngram |" in md
    assert "Full report" not in render_markdown_summary(run_dir)


def test_bad_run_directories_name_the_problem(run_dir, tmp_path):
    with pytest.raises(NotFoundError, match="not found"):
        render_report(tmp_path / "nope", tmp_path / "out")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "run.json").write_text("{}")
    with pytest.raises(NotFoundError, match="matches.parquet"):
        render_report(broken, tmp_path / "out")
    pq.write_table(pa.table({"sample_uid": ["x"]}), broken / "matches.parquet")
    pq.write_table(pq.read_table(run_dir / "decisions.parquet"), broken / "decisions.parquet")
    with pytest.raises(IntegrityError, match="'schema_version'"):
        render_report(broken, tmp_path / "out")
    files = {"matches.parquet": {}, "decisions.parquet": {}}
    (broken / "run.json").write_text(
        json.dumps({"schema_version": "decontam_run/1", "files": files})
    )
    reseal(broken)
    with pytest.raises(InputError, match="'field'") as exc:
        render_report(broken, tmp_path / "out")
    assert exc.value.file.endswith("matches.parquet") and exc.value.field == "field"


def _variant(run_dir: Path, dest: Path, edit) -> Path:
    """A copy of the run whose run.json is ``edit(manifest)`` (files unchanged)."""
    dest.mkdir()
    for f in run_dir.iterdir():
        if f.is_file():
            (dest / f.name).write_bytes(f.read_bytes())
    m = json.loads((run_dir / "run.json").read_text())
    edit(m)
    (dest / "run.json").write_text(json.dumps(m))
    return dest


def test_a_run_json_without_its_files_record_or_schema_is_refused(run_dir, tmp_path):
    """Without a files record, an edited decisions.parquet (a verbatim AIME copy shown as kept)
    would go unnoticed; an unknown schema or an empty run.json is not a run this reader knows."""
    from reports.diff import diff_runs

    def tamper(d: Path) -> None:
        dec = pq.read_table(d / "decisions.parquet")
        n = dec.num_rows
        pq.write_table(
            dec.set_column(1, "contaminated", pa.array([False] * n)), d / "decisions.parquet"
        )

    cases = {
        "no-files": (lambda m: m.pop("files"), "'files'"),
        "empty-files": (lambda m: m.update(files={}), "'files'"),
        "partial-files": (lambda m: m["files"].pop("decisions.parquet"), "decisions.parquet"),
        "no-texts-record": (lambda m: m["files"].pop("texts.parquet"), "texts.parquet"),
        "empty": (lambda m: m.clear(), "'schema_version'"),
        "future": (lambda m: m.update(schema_version="decontam_run/9"), "'schema_version'"),
    }
    for name, (edit, words) in cases.items():
        d = _variant(run_dir, tmp_path / name, edit)
        if name.endswith("files"):
            tamper(d)
        for call in (
            lambda d=d: render_report(d, tmp_path / "out"),
            lambda d=d: diff_runs(run_dir, d),
        ):
            with pytest.raises(IntegrityError, match=words) as exc:
                call()
            assert str(d / "run.json") in str(exc.value), name
    assert not (tmp_path / "out").exists()


def test_malformed_run_json_values_are_input_errors_naming_the_field(run_dir, tmp_path):
    from reports.diff import diff_runs

    cases = {
        "benchmarks": (lambda m: m.update(benchmarks="aime24"), "benchmarks"),
        "policy": (lambda m: m.update(policy="x"), "policy"),
        "threshold": (
            lambda m: m["policy"]["effective_thresholds"].update(ngram="high"),
            "policy.effective_thresholds.ngram",
        ),
        "detector": (lambda m: m["detectors"].append(3), "detectors[2]"),
        "rows": (lambda m: m["input"].update(rows="9"), "input.rows"),
    }
    for name, (edit, fld) in cases.items():
        d = _variant(run_dir, tmp_path / name, edit)
        for call in (
            lambda d=d: render_report(d, tmp_path / "out"),
            lambda d=d: diff_runs(d, run_dir),
        ):
            with pytest.raises(InputError) as exc:
                call()
            assert exc.value.field == fld and exc.value.file == str(d / "run.json"), exc.value


def test_report_json_records_the_hashes_of_what_it_read(run_dir, report_dir):
    import hashlib

    got = json.loads((report_dir / "report.json").read_text())["run_files_sha256"]
    want = {
        f.name: hashlib.sha256(f.read_bytes()).hexdigest()
        for f in run_dir.iterdir()
        if f.name in ("run.json", "matches.parquet", "decisions.parquet", "texts.parquet")
        or f.name == "benchmark_items.parquet"
    }
    assert got == want and len(got) == 5


def test_cli_writes_the_report(run_dir, tmp_path):
    from typer.testing import CliRunner

    from flows.cli import app

    out = tmp_path / "cli-report"
    res = CliRunner().invoke(
        app, ["report", "contamination", str(run_dir), "--out", str(out), "--max-evidence", "3"]
    )
    assert res.exit_code == 0, res.output
    assert "report.html" in res.output
    assert json.loads((out / "report.json").read_text())["evidence"]["shown"] == 3
    assert {p.name for p in (out / "plots").iterdir()} == {
        "agreement.png",
        "scores.png",
        "sensitivity.png",
    }


def test_cli_error_is_one_line_exit_2(tmp_path, capsys):
    from flows.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["report", "contamination", str(tmp_path / "missing"), "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "not found" in err and "Traceback" not in err


def test_cli_refuses_an_out_that_is_the_run_directory(run_dir, tmp_path, capsys):
    """A report written into the run directory itself mixes its files (report.json,
    evidence.parquet, plots/) with the run's; a report/ folder inside it (the report flow's
    default) stays allowed."""
    import shutil

    from flows.cli import main

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    for out in (run, run / "report" / "..", Path(os.path.relpath(run))):
        with pytest.raises(SystemExit) as exc:
            main(["report", "contamination", str(run), "--out", str(out)])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "--out" in err and "run directory" in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in run.iterdir()) == sorted(p.name for p in run_dir.iterdir())
    with pytest.raises(SystemExit) as exc:
        main(["report", "contamination", str(run), "--out", str(run / "report")])
    assert exc.value.code == 0, capsys.readouterr().err
    assert (run / "report" / "report.html").is_file()


def test_cli_negative_max_evidence_names_the_option(run_dir, tmp_path, capsys):
    from flows.cli import main

    with pytest.raises(SystemExit) as exc:
        main(
            ["report", "contamination", str(run_dir), "--out", str(tmp_path / "o")]
            + ["--max-evidence", "-5"]
        )
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--max-evidence" in err and "-5" in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def test_a_file_or_an_evaluation_folder_given_as_the_run_says_what_it_is(tmp_path):
    """Both said 'not found' although the path exists: a file, and the --out folder of
    `sluice decontam evaluate` (evaluation.json, matches.parquet, ... but no run.json)."""
    f = tmp_path / "run.json"
    f.write_text("{}")
    with pytest.raises(InputError, match="is a file, not a run directory") as exc:
        render_report(f, tmp_path / "out")
    assert "not found" not in str(exc.value)
    ev = tmp_path / "eval"
    ev.mkdir()
    (ev / "evaluation.json").write_text("{}")
    pq.write_table(pa.table({"sample_uid": ["x"]}), ev / "matches.parquet")
    with pytest.raises(InputError, match="evaluation folder") as exc:
        render_report(ev, tmp_path / "out")
    assert "--evaluation" in str(exc.value) and "not found" not in str(exc.value)
    assert not (tmp_path / "out").exists()


def test_rule_decisions_name_their_rule_and_evidence_only_detectors_say_so(pools_dir, tmp_path):
    """A row excluded by a policy rule is summarised under that rule (which detectors it
    joins), and a detector that is evidence only says so beside its 'rows over threshold'."""
    from decontam.policy import PolicyConfig
    from decontam.run import DecontamConfig, run_decontamination

    src = tmp_path / "five.jsonl"
    lines = (pools_dir / "math_ttrl_aime24_as_train.jsonl").read_text().splitlines()[:5]
    src.write_text("\n".join(lines) + "\n")
    # both evidence only (a threshold above 1, which kept ngram from flagging alone, is refused)
    policy = PolicyConfig(evidence_only=["minhash", "ngram"],
                          rules=[{"ngram": 0.5, "minhash": 0.5}])  # fmt: skip
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram", "minhash"], policy=policy)
    run_decontamination(
        str(src), text_fields=["prompt"], id_field="id", config=cfg,
        data_root=str(tmp_path / "root"), out_dir=tmp_path / "run", publish=False,
    )  # fmt: skip
    render_report(tmp_path / "run", tmp_path / "report")
    s = json.loads((tmp_path / "report" / "report.json").read_text())["summary"]
    assert {r["reason"]: r["samples"] for r in s["reasons"]} == {"rule: minhash + ngram": 5}
    assert {d["detector"]: d["evidence_only"] for d in s["by_detector"]} == {
        "minhash": True,
        "ngram": True,
    }
    md = (tmp_path / "report" / "report.md").read_text()
    assert "| rule: minhash + ngram | 5 |" in md
    assert "minhash (evidence only: decides in a policy rule)" in md


def test_rows_over_threshold_but_kept_are_counted_apart_from_removed(
    pools_dir, benchmarks_dir, tmp_path
):
    """With n-grams evidence only, the half copy that only n-grams reach is over threshold but
    kept: 'of which removed' and 'only this detector' recount from the run's Parquet files."""
    build_fixture_run(tmp_path / "run", benchmarks_dir, pools_dir, evidence_only=["ngram"])
    paths = render_report(tmp_path / "run", tmp_path / "report")
    s = json.loads(paths.json.read_text())["summary"]
    dec = pq.read_table(tmp_path / "run" / "decisions.parquet").to_pylist()
    removed = {r["sample_uid"] for r in dec if r["contaminated"]}
    over = defaultdict(set)
    for r in pq.read_table(tmp_path / "run" / "matches.parquet").to_pylist():
        if r["score"] >= r["threshold"]:
            over[r["detector"]].add(r["sample_uid"])
    assert over["ngram"] - removed == {"ttrl-8-half"}  # the case this test is about
    by_det = {d["detector"]: d for d in s["by_detector"]}
    for det, uids in over.items():
        others = set().union(*(u for d, u in over.items() if d != det))
        assert by_det[det]["samples_over_threshold"] == len(uids)
        assert by_det[det]["of_which_removed"] == len(uids & removed), det
        assert by_det[det]["only_this_detector"] == len(uids - others), det
    assert s["flagged"] == len(removed) and s["kept"] == len(dec) - len(removed)


@pytest.fixture(scope="module")
def cv_evaluation(tmp_path_factory, contam_dev_path, benchmarks_dir) -> Path:
    """The real evaluation of ``real_evaluation`` with its calibration cross-validated
    (``--cv-folds 3``, one deal)."""
    from decontam.benchmarks import load_benchmarks
    from decontam.evaluate import EvalConfig, evaluate, write_outputs
    from decontam.policy import PolicyConfig

    base = tmp_path_factory.mktemp("eval-cv")
    rows = [json.loads(line) for line in contam_dev_path.read_text(encoding="utf-8").splitlines()]
    pos = [r for r in rows if r["benchmark"] == "aime24"]
    neg = [r for r in rows if r["label"] == "clean" and r["domain"] == "math"][:40]
    labels = base / "labels.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in pos + neg))
    cfg = EvalConfig(detectors=["ngram", "minhash"], benchmarks=["aime24"], cv_fold_counts=[])
    bench = load_benchmarks(["aime24"], benchmarks_dir=benchmarks_dir, include_variants=True)
    res = evaluate(labels, cfg, benchmarks=bench, policy=PolicyConfig(), cv_folds=3)
    write_outputs(res, base / "out")
    return base / "out"


def test_out_of_fold_fpr_of_a_cross_validated_evaluation_is_shown(
    run_dir, cv_evaluation, benchmarks_dir, tmp_path
):
    """An evaluation that cross-validated its calibration: the report gives the out-of-fold
    recall and false-positive rates (with their 95 % intervals) as measured, and says whether
    they describe the run (only a run that decided with the calibrated thresholds). The report
    showed the evaluated policy's figures only, with no out-of-fold FPR."""
    ev = json.loads((cv_evaluation / "evaluation.json").read_text())
    cv = ev["cross_validation"]["combined"]
    paths = render_report(run_dir, tmp_path / "out", evaluation_dir=cv_evaluation)
    q = json.loads(paths.json.read_text())["measured_quality"]
    oof = q["out_of_fold"]
    assert oof["measured"] is True and oof["folds"] == 3
    assert oof["recall_item"] == cv["item"]["recall"]
    ln = oof["fpr"]["lookalike+near_miss"]
    assert ln["fpr"] == cv["fpr_by_kind"]["lookalike+near_miss"]["fpr"] and ln["n"] == 40
    assert ln["ci95"] == ev["cross_validation"]["fpr_ci95"]["lookalike+near_miss"]
    rows = {r["scope"]: r for r in q["metrics"]}
    row = rows["calibrated thresholds, 3-fold out of fold"]
    assert row["metrics"]["FPR lookalike+near_miss"] == ln["fpr"]
    assert row["metrics"]["recall (item)"] == cv["item"]["recall"]
    # the fixture run used the detectors' own thresholds, not the calibrated ones
    assert row["applies"] is False and oof["applies"] is False
    assert rows["combined (evaluated policy)"]["applies"] is True
    for text in (paths.markdown.read_text(), paths.html.read_text()):
        assert "3-fold cross-validation of the calibration" in text
        assert "does not describe this run" in text

    # a run that decided with the calibrated thresholds: the out-of-fold figures apply
    from decontam.policy import PolicyConfig
    from decontam.run import DecontamConfig, run_decontamination

    pool = run_dir.parent / f"{run_dir.name}-input" / "fixture_pool.jsonl"
    cal = ev["calibration"]["thresholds"]
    config = DecontamConfig(benchmarks=["aime24"], detectors=["ngram", "minhash"],
                            policy=PolicyConfig(thresholds=cal), use_cache=False)  # fmt: skip
    run_decontamination(str(pool), text_fields=["problem", "solution"], id_field="uid",
                        out_dir=tmp_path / "run-cal", config=config, publish=False,
                        benchmarks_dir=benchmarks_dir, data_root=str(tmp_path / "root"))  # fmt: skip
    report, _, _ = build_report(tmp_path / "run-cal", evaluation_dir=cv_evaluation)
    q = report["measured_quality"]
    applies = {r["scope"]: r["applies"] for r in q["metrics"]}
    assert applies["calibrated thresholds, 3-fold out of fold"] is True
    assert applies["combined (evaluated policy)"] is False  # the evaluated policy is another
    assert q["out_of_fold"]["applies"] is True


def test_an_evaluation_without_cross_validation_says_the_out_of_fold_fpr_is_not_measured(
    report_dir,
):
    """The shipped evaluation did not cross-validate: the report says the out-of-fold FPR was
    not measured (it gave no word on it)."""
    q = json.loads((report_dir / "report.json").read_text())["measured_quality"]
    assert q["out_of_fold"]["measured"] is False
    assert not any("out of fold" in r["scope"] for r in q["metrics"])
    md = (report_dir / "report.md").read_text()
    assert "Out-of-fold false-positive rate: not measured" in md


def test_evaluation_of_more_benchmarks_than_the_run_does_not_apply(
    run_dir, real_evaluation, tmp_path
):
    """An evaluation that also matched against aime25 and lcb_v5 measured recall and
    false positives over benchmarks this run (aime24 only) did not check: the extra benchmarks
    are a named difference and no row applies. It was called 'the same configuration' (only
    the run's benchmarks missing from the evaluation were compared)."""
    ev = json.loads((real_evaluation / "evaluation.json").read_text())
    ev["benchmarks"] += [
        dict(ev["benchmarks"][0], name=n, version=f"{n}@1") for n in ("lcb_v5", "aime25")
    ]
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "evaluation.json").write_text(json.dumps(ev))
    paths = render_report(run_dir, tmp_path / "out", evaluation_dir=tmp_path / "eval")
    q = json.loads(paths.json.read_text())["measured_quality"]
    assert q["status"] == "different_configuration"
    assert q["differences"] == [
        "benchmarks aime25, lcb_v5 were in the evaluation but are not in this run (it checked "
        "aime24): its numbers include matches against them"
    ]
    assert not any(r["applies"] for r in q["metrics"])
    md = paths.markdown.read_text()
    assert "same detectors, versions and thresholds" not in md and "aime25, lcb_v5" in md


def test_evaluation_of_another_policy_rule_or_evidence_only_list_does_not_apply(
    run_dir, real_evaluation, tmp_path
):
    """Same detectors, versions and thresholds, but the evaluated policy let MinHash decide
    only as evidence and added a rule: the combined figures are of another decision, so they
    do not apply, and both differences are named (the detectors alone still apply)."""
    ev = json.loads((real_evaluation / "evaluation.json").read_text())
    ev["policy"] = dict(
        ev["policy"], evidence_only=["minhash"], rules=[{"ngram": 0.2, "minhash": 0.3}]
    )
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "evaluation.json").write_text(json.dumps(ev))
    report, _, _ = build_report(run_dir, evaluation_dir=tmp_path / "eval")
    q = report["measured_quality"]
    assert q["status"] == "different_configuration"
    assert q["differences"] == [
        "policy evidence_only: run none, evaluated minhash",
        "policy rules: run none, evaluated minhash 0.3 + ngram 0.2",
    ]
    applies = {r["scope"]: r["applies"] for r in q["metrics"]}
    assert applies["combined (evaluated policy)"] is False
    assert applies["ngram alone"] is True and applies["minhash alone"] is True


def test_a_run_json_whose_thresholds_did_not_decide_the_run_is_refused(run_dir, tmp_path):
    """run.json's decision thresholds are what the report counts "over threshold" with. Raised
    (decisions.parquet removes rows on n-grams at a score now under it) or lowered (pairs over
    it that the run kept), they are not the ones that decided: the report and the diff refuse
    the run, naming the field and a row, instead of a summary that contradicts its own reasons
    ("ngram: 0 rows over threshold", "removed by ngram: 5")."""
    from reports.diff import diff_runs

    cases = {
        "raised": ("ngram", 1.01, "removes row"),
        "lowered": ("minhash", 0.01, "gives row"),
    }
    for name, (det, thr, verb) in cases.items():

        def edit(m, det=det, thr=thr):
            m["policy"]["effective_thresholds"][det] = thr
            m["policy"]["thresholds"][det] = thr

        d = _variant(run_dir, tmp_path / name, edit)
        for call in (
            lambda d=d: render_report(d, tmp_path / "out"),
            lambda d=d: diff_runs(run_dir, d),
        ):
            with pytest.raises(IntegrityError) as exc:
                call()
            msg = str(exc.value)
            assert str(d / "run.json") in msg and f"policy.effective_thresholds.{det}" in msg
            assert f"decisions.parquet {verb}" in msg, msg
    assert not (tmp_path / "out").exists()


def test_a_run_json_whose_evidence_only_list_did_not_decide_the_run_is_refused(run_dir, tmp_path):
    """An evidence-only detector never removes a row alone, so decisions.parquet never names it
    as a reason. A run.json whose policy.evidence_only lists a detector the decisions name
    (edited, or another run's) would report it as "evidence only: decides in a policy rule"
    beside rows it removed alone: refused, naming the field and a row."""
    from reports.diff import diff_runs

    def edit(m):
        m["policy"]["evidence_only"] = ["ngram"]

    d = _variant(run_dir, tmp_path / "evonly", edit)
    for call in (lambda: render_report(d, tmp_path / "out"), lambda: diff_runs(run_dir, d)):
        with pytest.raises(IntegrityError) as exc:
            call()
        msg = str(exc.value)
        assert str(d / "run.json") in msg and "policy.evidence_only" in msg, msg
        assert "decisions.parquet removes row" in msg and "on ngram" in msg, msg
    assert not (tmp_path / "out").exists()


def test_decisions_whose_verdict_contradicts_their_reasons_are_refused(run_dir, tmp_path):
    """A row is contaminated exactly when the policy gave it a reason. decisions.parquet with a
    verdict flipped (a verbatim AIME copy marked kept, its reason still there), resealed into
    run.json with matching counts, is refused naming the file, the field and the row."""
    d = tmp_path / "flipped"
    d.mkdir()
    for f in run_dir.iterdir():
        if f.is_file():
            (d / f.name).write_bytes(f.read_bytes())
    t = pq.read_table(d / "decisions.parquet")
    flags = t.column("contaminated").to_pylist()
    i = flags.index(True)
    flags[i] = False
    t = t.set_column(t.column_names.index("contaminated"), "contaminated", pa.array(flags))
    pq.write_table(t, d / "decisions.parquet")
    m = json.loads((d / "run.json").read_text())
    m["counts"]["contaminated"] -= 1
    m["counts"]["clean"] += 1
    (d / "run.json").write_text(json.dumps(m))
    reseal(d)
    uid = t.column("sample_uid")[i].as_py()
    with pytest.raises(IntegrityError) as exc:
        render_report(d, tmp_path / "out")
    msg = str(exc.value)
    assert str(d / "decisions.parquet") in msg and "'contaminated'" in msg and uid in msg, msg
    assert not (tmp_path / "out").exists()


def test_report_json_records_the_hash_of_its_evidence_file(report_dir):
    """evidence.parquet is the full evidence list beside a signed report: report.json records
    its SHA-256 and row count, so an edited or swapped evidence file can be told apart."""
    import hashlib

    ev = json.loads((report_dir / "report.json").read_text())["evidence"]
    data = (report_dir / "evidence.parquet").read_bytes()
    assert ev["sha256"] == hashlib.sha256(data).hexdigest()
    assert ev["total"] == pq.read_table(report_dir / "evidence.parquet").num_rows


def test_verify_names_every_report_file_that_changed(run_dir, report_dir, tmp_path):
    """A signature over report.json covers the files beside it: report.json records the SHA-256
    of the HTML and Markdown people read, the evidence and the plots, and `verify_report` names
    each one changed (one byte), deleted, or swapped; a file it does not record (a detached
    signature) is left alone."""
    import shutil

    from reports.contamination import REPORT_PLOTS, verify_report

    got = verify_report(report_dir, run_dir)
    names = ("evidence.parquet", "report.html", "report.md", *REPORT_PLOTS)
    assert set(names) <= set(got) and "run:run.json" in got
    for name in names:
        for how in ("byte", "delete"):
            d = tmp_path / f"{how}-{name.replace('/', '-')}"
            shutil.copytree(report_dir, d)
            if how == "byte":
                b = bytearray((d / name).read_bytes())
                b[len(b) // 2] ^= 1
                (d / name).write_bytes(bytes(b))
            else:
                (d / name).unlink()
            with pytest.raises(IntegrityError) as exc:
                verify_report(d)
            assert str(d / name) in str(exc.value), (name, how, str(exc.value))
    d = tmp_path / "signed"
    shutil.copytree(report_dir, d)
    (d / "report.json.asc").write_text("-----BEGIN PGP SIGNATURE-----\n")
    assert verify_report(d)["report.json"] == got["report.json"]


def test_verify_refuses_a_report_presented_with_another_run(run_dir, report_dir, tmp_path, capsys):
    """Replay: a report verified against a run it was not written from (another run.json, or
    a run since edited and resealed) names the run's files that differ; the CLI says so in one
    line and exits 2."""
    from typer.testing import CliRunner

    from flows.cli import app, main
    from reports.contamination import verify_report

    other = _variant(run_dir, tmp_path / "other", lambda m: m.update(command="sluice other"))
    with pytest.raises(IntegrityError) as exc:
        verify_report(report_dir, other)
    assert f"{other / 'run.json'} is not the file this report was written from" in str(exc.value)
    with pytest.raises(SystemExit) as exit_:
        main(["report", "verify", str(report_dir), "--run", str(other)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert str(other / "run.json") in err and "does not verify" in err
    res = CliRunner().invoke(app, ["report", "verify", str(report_dir), "--run", str(run_dir)])
    assert res.exit_code == 0, res.output
    assert "run files: 5 match" in res.output


def test_docs_python_snippet_runs(run_dir, tmp_path, monkeypatch):
    # docs/reports.md "From Python" called paths.html.as_uri() on the relative path it had just
    # passed: ValueError "relative path can't be expressed as a file URI"
    import shutil

    text = (Path(__file__).resolve().parents[2] / "docs" / "reports.md").read_text()
    (block,) = re.findall(r"## From Python\n\n```python\n(.*?)```", text, flags=re.S)
    shutil.copytree(run_dir, tmp_path / "runs" / "gsm8k")
    shutil.copytree(run_dir, tmp_path / "runs" / "gsm8k-old")
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(block, "docs/reports.md", "exec"), ns)
    assert ns["summary_md"] and ns["paths"].html.is_file()
    assert (tmp_path / "out" / "reports" / "gsm8k-diff" / "diff.json").is_file()
    assert not (tmp_path / "reports").exists()  # run in a checkout, that is the reports/ package


def test_a_report_stopped_while_writing_leaves_no_report_json(run_dir, tmp_path):
    """Ctrl-C while `report contamination RUN --out DIR` rewrote an earlier report in DIR left
    the new report.json and evidence.parquet beside the earlier report.html and report.md (a
    folder that read as one finished report; `sft build` takes a report.json as finished). The
    earlier report.json, .md and .html now go first, every file goes through a temporary name
    and report.json is written last; a rerun writes a whole report."""
    import hashlib
    import signal
    import subprocess
    import sys

    from process_helpers import REPO, sluice_held_after, stop_group

    out = tmp_path / "report"
    render_report(run_dir, out)
    argv = ["report", "contamination", str(run_dir), "--out", str(out), "--max-evidence", "2"]
    # held while report.html is rendered: the new report.md is written, report.json is not
    held = "reports.contamination:_html_evidence"
    proc = sluice_held_after(held, argv, env={}, marker=tmp_path / "held")
    code, err = stop_group(proc, signal.SIGINT)
    assert code == 130 and "Traceback" not in err and "sluice: interrupted" in err, err
    left = sorted(p.name for p in out.iterdir())
    assert not {"report.json", "report.html"} & set(left), left
    assert "Showing 2 of 6 flagged pairs" in (out / "report.md").read_text()  # the new one
    assert not [p for p in out.rglob("*") if ".tmp" in p.name], left
    res = subprocess.run([sys.executable, "-m", "flows.cli", *argv], capture_output=True,
                         text=True, timeout=300, cwd=REPO)  # fmt: skip
    assert res.returncode == 0, res.stderr
    report = json.loads((out / "report.json").read_text())
    evidence = hashlib.sha256((out / "evidence.parquet").read_bytes()).hexdigest()
    assert report["evidence"]["shown"] == 2 and report["evidence"]["sha256"] == evidence
    assert "Showing 2 of 6 flagged pairs" in (out / "report.html").read_text()


def test_the_reproduce_line_rescans_the_same_version_from_a_bare_shell(
    pools_dir, benchmarks_dir, tmp_path
):
    """The report's reproduce line once named ``pool@latest`` and not the data root: from a
    shell without SLUICE_DATA_ROOT it found no catalog, and after the pool was ingested again
    it scanned the new version. It now pins the scanned version and sets the data root."""
    import shlex
    import subprocess
    import sys

    bin_dir = os.path.dirname(sys.executable)
    env = dict(os.environ, SLUICE_DATA_ROOT=str(tmp_path / "root"), HF_HUB_OFFLINE="1",
               SLUICE_BENCHMARKS_DIR=str(benchmarks_dir),
               PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))  # fmt: skip

    def sluice(*argv: str, **kw) -> str:
        p = subprocess.run([os.path.join(bin_dir, "sluice"), *argv], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300, **kw)  # fmt: skip
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout

    sluice("ingest", str(pools_dir / "math_ttrl_aime24_as_train.jsonl"), "--map", "ttrl",
           "--name", "pool")  # fmt: skip
    sluice("decontam", "run", "pool@latest", "--text-field", "problem", "--detectors", "ngram",
           "--benchmarks", "aime24", "--out", "runs/a")  # fmt: skip
    first = json.loads((tmp_path / "runs/a/run.json").read_text())
    sluice("report", "contamination", "runs/a", "--out", "rep")
    line = json.loads((tmp_path / "rep/report.json").read_text())["provenance"]["reproduce"]
    ref = first["input"]["ref"]
    assert f" {ref} " in line and "@latest" not in line, line
    assert f"SLUICE_DATA_ROOT={shlex.quote(str(tmp_path / 'root'))} " in line, line
    # the pool's next version, then the line from another folder, the data root unset
    sluice("ingest", str(pools_dir / "math_ttrl_amc23_as_train.jsonl"), "--map", "ttrl",
           "--name", "pool")  # fmt: skip
    bare = {k: v for k, v in env.items() if k != "SLUICE_DATA_ROOT"}
    p = subprocess.run(["bash", "-c", line], cwd="/", env=bare, capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    again = json.loads((tmp_path / "runs/a/run.json").read_text())
    assert again["input"]["ref"] == ref and again["counts"]["contaminated"] == 30, again["input"]
    assert first["counts"]["contaminated"] == 30


def test_a_folder_holding_a_file_of_the_reports_name_is_not_overwritten(run_dir, tmp_path):
    """`report contamination --out s` replaced a report.md of the user's in s; decontam run's
    --out refuses such folders. A report now writes its files only into a folder where none of
    them is, or that holds a report (finished, or stopped midway: its mark); the folder's other
    files are left alone."""
    mine = tmp_path / "s"
    mine.mkdir()
    (mine / "report.md").write_text("my notes\n")
    with pytest.raises(StorageError, match="holds report.md, which is not part of a report") as e:
        render_report(run_dir, mine)
    assert "move report.md away" in e.value.hint
    assert sorted(p.name for p in mine.iterdir()) == ["report.md"]
    assert (mine / "report.md").read_text() == "my notes\n"
    # other files: the report goes beside them, and its rerun replaces it (no mark left)
    shared = tmp_path / "t"
    shared.mkdir()
    (shared / "notes.txt").write_text("kept\n")
    render_report(run_dir, shared)
    first = (shared / "report.json").read_text()
    render_report(run_dir, shared)
    assert (shared / "notes.txt").read_text() == "kept\n" and (shared / "report.json").read_text()
    assert json.loads(first)["schema_version"] == "contamination_report/1"
    assert not (shared / ".sluice-report").exists()
