"""A problem that two releases of one benchmark carry (LCB v6 repeats v5's items) is one pair
in the report, naming both releases; tiles say what they count."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from decontam.benchmarks import load_benchmark
from decontam.run import run_decontamination
from reports.contamination import render_report

pytestmark = pytest.mark.shared_data


def test_lcb_v5_and_v6_copy_is_one_pair(tmp_path, benchmarks_dir, data_root):
    v5, _ = load_benchmark("lcb_v5", benchmarks_dir=benchmarks_dir, include_variants=False)
    v6, _ = load_benchmark("lcb_v6", benchmarks_dir=benchmarks_dir, include_variants=False)
    only_v6 = sorted(set(v6["item_id"].to_pylist()) - set(v5["item_id"].to_pylist()))
    both = v5.slice(7, 1).to_pylist()[0]
    late = next(r for r in v6.to_pylist() if r["item_id"] == only_v6[0])
    pool = tmp_path / "pool.jsonl"
    rows = [
        {"id": "copy-of-both", "problem": both["text"]},
        {"id": "copy-of-v6-only", "problem": late["text"]},
        {"id": "clean", "problem": "Count the even numbers between 1 and 10 inclusive."},
    ]
    pool.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = run_decontamination(str(pool), text_fields=["problem"], id_field="id",
                              benchmarks=["lcb_v5", "lcb_v6"], detectors=["ngram"],
                              out_dir=tmp_path / "run", benchmarks_dir=benchmarks_dir,
                              publish=False)  # fmt: skip
    assert run.counts["contaminated"] == 2
    paths = render_report(tmp_path / "run", tmp_path / "report")
    rep = json.loads(paths.json.read_text())
    ev = {r["sample_uid"]: r for r in rep["evidence"]["rows"]}
    assert set(ev) == {"copy-of-both", "copy-of-v6-only"}  # one row each, not three
    assert ev["copy-of-both"]["benchmarks"] == ["lcb_v5", "lcb_v6"]
    assert ev["copy-of-both"]["benchmark_item"] == both["item_id"]
    assert ev["copy-of-v6-only"]["benchmarks"] == ["lcb_v6"]
    assert rep["summary"]["flagged_pairs"] == 2
    by_b = {b["benchmark"]: b["flagged"] for b in rep["summary"]["by_benchmark"]}
    assert by_b == {"lcb_v5": 1, "lcb_v6": 2}  # per benchmark, each release still counts
    assert pq.read_table(tmp_path / "report" / "evidence.parquet").num_rows == 2
    html = paths.html.read_text()
    assert "lcb_v5 + lcb_v6" in html
    assert "decided or not" in html  # the "rows with any recorded match" tile says what it counts
    m = ev["copy-of-both"]
    over = [s for s in m["scores"] if s["detector"] in m["detectors_over"]]
    assert m["best_margin"] == pytest.approx(
        max(s["score"] - s["threshold"] for s in over), abs=1e-6
    )
    # no --evaluation: the evaluation shipped with the package, compared with this run
    q = rep["measured_quality"]
    assert q["source"] == "shipped" and q["status"] == "different_configuration"
    # the shipped evaluation also matched against aime24 and aime25, which this run did not
    # check: even ngram alone (same version, same threshold) measured other benchmarks' data
    assert not any(r["applies"] for r in q["metrics"])
    assert "detector embedding was evaluated but is not in this run" in q["differences"]
    assert (
        "benchmarks aime24, aime25 were in the evaluation but are not in this run (it checked "
        "lcb_v5, lcb_v6): its numbers include matches against them"
    ) in q["differences"]
    assert "shipped with Sluice" in html


def test_catalog_input_rows_named_by_source_and_ingest_accounted(
    tmp_path, pools_dir, benchmarks_dir, data_root
):
    """A report an auditor can sign names training rows by their own id, file and row, and
    accounts for every source row of the ingest behind the scanned version. The file's second
    row repeats its first (a duplicate the ingest drops), so a row's place in the scanned
    version is not its row in the file."""
    from curation.catalog import Catalog
    from curation.ingest import ingest

    cat = Catalog(data_root)
    lines = (pools_dir / "math_ttrl_aime24_as_train.jsonl").read_text().splitlines(True)[:5]
    pool = tmp_path / "math_ttrl_aime24_as_train.jsonl"
    pool.write_text("".join([lines[0], *lines]))
    file_row: dict[str, int] = {}  # each id's first row in the file
    for i, line in enumerate(pool.read_text().splitlines(), start=1):
        file_row.setdefault(json.loads(line)["id"], i)
    res = ingest(str(pool), field_map="ttrl", name="ttrl", catalog=cat)
    run_decontamination(res.ref, text_fields=["problem"], benchmarks=["aime24"],
                        detectors=["ngram"], out_dir=tmp_path / "run",
                        benchmarks_dir=benchmarks_dir, catalog=cat)  # fmt: skip
    paths = render_report(tmp_path / "run", tmp_path / "report")
    rep = json.loads(paths.json.read_text())
    rows = rep["evidence"]["rows"]
    src = {r["uid"]: r for r in cat.load(res.ref).to_pylist()}
    assert len(rows) == 5
    for e in rows:
        assert e["source_id"] == src[e["sample_uid"]]["source_id"] and e["source_id"]
        assert e["source_file"] == "math_ttrl_aime24_as_train.jsonl"
        assert e["source_row"] == file_row[e["source_id"]], e
    assert sorted(e["source_row"] for e in rows) == [1, 3, 4, 5, 6]
    ev = pq.read_table(tmp_path / "report" / "evidence.parquet").to_pylist()
    assert {r["source_row"] for r in ev} == {e["source_row"] for e in rows}
    ing = rep["provenance"]["input"]["ingest"]
    assert ing["ref"] == res.ref and ing["counts"]["read"] == 6
    assert ing["counts"]["accepted"] == 5 and ing["counts"]["duplicates"] == 1
    html = paths.html.read_text()
    assert "read 6 = accepted 5 + duplicates 1 + rejected 0" in html
    assert f"row {rows[0]['source_row']}" in html
