"""SFT build on real R1-distill traces (thought-anchors, 153 MATH problems): truncation,
verification against the source's own grade, and response decontamination with a planted
AIME 2024 problem inside the thinking."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from curation.catalog import Catalog
from curation.errors import InputError
from curation.ingest import ingest
from sft_generation.build import build_sft, rows_from_sft_samples
from sft_generation.config import FilterConfig

pytestmark = pytest.mark.shared_data

TRACES = "sft_r1distill_math_traces_thoughtanchors.jsonl"


@pytest.fixture()
def traces(pools_dir, data_root):
    cat = Catalog(data_root)
    res = ingest(
        str(pools_dir / TRACES), field_map="thoughtanchors_r1_traces", name="ta", catalog=cat
    )
    return cat, res.ref


def _few(pools_dir, data_root, tmp_path):
    """The first 4 real R1 traces ingested as ``few``: (the catalog, the version's ref)."""
    raw = [json.loads(line) for line in open(pools_dir / TRACES)][:4]
    src = tmp_path / "few.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in raw))
    cat = Catalog(data_root)
    return cat, ingest(str(src), field_map="thoughtanchors_r1_traces", name="few", catalog=cat).ref


def test_truncated_traces_are_dropped_as_truncated(traces, tmp_path, pools_dir):
    cat, ref = traces
    raw = [json.loads(line) for line in open(pools_dir / TRACES)]
    # the oracle: a trace is cut off when the solution text has no closing tag
    cut = {r["problem_idx"] for r in raw if "</think>" not in r["solutions"][0]["solution"]}
    assert len(cut) == 9
    rows = rows_from_sft_samples(cat.load(ref), source=ref)
    res = build_sft(rows, name="ta", out_dir=tmp_path / "run", parents=[ref], catalog=cat)
    out = pq.read_table(tmp_path / "run" / "responses.parquet").to_pylist()
    dropped_trunc = {
        json.loads(r["metadata"])["problem_idx"]
        for r in out
        if (r["drop_reason"] or "").startswith("truncated:")
    }
    assert dropped_trunc == cut
    assert res.counts["filters"]["dropped"]["truncated"] == 9
    f = res.counts["filters"]
    assert f["rows_in"] == f["kept"] + sum(f["dropped"].values()) == 153
    # verification outcomes for every row, none silently missing
    assert sum(res.counts["verification"].values()) == 153


def test_verifier_agrees_with_source_where_it_should(traces, tmp_path):
    """Where we disagree with the source's loose `is_correct`, the run records it; every trace the
    source calls correct we call correct too (our verifier is not stricter on real answers)."""
    cat, ref = traces
    rows = rows_from_sft_samples(cat.load(ref), source=ref)
    res = build_sft(rows, name="ta", out_dir=tmp_path / "run", catalog=cat, publish=False)
    vs = res.counts["verification_vs_source"]
    assert vs["compared"] == 153
    assert vs["source_correct_we_not"] == []
    # the disagreements are the source's misses of equivalent answers (6.2 vs "r=6.2", ...)
    assert 0 < len(vs["we_correct_source_not"]) <= 20
    for d in vs["we_correct_source_not"]:
        assert d["reference"] and d["extracted"]


def test_planted_aime_problem_in_thinking_is_flagged_with_its_span(
    traces, tmp_path, benchmarks_dir
):
    from decontam.benchmarks import load_benchmark

    cat, ref = traces
    items, _ = load_benchmark("aime24", benchmarks_dir=benchmarks_dir, include_variants=False)
    item = items.slice(3, 1).to_pylist()[0]
    rows = rows_from_sft_samples(cat.load(ref), source=ref)
    target = next(r for r in rows if not r["truncated"] and len(r["reasoning"]) > 3000)
    cut = len(target["reasoning"]) // 2
    planted = f" This reminds me of a problem I saw: {item['text']} Anyway, back to ours. "
    target["reasoning"] = target["reasoning"][:cut] + planted + target["reasoning"][cut:]
    target["response"] = target["reasoning"] + "\n</think>\n\n" + target["final_answer"]
    res = build_sft(rows, name="ta", out_dir=tmp_path / "run", catalog=cat)
    out = {r["uid"]: r for r in pq.read_table(tmp_path / "run" / "responses.parquet").to_pylist()}
    assert out[target["uid"]]["drop_reason"].startswith("contaminated:")
    assert res.counts["filters"]["dropped"]["contaminated"] == 1  # only the planted one
    m = pq.read_table(tmp_path / "run" / "response_decontam" / "matches.parquet").to_pylist()
    hits = [x for x in m if x["sample_uid"] == target["uid"] and x["detector"] == "ngram"]
    assert hits and {h["benchmark"] for h in hits} == {"aime24"}
    h = max(hits, key=lambda x: x["score"])
    assert h["field"] == "reasoning" and h["benchmark_item"] == item["item_id"]
    start = cut + planted.index(item["text"])
    end = start + len(item["text"])
    spans = h["spans"]
    assert min(s["sample_start"] for s in spans) <= start + 40
    assert max(s["sample_end"] for s in spans) >= end - 40
    assert all(start - 40 <= s["sample_start"] and s["sample_end"] <= end + 40 for s in spans)


def test_a_numeric_reference_answer_is_text(pools_dir, data_root, tmp_path):
    """A source that ships ``gt_answer`` as the int 8 builds like one that ships "8"."""
    raw = [json.loads(line) for line in open(pools_dir / TRACES)][:3]
    raw = [r for r in raw if "</think>" in r["solutions"][0]["solution"]]
    raw[0]["gt_answer"] = int(raw[0]["gt_answer"])
    src = tmp_path / "numeric.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in raw))
    cat = Catalog(data_root)
    ref = ingest(str(src), field_map="thoughtanchors_r1_traces", name="num", catalog=cat).ref
    rows = rows_from_sft_samples(cat.load(ref), source=ref)
    assert rows[0]["reference_answer"] == str(raw[0]["gt_answer"])
    res = build_sft(rows, name="num", out_dir=tmp_path / "run", catalog=cat,
                    filters=FilterConfig(decontaminate=False))  # fmt: skip
    out = pq.read_table(tmp_path / "run" / "responses.parquet").to_pylist()
    first = next(r for r in out if r["uid"] == rows[0]["uid"])
    assert (
        first["reference_answer"] == str(raw[0]["gt_answer"]) and first["verification"] == "correct"
    )
    assert res.counts["filters"]["rows_in"] == len(raw)


def test_build_options_are_checked_and_an_empty_set_is_refused(
    pools_dir, data_root, tmp_path, capsys
):
    """`sluice sft build`: bad filter options and a missing --config are one error line; filters
    that keep nothing publish nothing; `sft export` of an empty set is refused."""
    import pyarrow as pa

    from flows.cli import main
    from sft_generation.build import SFT_SET_SCHEMA

    cat, ref = _few(pools_dir, data_root, tmp_path)
    base = ["sft", "build", ref, "--out", str(tmp_path / "run"), "--no-decontam"]
    before = cat.datasets()
    for extra, msg in (
        (["--max-tokens", "0"], "max_response_tokens (--max-tokens) must be a whole number >= 1"),
        (["--min-chars", "-5"], "min_response_chars (--min-chars) must be a whole number >= 0"),
        (["--config", str(tmp_path / "nope.toml")], "nope.toml' not found"),
        (["--max-chars", "10"], "the filters kept no response of 4"),
    ):
        with pytest.raises(SystemExit) as e:
            main([*base, *extra])
        err = capsys.readouterr().err
        assert e.value.code == 2 and msg in err, (extra, err)
        assert "Traceback" not in err
    assert cat.datasets() == before
    empty = cat.publish("few.sft.all", pa.table({f.name: [] for f in SFT_SET_SCHEMA},
                                                schema=SFT_SET_SCHEMA)).ref  # fmt: skip
    with pytest.raises(SystemExit) as e:
        main(["sft", "export", empty, "--out", str(tmp_path / "x.parquet")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "has no rows: nothing to export" in err, err
    assert not (tmp_path / "x.parquet").exists()


def test_explicit_filter_options_win_over_the_config_file(pools_dir, data_root, tmp_path):
    """`sluice sft build --config F --max-chars 10 --keep all`: the options given on the command
    line were silently ignored as soon as --config was there (the build kept every trace); they
    now override the file's [sft.filters], and what the file sets is kept otherwise."""
    import os
    import subprocess
    import sys

    cat, ref = _few(pools_dir, data_root, tmp_path)
    cfg = tmp_path / "sft.toml"
    cfg.write_text("[sft.filters]\ndecontaminate = false\nnear_dup_threshold = 0.95\n")
    cmd = [sys.executable, "-c", "from flows.cli import run; run()", "sft", "build", ref,
           "--config", str(cfg), "--root", str(data_root)]  # fmt: skip
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    r = subprocess.run([*cmd, "--out", str(tmp_path / "a"), "--max-chars", "10"],
                       env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 2 and "the filters kept no response of 4" in r.stderr, r.stderr
    r = subprocess.run([*cmd, "--out", str(tmp_path / "b"), "--keep", "all", "--max-chars",
                        "1000000"], env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    used = json.loads((tmp_path / "b" / "run.json").read_text())["config"]["filters"]
    assert used["keep_policy"] == "all" and used["max_response_chars"] == 1000000
    assert used["decontaminate"] is False and used["near_dup_threshold"] == 0.95  # from the file


def test_a_pool_that_is_not_the_responses_pool_is_refused(pools_dir, data_root, tmp_path):
    """`sft build TRACES --pool X`: a --pool that is not a problem pool (an SFT set) or that holds
    none of the responses' problems (GSM8K for MATH traces) was accepted silently and recorded as
    the set's lineage parent; each is one error line and nothing is published."""
    import os
    import subprocess
    import sys

    raw = [json.loads(line) for line in open(pools_dir / TRACES)][:4]
    src = tmp_path / "few.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in raw))
    gsm = tmp_path / "gsm.jsonl"
    with open(pools_dir / "math_gsm8k_train.jsonl", encoding="utf-8") as f:
        gsm.write_text("".join(line for _, line in zip(range(5), f, strict=False)))
    cat = Catalog(data_root)
    ref = ingest(str(src), field_map="thoughtanchors_r1_traces", name="few", catalog=cat).ref
    gsm_ref = ingest(str(gsm), field_map="gsm8k", name="gsm", catalog=cat).ref
    rows = rows_from_sft_samples(cat.load(ref), source=ref)
    sft_set = build_sft(rows, name="few", out_dir=tmp_path / "run0", catalog=cat,
                        filters=FilterConfig(decontaminate=False)).grid[0]["ref"]  # fmt: skip
    before = cat.datasets()
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}
    for pool, msg in (
        (sft_set, "is not a problem pool"),
        (gsm_ref, "holds none of the 4 responses' problems"),
    ):
        r = subprocess.run(
            [sys.executable, "-c", "from flows.cli import run; run()", "sft", "build", ref,
             "--pool", pool, "--no-decontam", "--out", str(tmp_path / "r"),
             "--root", str(data_root)],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert r.returncode == 2, (pool, r.stderr)
        assert msg in r.stderr and "Traceback" not in r.stderr, (pool, r.stderr)
    assert cat.datasets() == before


def test_unknown_benchmark_or_detector_is_refused_before_grading(
    pools_dir, data_root, tmp_path, capsys
):
    """`sluice sft build --benchmarks aime2099` (or `--detectors ngarm`) graded every response
    (sandbox work on a code pool) before the names were checked; now the names are checked
    first, like `sluice decontam run` does, and nothing is graded or written."""
    from flows.cli import main

    cat, ref = _few(pools_dir, data_root, tmp_path)
    out = tmp_path / "run"
    for extra, msg in (
        (["--benchmarks", "aime2099"], "unknown benchmark 'aime2099'"),
        (["--detectors", "ngarm"], "unknown detector 'ngarm'"),
    ):
        with pytest.raises(SystemExit) as e:
            main(["sft", "build", ref, "--out", str(out), "--root", str(data_root), *extra])
        err = capsys.readouterr().err
        assert e.value.code == 2 and msg in err, (extra, err)
        assert "grading" not in err and "Traceback" not in err, err
        assert not out.exists()


def test_marco_o1_traces_keep_the_thinking_and_answer_their_map_splits(pools_dir, data_root,
                                                                        tmp_path):  # fmt: skip
    """The shipped `marco_o1_sft` map splits each response into `reasoning` (<Thought>) and
    `final_answer` (<Output>), but the build re-split the raw response at `</think>`, which a
    Marco-o1 trace never has: every one of the 125 traces was called truncated and
    `sluice sft build marco@latest --keep all` published nothing. The map's split is used."""
    cat = Catalog(data_root)
    ref = ingest(str(pools_dir / "sft_marco_o1_cot_demo.jsonl"), field_map="marco_o1_sft",
                 name="marco", catalog=cat).ref  # fmt: skip
    raw = [json.loads(line) for line in open(pools_dir / "sft_marco_o1_cot_demo.jsonl")]
    rows = rows_from_sft_samples(cat.load(ref), source=ref)
    assert len(rows) == 125 and not any(r["truncated"] for r in rows)
    by_prompt = {r["prompt"]: r for r in rows}
    for src in raw[:10]:  # the oracle: the text between the tags of the source response
        r = by_prompt[src["instruction"]]
        thought = src["response"].split("<Thought>", 1)[1].split("</Thought>", 1)[0].strip()
        output = src["response"].split("<Output>", 1)[1].split("</Output>", 1)[0].strip()
        assert r["reasoning"] == thought and r["final_answer"] == output
    cfg = FilterConfig(keep_policy="all", check_format=False, decontaminate=False,
                       near_dup_threshold=None)  # fmt: skip
    res = build_sft(rows, name="marco", out_dir=tmp_path / "run", catalog=cat, parents=[ref],
                    filters=cfg)  # fmt: skip
    f = res.counts["filters"]
    assert f["dropped"]["truncated"] == 0 and res.counts["kept"] > 100
    assert f["rows_in"] == res.counts["kept"] + sum(f["dropped"].values()) == 125


def _two_traces_each(pools_dir, tmp_path):
    """4 real R1 traces that close their thinking, each with a second trace of its prompt (one
    more sentence before </think>): a JSONL file of 8 traces of 4 prompts."""
    raw = [json.loads(line) for line in open(pools_dir / TRACES)]
    ok = [r for r in raw if "</think>" in r["solutions"][0]["solution"]][:4]
    rows_out = []
    for r in ok:
        again = json.loads(json.dumps(r))
        sol = again["solutions"][0]["solution"]
        cut = sol.index("</think>")
        again["solutions"][0]["solution"] = (
            sol[:cut] + " Let me check that once more from the start; it holds.\n" + sol[cut:]
        )
        rows_out += [r, again]
    src = tmp_path / "two.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows_out))
    return src


def test_several_traces_of_one_prompt_keep_their_own_uids(pools_dir, data_root, tmp_path):
    """Two traces of one problem imported together (every thought-anchors trace has seed 0)
    got the same response uid: the build stopped at response decontamination with 'duplicate
    id' in a temp file of its own, and with --no-decontam it published 8 rows under 4 uids.
    Each trace keeps its own uid; the grid takes both responses of a prompt."""
    src = _two_traces_each(pools_dir, tmp_path)
    cat = Catalog(data_root)
    ref = ingest(str(src), field_map="thoughtanchors_r1_traces", name="two", catalog=cat).ref
    rows = rows_from_sft_samples(cat.load(ref), source=ref)
    assert len(rows) == 8 and len({r["uid"] for r in rows}) == 8
    assert rows_from_sft_samples(cat.load(ref), source=ref)[3]["uid"] == rows[3]["uid"]  # stable
    cfg = FilterConfig(keep_policy="all", near_dup_threshold=None, decontam_benchmarks=["aime24"])
    res = build_sft(rows, name="two", out_dir=tmp_path / "run", catalog=cat, parents=[ref],
                    filters=cfg, prompts=[4], responses=[2])  # fmt: skip
    assert res.counts["kept"] == 8 and res.grid[0]["rows"] == 8
    cell = cat.load(res.grid[0]["ref"])
    assert len(set(cell["uid"].to_pylist())) == 8
    out = pq.read_table(tmp_path / "run" / "responses.parquet")
    assert len(set(out["uid"].to_pylist())) == out.num_rows == 8


def test_grid_cells_a_scaling_study_would_misread_are_named(pools_dir, data_root, tmp_path, capsys):
    """`sft build --prompts 2,4,10 --responses 1,2,3` on 4 prompts with 2 kept traces each:
    p10 holds the 4 prompts there are, and p4/p10, r2/r3 are the same rows under other names.
    Each is said (CLI warning lines, run.json, the report's grid), not left for a scaling plot
    to misread; every cell is still published."""
    from flows.cli import main

    src = _two_traces_each(pools_dir, tmp_path)
    cat = Catalog(data_root)
    ref = ingest(str(src), field_map="thoughtanchors_r1_traces", name="two", catalog=cat).ref
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(["sft", "build", ref, "--out", str(out), "--no-decontam", "--keep", "all",
              "--prompts", "2,4,10", "--responses", "1,2,3", "--near-dup", "0",
              "--root", str(data_root)])  # fmt: skip
    assert e.value.code in (0, None)
    err = capsys.readouterr().err
    warnings = [ln for ln in err.splitlines() if ln.startswith("warning: ")]
    assert any("grid cell p10.r1 asks for 10 prompts; 4 have a kept response" in w
               for w in warnings), err  # fmt: skip
    assert any("grid cells p4.r1 and p10.r1 hold the same 4 rows" in w for w in warnings), err
    assert any("grid cells p2.r2 and p2.r3 hold the same 4 rows" in w for w in warnings), err
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["warnings"] == [w.removeprefix("warning: ") for w in warnings]
    same = {(g["prompts"], g["responses_per_prompt"]): g["same_rows_as"] for g in manifest["grid"]}
    assert same[(2, 1)] is None and same[(10, 3)] == "p4.r2" and same[(4, 3)] == "p4.r2"
    assert all(g["ref"] for g in manifest["grid"]) and len(manifest["grid"]) == 9
    html = next(out.glob("**/sft_report.html")).read_text()
    assert "hold the same 4 rows" in html and "asks for 10 prompts" in html


def test_a_bad_name_is_refused_before_grading(pools_dir, data_root, tmp_path, capsys):
    """`sluice sft build TRACES --name "my set"` graded (and, on a code pool, ran every program
    in the sandbox) before publishing 'my set.sft_responses' failed; a name whose grid cells
    are too long (NAME.sft.p10000.r16) failed after NAME.sft_responses was published. Every
    name the build publishes is checked first: nothing graded, nothing published."""
    from flows.cli import main

    cat, ref = _few(pools_dir, data_root, tmp_path)
    before = cat.datasets()
    out = tmp_path / "run"
    for extra, msg in (
        (["--name", "my set"], "invalid dataset name 'my set'"),
        (["--name", "a" * 186, "--prompts", "10000", "--responses", "16"],
         "dataset name too long"),
    ):  # fmt: skip
        with pytest.raises(SystemExit) as e:
            main(["sft", "build", ref, "--out", str(out), "--no-decontam", "--root",
                  str(data_root), *extra])  # fmt: skip
        err = capsys.readouterr().err
        assert e.value.code == 2 and msg in err, (extra, err)
        assert "grading" not in err and "Traceback" not in err and "--name" in err, err
        assert not out.exists()
    assert cat.datasets() == before


def test_majority_keeps_the_agreeing_answers_of_traces_without_a_reference(
    pools_dir, data_root, tmp_path
):
    """`--keep majority` is the policy for pools without reference answers, but an answer was
    only extracted by the verifier, which runs only when there is a reference: every response
    had no extracted answer and `sluice sft build --keep majority` kept nothing. The final
    answer is extracted either way; a prompt's odd answer out is dropped."""
    from curation.fieldmaps import maps_dir

    raw = [json.loads(line) for line in open(pools_dir / TRACES)]
    ok = [r for r in raw if "</think>" in r["solutions"][0]["solution"]][:3]
    for r in ok:
        del r["gt_answer"]  # a source without references
    first = ok[0]["solutions"][0]["solution"]
    cut = first.index("</think>")
    same = json.loads(json.dumps(ok[0]))
    same["solutions"][0]["solution"] = first[:cut] + " Checked again.\n" + first[cut:]
    odd = json.loads(json.dumps(ok[0]))
    head, _, _ = first.rpartition("\\boxed{")
    odd["solutions"][0]["solution"] = head + "\\boxed{987654}$."
    src = tmp_path / "noref.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in [*ok, same, odd]))
    shipped = (maps_dir() / "thoughtanchors_r1_traces.toml").read_text()
    fmap = tmp_path / "noref.toml"
    fmap.write_text(shipped.replace('reference_answer = "gt_answer"\n', ""))
    cat = Catalog(data_root)
    ref = ingest(str(src), field_map=str(fmap), name="noref", catalog=cat).ref
    rows = rows_from_sft_samples(cat.load(ref), source=ref)
    assert all(r["reference_answer"] is None for r in rows) and len(rows) == 5
    cfg = FilterConfig(keep_policy="majority", decontaminate=False, near_dup_threshold=None)
    res = build_sft(rows, name="noref", out_dir=tmp_path / "run", catalog=cat, filters=cfg)
    out = pq.read_table(tmp_path / "run" / "responses.parquet").to_pylist()
    assert all(r["extracted"] for r in out)
    dropped = [r for r in out if r["drop_reason"]]
    assert len(dropped) == 1 and "987654" in dropped[0]["extracted"]
    assert dropped[0]["drop_reason"].startswith("keep_policy:")
    assert res.counts["kept"] == 4


def test_the_responses_and_the_grid_are_published_together_or_not_at_all(
    pools_dir, data_root, tmp_path, monkeypatch
):
    """The build published NAME.sft_responses, then each grid cell, one at a time: a disk that
    filled up (or a kill) between them left NAME.sft_responses@new beside cells of the previous
    build, or none. They are one catalog commit: a failure while writing any cell publishes
    nothing; the rerun publishes all, each cell's parent being the responses version."""
    from curation.catalog import Catalog as Cat
    from curation.errors import StorageError

    raw = [json.loads(line) for line in open(pools_dir / TRACES)][:6]
    src = tmp_path / "few.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in raw))
    cat = Catalog(data_root)
    ref = ingest(str(src), field_map="thoughtanchors_r1_traces", name="few", catalog=cat).ref
    rows = rows_from_sft_samples(cat.load(ref), source=ref)
    before = set(cat.datasets())
    real, calls = Cat._write_object, []

    def full_disk(self, schema, batches):  # the third object: the second grid cell
        calls.append(1)
        if len(calls) == 3:
            raise StorageError("cannot write the object: no space left on the device")
        return real(self, schema, batches)

    cfg = FilterConfig(keep_policy="all", decontaminate=False)
    monkeypatch.setattr(Cat, "_write_object", full_disk)
    with pytest.raises(StorageError):
        build_sft([dict(r) for r in rows], name="few", out_dir=tmp_path / "run", catalog=cat,
                  parents=[ref], filters=cfg, prompts=[2, 4], responses=[1])  # fmt: skip
    assert set(cat.datasets()) == before  # nothing of this build is visible
    monkeypatch.setattr(Cat, "_write_object", real)
    res = build_sft([dict(r) for r in rows], name="few", out_dir=tmp_path / "run", catalog=cat,
                    parents=[ref], filters=cfg, prompts=[2, 4], responses=[1])  # fmt: skip
    assert {g["prompts"] for g in res.grid} == {2, 4}
    for g in res.grid:
        assert cat.resolve(g["ref"]).parents == (res.responses_ref,)
    assert cat.resolve(res.responses_ref).parents == (ref,)


def test_a_rebuild_without_decontamination_leaves_no_stale_evidence(pools_dir, data_root,
                                                                     tmp_path):  # fmt: skip
    """Rebuilding into the same --out with --no-decontam left the previous build's
    response_decontam/ (matches, decisions) and response_report/ in the run directory, beside a
    run.json that says decontamination was off: evidence of another build, read as this one's.
    The build removes what an earlier SFT build wrote there, and nothing else."""
    from sft_generation.runs import build_from_ref

    cat, ref = _few(pools_dir, data_root, tmp_path)
    run = tmp_path / "run"
    build_from_ref(ref, out_dir=run, catalog=cat,
                   filters=FilterConfig(keep_policy="all", decontam_benchmarks=["aime24"]))  # fmt: skip
    assert (run / "response_decontam" / "matches.parquet").is_file()
    assert (run / "response_report" / "report.html").is_file()
    (run / "notes").mkdir()  # the user's own folder stays
    res = build_from_ref(ref, out_dir=run, catalog=cat,
                         filters=FilterConfig(keep_policy="all", decontaminate=False))  # fmt: skip
    assert res.manifest["response_decontam"] is None
    assert not (run / "response_decontam").exists() and not (run / "response_report").exists()
    assert (run / "notes").is_dir() and (run / "sft_report.html").is_file()


def test_a_rebuild_that_stops_leaves_no_finished_looking_folder(pools_dir, data_root, tmp_path):
    """A rebuild into an earlier build's --out replaced responses.parquet first and run.json
    last: one that stopped in between (here refused: its filters keep nothing) left the earlier
    build's run.json and report beside the new responses, and the folder read as a finished
    build of the earlier config. It now has no run.json until the build has finished."""
    from sft_generation.runs import build_from_ref

    cat, ref = _few(pools_dir, data_root, tmp_path)
    run = tmp_path / "run"
    build_from_ref(ref, out_dir=run, catalog=cat, filters=FilterConfig(decontaminate=False))
    assert (run / "run.json").is_file() and (run / "sft_report.html").is_file()
    with pytest.raises(InputError, match="the filters kept no response of 4"):
        build_from_ref(ref, out_dir=run, catalog=cat,
                       filters=FilterConfig(decontaminate=False, max_response_chars=10))  # fmt: skip
    reasons = pq.read_table(run / "responses.parquet").column("drop_reason").to_pylist()
    assert all(reasons) and len(reasons) == 4  # the refused build's rows, to read why
    assert not (run / "run.json").exists() and not (run / "sft_report.html").exists()
    assert not (run / "sft_report.json").exists()


@pytest.mark.parametrize(
    ("change", "msg"),
    [
        # a source's seed that is a run name: ValueError traceback from int()
        (lambda r: r["solutions"][0].update(seed="run-7"),
         "row 1, field 'metadata.seed': expected a whole number"),
        (lambda r: r["solutions"][0].update(seed=2.5),
         "row 1, field 'metadata.seed': expected a whole number"),
        # several reference answers: ArrowTypeError traceback when the rows were tabled
        (lambda r: r.update(gt_answer=["3", "4"]),
         "row 1, field 'metadata.reference_answer': expected one answer"),
    ],
)  # fmt: skip
def test_imported_trace_values_of_the_wrong_shape_are_one_error(
    pools_dir, data_root, tmp_path, capsys, change, msg
):
    from flows.cli import main

    raw = [json.loads(line) for line in open(pools_dir / TRACES)][:3]
    change(raw[1])
    src = tmp_path / "odd.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in raw))
    cat = Catalog(data_root)
    ref = ingest(str(src), field_map="thoughtanchors_r1_traces", name="odd", catalog=cat).ref
    # the ingested row order is the source's; the error names the dataset, row and field
    with pytest.raises(SystemExit) as e:
        main(["sft", "build", ref, "--out", str(tmp_path / "run"), "--no-decontam",
              "--root", str(data_root)])  # fmt: skip
    err = capsys.readouterr().err
    assert e.value.code == 2 and msg in err and ref in err, err
    assert "Traceback" not in err and "grading" not in err, err


def test_a_one_element_reference_list_is_its_answer(pools_dir, data_root, tmp_path):
    raw = [json.loads(line) for line in open(pools_dir / TRACES)][:3]
    raw = [r for r in raw if "</think>" in r["solutions"][0]["solution"]]
    raw[0]["gt_answer"] = [raw[0]["gt_answer"]]
    src = tmp_path / "one.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in raw))
    cat = Catalog(data_root)
    ref = ingest(str(src), field_map="thoughtanchors_r1_traces", name="one", catalog=cat).ref
    rows = rows_from_sft_samples(cat.load(ref), source=ref)
    assert rows[0]["reference_answer"] == raw[0]["gt_answer"][0]


def test_a_set_built_with_other_filters_records_its_own_config(pools_dir, data_root, tmp_path):
    """Two builds of the same traces, the first without response decontamination and the second
    with it, kept the same rows: the second published the first's versions, whose catalog
    record (config) says `decontaminate: false`: the set checked against AIME was recorded as
    never checked. Each build's config is part of what it publishes, so each records its own;
    an unchanged rebuild still publishes the same versions."""
    cat, ref = _few(pools_dir, data_root, tmp_path)
    rows = rows_from_sft_samples(cat.load(ref), source=ref)

    def build(cfg, out):
        return build_sft([dict(r) for r in rows], name="few", out_dir=tmp_path / out,
                         catalog=cat, parents=[ref], filters=cfg)  # fmt: skip

    off = build(FilterConfig(keep_policy="all", decontaminate=False), "a")
    on = build(FilterConfig(keep_policy="all", decontam_benchmarks=["aime24"]), "b")
    assert (
        on.counts["kept"] == off.counts["kept"]
        and on.counts["filters"]["dropped"]["contaminated"] == 0
    )
    for res, checked in ((off, False), (on, True)):
        for r in (res.responses_ref, res.grid[0]["ref"]):
            assert cat.resolve(r).config["filters"]["decontaminate"] is checked, r
    assert on.grid[0]["ref"] != off.grid[0]["ref"]
    assert (
        cat.load(on.grid[0]["ref"])["uid"].to_pylist()
        == cat.load(off.grid[0]["ref"])["uid"].to_pylist()
    )
    again = build(FilterConfig(keep_policy="all", decontam_benchmarks=["aime24"]), "c")
    assert again.grid[0]["ref"] == on.grid[0]["ref"]
    assert again.responses_ref == on.responses_ref


def test_a_map_that_splits_out_only_the_thinking_keeps_the_answer_after_think(
    pools_dir, data_root, tmp_path
):
    """A map that fills `reasoning` alone (here: the text before `</think>`) still gets the
    answer after `</think>` from the response; only what the map gives replaces the split."""
    from curation.fieldmaps import maps_dir

    raw = [json.loads(line) for line in open(pools_dir / TRACES)][:4]
    src = tmp_path / "few.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in raw))
    shipped = (maps_dir() / "thoughtanchors_r1_traces.toml").read_text()
    fmap = tmp_path / "think_only.toml"
    fmap.write_text(shipped.replace(
        "[metadata]",
        'reasoning = { path = "solutions[0].solution", extract = "regex:<think>\\\\n(.*?)</think>" }'
        "\n\n[metadata]",
    ))  # fmt: skip
    cat = Catalog(data_root)
    ref = ingest(str(src), field_map=str(fmap), name="tonly", catalog=cat).ref
    base = ingest(str(src), field_map="thoughtanchors_r1_traces", name="base", catalog=cat).ref
    got = rows_from_sft_samples(cat.load(ref), source=ref)
    want = rows_from_sft_samples(cat.load(base), source=base)
    assert [r["final_answer"] for r in got] == [r["final_answer"] for r in want]
    assert [r["truncated"] for r in got] == [r["truncated"] for r in want]
    closed = [r for r in got if not r["truncated"]]
    assert closed and all(r["final_answer"] and r["reasoning"] for r in closed)


def test_a_build_without_a_grid_names_the_set_it_publishes(pools_dir, data_root, tmp_path, capsys):
    """`sluice sft build ta@latest --out DIR` (docs/sft.md's external traces) printed
    `grid p=None r=None: 135 rows ta.sft.all@...`: no grid was asked for. It now says the one
    set holds every kept response, under the name the export takes."""
    from flows.cli import main

    src = _two_traces_each(pools_dir, tmp_path)
    cat = Catalog(data_root)
    ref = ingest(str(src), field_map="thoughtanchors_r1_traces", name="two", catalog=cat).ref
    with pytest.raises(SystemExit) as e:
        main(["sft", "build", ref, "--out", str(tmp_path / "run"), "--no-decontam", "--keep",
              "all", "--near-dup", "0", "--root", str(data_root)])  # fmt: skip
    assert e.value.code in (0, None)
    err = capsys.readouterr().err
    assert "p=None" not in err, err
    set_ref = cat.resolve("two.sft.all@latest").ref
    assert f"  all kept responses (no --prompts/--responses grid): 8 rows {set_ref}" in err, err
