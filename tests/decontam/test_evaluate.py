"""Evaluation on labelled data: metric oracles, calibration, outputs, and the CLI."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from semantic_data import cache_root, dev_slice, small_benchmarks

from curation.errors import InputError
from decontam.evaluate import (
    EvalConfig,
    calibrate,
    evaluate,
    load_labels,
    metrics,
    write_outputs,
)
from decontam.policy import PolicyConfig


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _row(uid, label, kind, item=None, domain="math"):
    return {"uid": uid, "domain": domain, "field": "problem", "text": f"text {uid}",
            "label": label, "kind": kind, "benchmark": "aime24" if item else None,
            "benchmark_item": item, "note": ""}  # fmt: skip


LABELS = [
    _row("p1", "contaminated", "verbatim", "2024-I-1"),
    _row("p2", "contaminated", "paraphrase", "2024-I-2"),
    _row("p3", "contaminated", "paraphrase", "2024-I-3"),
    _row("n1", "clean", "pool"),
    _row("n2", "clean", "lookalike"),
    _row("n3", "clean", "near_miss"),
    _row("n4", "clean", "pool"),
]


def test_bad_label_rows_name_file_row_and_field(tmp_path):
    bad = dict(LABELS[0])
    del bad["text"]
    with pytest.raises(InputError, match=r"row 2.*'text'"):
        load_labels(_write(tmp_path / "l.jsonl", [LABELS[1], bad]))
    with pytest.raises(InputError, match="label"):
        load_labels(_write(tmp_path / "l.jsonl", [{**LABELS[0], "label": "dirty"}]))
    with pytest.raises(InputError, match="duplicate uid"):
        load_labels(_write(tmp_path / "l.jsonl", [LABELS[0], LABELS[0]]))


def test_metrics_item_vs_row_level():
    # p1 right item, p2 flagged on the wrong item, p3 missed; n2 is a false positive
    flags = {"p1": {"2024-I-1"}, "p2": {"2024-I-9"}, "n2": {"2024-I-5"}}
    m = metrics(flags, LABELS)
    assert m["row"]["tp"] == 2 and m["row"]["recall"] == round(2 / 3, 4)
    assert m["item"]["tp"] == 1 and m["item"]["recall"] == round(1 / 3, 4)
    assert m["item"]["fp"] == 2  # n2 plus the wrong-item hit on p2
    assert m["recall_by_kind"]["paraphrase"] == {"n": 2, "row": 0.5, "item": 0.0}
    assert m["fpr_by_kind"]["lookalike"] == {"n": 1, "fp": 1, "fpr": 1.0}
    assert m["fpr_by_kind"]["pool"]["fp"] == 0
    assert m["fpr_by_kind"]["lookalike+near_miss"]["fpr"] == 0.5
    assert m["fpr_by_kind"]["all_clean"]["fpr"] == 0.25


def _scores(rows):
    return pa.Table.from_pylist(
        [{"uid": u, "domain": "math", "kind": "", "label": lab, "benchmark_item": it,
          "detector": d, "best_score": s, "best_item": it, "label_item_score": s if it else 0.0}
         for u, lab, it, d, s in rows]
    )  # fmt: skip


def test_calibration_respects_the_false_positive_budget():
    labels = [_row(f"p{i}", "contaminated", "edit", f"I-{i}") for i in range(4)] + [
        _row(f"n{i}", "clean", "pool") for i in range(100)
    ]
    rows = [(f"p{i}", "contaminated", f"I-{i}", "a", s) for i, s in enumerate([0.9, 0.8, 0.7, 0.4])]
    rows += [(f"n{i}", "clean", None, "a", 0.75 if i == 0 else 0.1) for i in range(100)]
    # target 1 % of 100 clean rows: one false positive may be admitted (n0 at 0.75); the next
    # clean score (0.1, 99 rows) must stay out, so every positive is caught and the threshold
    # sits midway between 0.1 and the lowest flagged positive (0.4)
    thr = calibrate(_scores(rows), labels, ["a"], target_fpr=0.01)
    assert thr["a"] == 0.25
    strict = calibrate(_scores(rows), labels, ["a"], target_fpr=0.0)
    assert strict["a"] > 0.75  # no false positive allowed


@pytest.fixture(scope="module")
def slice_result(tmp_path_factory, benchmarks_dir, contam_dev_path):
    rows = list(dev_slice(str(contam_dev_path)))
    path = _write(tmp_path_factory.mktemp("eval") / "slice.jsonl", rows)
    cfg = EvalConfig(
        detectors=["embedding", "fuzzy", "fingerprint"],
        target_fpr=0.05,
        detector_configs={"embedding": {"cache_root": cache_root()},
                          "fuzzy": {"embedding": {"cache_root": cache_root()}}},
    )  # fmt: skip
    res = evaluate(path, cfg, benchmarks=small_benchmarks(str(benchmarks_dir)),
                   calibrate_thresholds=True)  # fmt: skip
    return rows, res


def test_evaluate_slice_metrics_and_outputs(slice_result, tmp_path):
    rows, res = slice_result
    assert [d["name"] for d in res["detectors"]] == ["embedding", "fuzzy", "fingerprint"]
    assert res["combined"]["recall_by_kind"]["verbatim"]["item"] == 1.0
    cal = res["calibration"]
    n_clean = sum(r["label"] == "clean" for r in rows)
    assert cal["combined"]["fpr_by_kind"]["all_clean"]["fp"] <= int(0.05 * n_clean)
    assert set(cal["thresholds"]) == {"embedding", "fuzzy", "fingerprint"}

    paths = write_outputs(res, tmp_path / "out")
    ev = json.loads(paths["evaluation.json"].read_text())
    assert ev["schema_version"] == "evaluation/1" and ev["config_hash"]
    assert ev["detectors"][0]["model"]["revision"].startswith("local-")
    sweep = pq.read_table(paths["sweep.parquet"])
    assert sweep.num_rows == 3 * 101
    assert paths["sweep.png"].read_bytes()[:4] == b"\x89PNG"
    scores = pq.read_table(paths["scores.parquet"])
    assert scores.num_rows == 3 * len(rows)
    assert "| combined (calibrated, in sample)" in paths["evaluation.md"].read_text()
    pol = PolicyConfig.from_file(paths["calibrated_thresholds.json"])
    assert pol.thresholds == cal["thresholds"]


def test_cli_evaluate_writes_every_output(tmp_path, contam_dev_path, shared_dir):
    from typer.testing import CliRunner

    from flows.cli import app

    rows = [r for r in dev_slice(str(contam_dev_path)) if r["domain"] == "math"]
    labels = _write(tmp_path / "math.jsonl", rows)
    out = tmp_path / "out"
    res = CliRunner().invoke(
        app,
        ["decontam", "evaluate", "--labels", str(labels), "--out", str(out),
         "--detectors", "fingerprint", "--benchmarks", "aime24,aime25", "--calibrate",
         "--judge-ceiling", "--cv-folds", "3", "--negatives-limit", "5", "--negatives",
         str(shared_dir / "pools" / "math_deepscaler_aime_1983_2023.jsonl")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "calibrated, 3-fold out of fold: FPR(look+near)" in res.output
    by_k = json.loads((out / "evaluation.json").read_text())["cross_validation"]["by_fold_count"]
    for k, part in by_k.items():  # every fold count's figure is printed, with its counts
        f = part["fpr_by_kind"]["lookalike+near_miss"]
        assert f"  {k}-fold out of fold: FPR(look+near) {f['fpr']:.4f}" in res.output
        assert f"({f['fp']}/{f['n']})" in res.output
    assert set(by_k) >= {"3", "5", "10"}
    assert "3-fold out of fold" in (out / "evaluation.md").read_text()
    cv = json.loads((out / "evaluation.json").read_text())["cross_validation"]
    assert cv["folds"] == 3 and len(cv["per_fold"]) == 3
    assert "real negatives: 5 kept, 0 excluded" in res.output
    assert "fold 2 (out of fold): FPR" in res.output
    assert "calibrated thresholds: fingerprint=" in res.output
    assert "judge ceiling (" in res.output and "paraphrase" in res.output
    assert "+ perfect judge: ceiling" in (out / "evaluation.md").read_text()
    assert json.loads((out / "evaluation.json").read_text())["judge_ceiling"]["candidate_pairs"]
    for name in ("evaluation.json", "evaluation.md", "sweep.parquet", "sweep.png",
                 "scores.parquet", "calibrated_thresholds.json"):  # fmt: skip
        assert (out / name).is_file(), name


def test_a_detector_module_that_is_not_built_is_skipped_with_a_note(monkeypatch):
    from decontam import registry
    from decontam.evaluate import make_detectors

    monkeypatch.setitem(registry.DETECTORS, "minhash", "decontam.not_built_yet:MinHashDetector")
    dets, notes = make_detectors(EvalConfig(detectors=["minhash", "fingerprint"]))
    assert [d.name for d in dets] == ["fingerprint"]
    assert len(notes) == 1 and notes[0].startswith("minhash: skipped")


def test_judge_ceiling_equals_a_perfect_judge_run_through_the_policy(
    slice_result, benchmarks_dir, monkeypatch
):
    """The ceiling (candidate pairs only, no model) must equal what the real judge detector plus
    the policy would flag if every verdict were right: here a stand-in ``judge_pair`` that knows
    the labels."""
    from decontam.evaluate import flagged_items, judge_ceiling_metrics, text_table
    from decontam.judge import JudgeConfig, JudgeDetector
    from decontam.policy import decide

    rows, res = slice_result
    bench = small_benchmarks(str(benchmarks_dir))
    texts = text_table(rows)
    uids = [r["uid"] for r in rows]
    policy = PolicyConfig(thresholds=res["calibration"]["thresholds"])
    flags = flagged_items(decide(res["matches"], uids, policy))
    jconf = {"embedding": {"cache_root": cache_root()}, "cache": False}
    ceiling = judge_ceiling_metrics(rows, texts, bench, flags, jconf)

    label_of = {r["text"]: r for r in rows}
    ids_of: dict[str, set[str]] = {}
    for iid, t in zip(bench.items.column("item_id").to_pylist(),
                      bench.items.column("text").to_pylist(), strict=True):  # fmt: skip
        ids_of.setdefault(t or "", set()).add(iid)

    def perfect(self, item_text, sample_text, domain):
        r = label_of[sample_text]
        return {"model": "perfect", "prompt_version": "judge-math/1",
                "same": r["benchmark_item"] in ids_of.get(item_text, ())}  # fmt: skip

    monkeypatch.setattr(JudgeDetector, "judge_pair", perfect)
    judge = JudgeDetector(JudgeConfig(base_url="http://127.0.0.1:9/v1", model="perfect", **jconf))
    judge.fit(bench)
    jm = judge.score(texts)
    assert jm.num_rows == ceiling["candidate_pairs"] > 0
    both = pa.concat_tables([res["matches"], jm.cast(res["matches"].schema)])
    run = metrics(
        flagged_items(decide(both, uids, PolicyConfig(thresholds={**policy.thresholds,
                                                                  "judge": 0.5}))),
        rows,
    )  # fmt: skip
    assert run["recall_by_kind"] == ceiling["combined"]["recall_by_kind"]
    assert run["fpr_by_kind"] == ceiling["combined"]["fpr_by_kind"]
    base = res["calibration"]["combined"]
    for kind, v in ceiling["combined"]["recall_by_kind"].items():
        assert v["item"] >= base["recall_by_kind"][kind]["item"], kind
    # the judge's candidates reach rewrites that no threshold does (real data)
    for kind in ("paraphrase", "story"):
        assert (
            ceiling["combined"]["recall_by_kind"][kind]["item"]
            > base["recall_by_kind"][kind]["item"]
        ), kind
    assert ceiling["combined"]["fpr_by_kind"] == base["fpr_by_kind"]


# --------------------------------------------------------------------------------------------
# Grouped cross-validation (issue 17 item 1)
# --------------------------------------------------------------------------------------------


def test_folds_never_share_a_benchmark_item(contam_dev_path):
    from decontam.evaluate import assign_folds

    labels = load_labels(contam_dev_path)
    folds = assign_folds(labels, 5)
    assert folds == assign_folds(labels, 5)  # deterministic
    assert set(folds) == {r["uid"] for r in labels}
    by_item: dict[str, set[int]] = {}
    for r in labels:
        if r["label"] == "contaminated":
            by_item.setdefault(r["benchmark_item"], set()).add(folds[r["uid"]])
    assert len(by_item) > 5 and all(len(f) == 1 for f in by_item.values())
    for label in ("contaminated", "clean"):  # both spread over every fold, roughly evenly
        sizes = [sum(1 for r in labels if r["label"] == label and folds[r["uid"]] == f)
                 for f in range(5)]  # fmt: skip
        assert min(sizes) > 0.6 * max(sizes), (label, sizes)
    with pytest.raises(Exception, match="at least 2"):
        assign_folds(labels, 1)
    # other deals: other folds for the same groups, each as balanced and as grouped
    deals = [assign_folds(labels, 5, deal=d) for d in range(1, 4)]
    assert all(d != folds for d in deals) and deals[0] != deals[1]
    for d in deals:
        for r in labels:
            if r["label"] == "contaminated":
                assert len({d[x["uid"]] for x in labels
                            if x.get("benchmark_item") == r["benchmark_item"]}) == 1  # fmt: skip


def test_clopper_pearson_interval_matches_scipy_binomtest():
    from scipy.stats import binomtest

    from decontam.evaluate import proportion_ci

    for k, n in ((0, 280), (1, 280), (13, 500), (5, 5)):
        ci = binomtest(k, n).proportion_ci(0.95, method="exact")
        assert proportion_ci(k, n) == (round(ci.low, 4), round(ci.high, 4))
    assert proportion_ci(0, 280)[1] == round(1 - 0.025 ** (1 / 280), 4)


def _matches(rows):
    from decontam.base import MATCH_SCHEMA

    return pa.Table.from_pylist(
        [{"sample_uid": u, "field": "problem", "benchmark": "aime24",
          "benchmark_version": "aime24@1", "benchmark_item": it or "I-x", "detector": d,
          "detector_version": "x/1", "score": s, "threshold": 0.0}
         for u, _lab, it, d, s in rows],
        schema=MATCH_SCHEMA,
    )  # fmt: skip


def test_out_of_fold_checks_each_row_with_thresholds_that_never_saw_it():
    """A clean row scoring high is excluded in sample (the calibration sets the threshold above
    it) but flagged out of fold, where the thresholds were fitted without it."""
    from decontam.evaluate import assign_folds, cross_validate

    labels = [_row(f"p{i}", "contaminated", "edit", f"I-{i}") for i in range(6)] + [
        _row(f"n{i}", "clean", "pool") for i in range(60)
    ]
    rows = [(f"p{i}", "contaminated", f"I-{i}", "a", 0.5 + 0.05 * i) for i in range(6)]
    rows += [(f"n{i}", "clean", None, "a", 0.8 if i == 0 else 0.1) for i in range(60)]
    in_sample = calibrate(_scores(rows), labels, ["a"], target_fpr=0.0)
    assert in_sample["a"] > 0.8
    cv = cross_validate(_matches(rows), _scores(rows), labels, ["a"], 0.0, 3)
    folds = assign_folds(labels, 3)
    for pf in cv["per_fold"]:
        fit = [r for r in labels if folds[r["uid"]] != pf["fold"]]
        fit_rows = [x for x in rows if folds[x[0]] != pf["fold"]]
        assert pf["thresholds"] == calibrate(_scores(fit_rows), fit, ["a"], 0.0)
    fp = cv["combined"]["fpr_by_kind"]["all_clean"]
    assert fp["n"] == 60 and fp["fp"] == 1  # n0, checked by a fold fitted without it
    lo, hi = cv["fpr_ci95"]["all_clean"]
    assert lo < 1 / 60 < hi
    assert sum(pf["rows"] for pf in cv["per_fold"]) == len(labels)


def test_over_deals_reports_every_deal_and_the_budget():
    """n0, a look-alike scoring above every positive, is let through by the fold it is held out
    in, in every deal (a fit with it gives the positives up and flags nothing); two others
    only when the deal holds them out with n0 (the fit's top clean score is then 0.2 and the
    threshold falls under both). They are chosen so that deal 0 does."""
    from decontam.evaluate import assign_folds, over_deals

    labels = [_row(f"p{i}", "contaminated", "edit", f"I-{i}") for i in range(6)]
    labels += [_row(f"n{i}", "clean", "lookalike") for i in range(60)]
    f0 = assign_folds(labels, 3)
    mates = [f"n{i}" for i in range(1, 60) if f0[f"n{i}"] == f0["n0"]][:2]
    high = {"n0": 0.8, mates[0]: 0.45, mates[1]: 0.45}
    rows = [(f"p{i}", "contaminated", f"I-{i}", "a", 0.5 + 0.05 * i) for i in range(6)]
    rows += [(f"n{i}", "clean", None, "a", high.get(f"n{i}", 0.2)) for i in range(60)]
    od = over_deals((_matches(rows), _scores(rows), labels, ["a"], 0.0), ["3"], 8, {}, [], None)
    got = od["by_fold_count"]["3"]
    deals = [assign_folds(labels, 3, deal=d) for d in range(8)]
    together = [len({f[u] for u in high}) == 1 for f in deals]
    assert together[0] and not all(together)  # the deals differ where it matters
    assert got["fp_per_deal"] == [3 if t else 1 for t in together]
    assert got["n"] == 60 and od["deals"] == 8 and od["budget"] == 0.005
    assert got["mean_fpr"] == pytest.approx(sum(got["fp_per_deal"]) / 8 / 60, abs=1e-6)
    assert got["min_fpr"] == pytest.approx(1 / 60, abs=1e-6)
    assert got["deals_over_budget"] == 8  # 1/60 is over 0.5 % already


def test_cross_validation_on_real_scores(slice_result):
    from decontam.evaluate import cross_validate

    rows, res = slice_result
    names = [d["name"] for d in res["detectors"]]
    cv = cross_validate(res["matches"], res["scores"], rows, names, 0.05, 3)
    n_clean = sum(r["label"] == "clean" for r in rows)
    assert cv["combined"]["fpr_by_kind"]["all_clean"]["n"] == n_clean
    assert all(set(pf["thresholds"]) == set(names) for pf in cv["per_fold"])
    assert cv["combined"]["recall_by_kind"]["verbatim"]["item"] == 1.0


# --------------------------------------------------------------------------------------------
# Real negatives (issue 17 item 1)
# --------------------------------------------------------------------------------------------


def test_leetcode_rows_inside_lcbs_window_are_not_taken_as_negatives(shared_dir, tmp_path):
    from decontam.evaluate import LEETCODE_SAFE_MAX_ID, load_negatives

    path = shared_dir / "pools" / "code_leetcodedataset_v0.2.0_train.jsonl"
    lines = path.read_text("utf-8").splitlines()
    qids = [int(json.loads(x)["meta"]["question_id"]) for x in lines]
    rows, info = load_negatives([path])
    assert len(rows) == sum(q < LEETCODE_SAFE_MAX_ID for q in qids) > 1000
    assert info[path.name]["skipped_leetcode_id_in_window"] == sum(q >= 2600 for q in qids) > 0
    assert rows[0]["text"] == json.loads(lines[0])["query"].strip()
    assert {r["label"] for r in rows} == {"clean"}
    limited, _ = load_negatives([path], limit=7)
    assert [r["uid"] for r in limited] == [r["uid"] for r in rows[:7]]
    bad = _write(tmp_path / "bad.jsonl", [{"problem": "ok"}, {"solution": "no text"}])
    with pytest.raises(InputError, match=r"bad.jsonl.*row 2"):
        load_negatives([bad])


def test_real_negatives_exclude_benchmark_copies_and_report_tails(
    tmp_path, shared_dir, benchmarks_dir, contam_dev_path
):
    """Older AIME problems as negatives, with one AIME 2024 problem planted among them: the copy
    is excluded and counted, every policy (default, in sample, each fold) gets an FPR with its
    interval on the rest."""
    from decontam.evaluate import load_negatives

    pool = shared_dir / "pools" / "math_deepscaler_aime_1983_2023.jsonl"
    real = [json.loads(x) for x in pool.read_text("utf-8").splitlines()[:25]]
    rows = [r for r in dev_slice(str(contam_dev_path)) if r["domain"] == "math"]
    planted = next(r for r in rows if r["kind"] == "verbatim")
    negs = _write(tmp_path / "older_aime.jsonl", real + [{"problem": planted["text"]}])
    labels = _write(tmp_path / "math.jsonl", rows)
    cfg = EvalConfig(detectors=["ngram", "problem_id", "fingerprint"], target_fpr=0.05)
    res = evaluate(labels, cfg, benchmarks=small_benchmarks(str(benchmarks_dir)),
                   cv_folds=2, negatives=[negs])  # fmt: skip
    neg = res["negatives"]
    assert neg["rows"] == 26 and neg["kept"] == 25
    assert list(neg["excluded"]) == ["older_aime.jsonl:26"]
    assert neg["excluded"]["older_aime.jsonl:26"].endswith(planted["benchmark_item"])
    # the negatives stay out of the dev-set figures
    assert res["combined"]["fpr_by_kind"]["all_clean"]["n"] == sum(
        r["label"] == "clean" for r in rows
    )
    assert set(neg["policies"]) == {"default", "calibrated (in sample)",
                                    "fold 0 (out of fold)", "fold 1 (out of fold)"}  # fmt: skip
    kept_uids = {r["uid"] for r in load_negatives([negs])[0]} - set(neg["excluded"])
    for p in neg["policies"].values():
        assert p["n"] == 25 and p["fpr"] == round(p["fp"] / 25, 4)
        assert p["ci95"][0] <= p["fpr"] <= p["ci95"][1]
        assert {e["row"] for e in p["examples"]} <= kept_uids
    for t in neg["score_tails"].values():
        assert t["p99"] <= t["p99.5"] <= t["p99.9"] <= t["max"] <= 1.0
    # older AIME problems are not AIME 2024 copies: no n-gram detector tail near a full copy
    assert neg["score_tails"]["ngram"]["max"] < 0.9
    md = write_outputs(res, tmp_path / "out")["evaluation.md"].read_text()
    assert "## Real negatives" in md and "older_aime.jsonl:26" not in md


# --------------------------------------------------------------------------------------------
# Issue 17 item 1: thresholds as strict as the recall allows; corroboration rules
# --------------------------------------------------------------------------------------------


def test_a_threshold_that_buys_no_recall_is_not_left_low():
    """Detector b catches only positives a catches too: its threshold rises from just above its
    top clean score (0.5, where a held-out clean row at 0.55 would be flagged out of fold) to
    midway between that clean score and b's highest positive."""
    labels = [_row(f"p{i}", "contaminated", "edit", f"I-{i}") for i in range(4)] + [
        _row(f"n{i}", "clean", "pool") for i in range(50)
    ]
    rows = [(f"p{i}", "contaminated", f"I-{i}", "a", 0.9) for i in range(4)]
    rows += [
        (f"p{i}", "contaminated", f"I-{i}", "b", s) for i, s in enumerate([0.6, 0.7, 0.8, 0.9])
    ]
    rows += [(f"n{i}", "clean", None, "a", 0.1) for i in range(50)]
    rows += [(f"n{i}", "clean", None, "b", 0.5 if i == 0 else 0.1) for i in range(50)]
    thr = calibrate(_scores(rows), labels, ["a", "b"], target_fpr=0.0)
    assert thr["a"] == 0.5  # a still catches everything: midway 0.1 / 0.9
    assert thr["b"] == 0.7  # was 0.55 (midway 0.5 / 0.6): b buys nothing a does not


def test_a_corroboration_rule_is_calibrated_like_a_detector_and_ships_as_a_policy_rule():
    from decontam.evaluate import active_rules, policy_of, with_rules
    from decontam.policy import decide

    rows = [("p1", "contaminated", "I-1", "fingerprint", 0.9), ("p1", "contaminated", "I-1", "embedding", 0.6),
            ("n1", "clean", "I-2", "fingerprint", 0.9)]  # fmt: skip
    rules = active_rules({"fingerprint": {"embedding": 0.5}}, ["fingerprint", "embedding"])
    assert list(rules) == ["fingerprint+embedding"]
    m = with_rules(_matches(rows), rules)
    derived = m.filter(pa.compute.equal(m.column("detector"), "fingerprint+embedding"))
    assert derived.column("sample_uid").to_pylist() == ["p1"]  # n1: no embedding agreement
    pol = policy_of({"embedding": 0.88, "fingerprint+embedding": 0.8}, rules, ["fingerprint"])
    assert pol.rules == [{"fingerprint": 0.8, "embedding": 0.5}]
    assert pol.evidence_only == ["fingerprint"] and pol.thresholds["fingerprint"] == 0.8
    dec = {
        d["sample_uid"]: d["contaminated"]
        for d in decide(_matches(rows), ["p1", "n1"], pol).to_pylist()
    }
    assert dec == {"p1": True, "n1": False}  # fmt: skip


def test_a_positive_two_detectors_catch_is_held_by_the_one_with_the_wider_margin():
    """p0 is caught by a (0.50 over clean 0.30) and by b (0.66 over clean 0.65). The detector
    that separates it most holds it, whatever order the detectors are listed in; b, holding
    nothing, rises to its highest positive. (Raised in list order, a first: a saw b catch both
    at b's starting threshold, rose to 0.625 past p0 and left it to b at 0.655, 0.005 over b's
    top clean score; listed b first, the same rows gave a 0.40 and b 0.675.)"""
    labels = [_row(f"p{i}", "contaminated", "edit", f"I-{i}") for i in range(2)] + [
        _row(f"n{i}", "clean", "pool") for i in range(40)
    ]
    rows = [("p0", "contaminated", "I-0", "a", 0.50), ("p1", "contaminated", "I-1", "a", 0.95),
            ("p0", "contaminated", "I-0", "b", 0.66), ("p1", "contaminated", "I-1", "b", 0.70)]  # fmt: skip
    rows += [(f"n{i}", "clean", None, "a", 0.30) for i in range(40)]
    rows += [(f"n{i}", "clean", None, "b", 0.65 if i == 0 else 0.1) for i in range(40)]
    thr = calibrate(_scores(rows), labels, ["a", "b"], target_fpr=0.0)
    assert thr == calibrate(_scores(rows), labels, ["b", "a"], target_fpr=0.0)
    assert thr["a"] == 0.4  # midway 0.30 / 0.50: holds p0 and p1
    assert thr["b"] == 0.675  # holds nothing: midway 0.65 / its highest positive 0.70


def test_real_negative_floors_keep_every_fold_above_the_real_clean_tail():
    """The dev set's top clean row (n0, 0.85) props the threshold up in sample; a fold fitted
    without it would drop to midway 0.1 / 0.9 = 0.5 and flag it. Real negatives reaching 0.84
    (the same in every fold: they are no benchmark item's rows) keep each fold above 0.84."""
    from decontam.evaluate import cross_validate, real_negative_floors

    labels = [_row(f"p{i}", "contaminated", "edit", f"I-{i}") for i in range(6)] + [
        _row(f"n{i}", "clean", "pool") for i in range(60)
    ]
    rows = [(f"p{i}", "contaminated", f"I-{i}", "a", 0.9) for i in range(6)]
    rows += [(f"n{i}", "clean", None, "a", 0.85 if i == 0 else 0.1) for i in range(60)]
    without = cross_validate(_matches(rows), _scores(rows), labels, ["a"], 0.0, 3)
    assert without["combined"]["fpr_by_kind"]["all_clean"]["fp"] == 1  # n0, out of fold
    negs = [_row(f"r{i}", "clean", "real") for i in range(100)]
    neg_rows = [(f"r{i}", "clean", "I-9", "a", 0.84 if i < 2 else 0.2) for i in range(100)]
    neg_rows += [("r99", "clean", "I-3", "problem_id", 1.0)]  # a benchmark copy: not a negative
    neg_rows += [("r99", "clean", "I-3", "a", 0.99)]
    floors = real_negative_floors(_matches(neg_rows), negs, ["a", "problem_id"])
    assert floors == {"a": 0.84}
    # at 2 %, one of the 99 kept rows may score above the floor: still 0.84 (two rows reach it);
    # at 3 %, two may
    assert real_negative_floors(_matches(neg_rows), negs, ["a"], target_fpr=0.02) == {"a": 0.84}
    assert real_negative_floors(_matches(neg_rows), negs, ["a"], target_fpr=0.03) == {"a": 0.2}
    cv = cross_validate(_matches(rows), _scores(rows), labels, ["a"], 0.0, 3, floors=floors)
    assert cv["combined"]["fpr_by_kind"]["all_clean"]["fp"] == 0
    assert cv["combined"]["recall_by_kind"]["edit"]["item"] == 1.0
    assert all(0.84 < pf["thresholds"]["a"] <= 0.9 for pf in cv["per_fold"])
    assert calibrate(_scores(rows), labels, ["a"], 0.0, floors=floors)["a"] == 0.875


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"benchmark_item": "2024-I-99"}, r"row 2, field 'benchmark_item': aime24 has no item "
         r"'2024-I-99' \(did you mean '2024-I-9"),
        ({"benchmark": "aime2099"}, r"row 2, field 'benchmark': unknown benchmark 'aime2099' "
         r"\(did you mean 'aime2"),
    ],
)  # fmt: skip
def test_labels_naming_a_missing_item_or_benchmark_are_refused(
    tmp_path, benchmarks_dir, change, match
):
    from decontam.benchmarks import load_benchmarks

    path = _write(tmp_path / "l.jsonl", [LABELS[0], {**LABELS[1], **change}, *LABELS[2:]])
    bench = load_benchmarks(["aime24"], benchmarks_dir=benchmarks_dir)
    with pytest.raises(InputError, match=f"l.jsonl, {match}"):
        evaluate(path, EvalConfig(detectors=["ngram"], benchmarks=["aime24"]), benchmarks=bench)


def test_rows_of_a_benchmark_not_loaded_are_left_out_with_a_note(
    tmp_path, benchmarks_dir, contam_dev_path
):
    """contam_dev with only aime24 loaded: the aime25/LCB positives cannot be found, so they
    leave the metrics (recall is of aime24's positives), and the evaluation says so."""
    from decontam.benchmarks import load_benchmarks

    rows = [json.loads(line) for line in contam_dev_path.read_text().splitlines()]
    per = {b: sum(r["benchmark"] == b for r in rows) for b in ("aime25", "lcb_v5", "lcb_v6")}
    bench = load_benchmarks(["aime24"], benchmarks_dir=benchmarks_dir)
    cfg = EvalConfig(detectors=["ngram"], benchmarks=["aime24"])
    res = evaluate(contam_dev_path, cfg, benchmarks=bench, policy=PolicyConfig())
    assert res["labels"]["left_out_not_loaded"] == per
    assert res["labels"]["rows_measured"] == len(rows) - sum(per.values())
    (note,) = [n for n in res["notes"] if "left out" in n]
    assert note.startswith(f"{sum(per.values())} contaminated label rows left out")
    assert "aime25: 51" in note
    n_aime24 = sum(r["benchmark"] == "aime24" for r in rows)
    row = res["combined"]["row"]
    assert row["recall"] == pytest.approx(row["tp"] / n_aime24, abs=1e-4)


def test_more_folds_than_groups_is_refused_and_auto_fold_counts_fit_the_labels(
    tmp_path, benchmarks_dir, data_root
):
    """7 label rows are 3 benchmark items and 4 clean uids: no more than 4 folds can each hold
    a group. --cv-folds 5 is refused before the scan, naming the option and the most that fits
    (was an ArrowTypeError traceback from the empty fold); --cv-folds 2 still runs, and the
    automatic 3/5/10-fold figures keep only the fold counts the labels can fill (3)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from curation.errors import ConfigError
    from decontam.benchmarks import load_benchmarks

    path = _write(tmp_path / "l.jsonl", LABELS)
    bench = load_benchmarks(["aime24"], benchmarks_dir=benchmarks_dir)
    cfg = EvalConfig(detectors=["ngram"], benchmarks=["aime24"], cv_deals=1)
    with pytest.raises(ConfigError, match=r"--cv-folds 5: .*4 .*use --cv-folds 4 or fewer"):
        evaluate(path, cfg, benchmarks=bench, cv_folds=5)
    res = evaluate(path, cfg, benchmarks=bench, cv_folds=2)
    assert set(res["cross_validation"]["by_fold_count"]) == {"2", "3"}
    assert any("5-fold, 10-fold" in n for n in res["notes"])
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo), "SLUICE_BENCHMARKS_DIR": str(benchmarks_dir)}
    p = subprocess.run(
        [sys.executable, "-m", "flows.cli", "decontam", "evaluate", "--labels", str(path),
         "--out", str(tmp_path / "out"), "--detectors", "ngram", "--benchmarks", "aime24",
         "--cv-folds", "1000"],
        env=env, capture_output=True, text=True, cwd=repo,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr[-2000:]
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "--cv-folds 1000" in p.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--negatives-limit", "0", "--negatives", "NEG"], "--negatives-limit must be >= 1, got 0"),
        (["--negatives-limit", "-3", "--negatives", "NEG"], "--negatives-limit must be >= 1, got -3"),
        (["--negatives-limit", "5"], "--negatives-limit 5 needs --negatives"),
        (["--negatives", ","], "--negatives ',' names no file"),
    ],
)  # fmt: skip
def test_negatives_options_out_of_range_or_alone_are_refused(
    tmp_path, shared_dir, benchmarks_dir, args, message
):
    """--negatives-limit 0 or -3 read no negative row and reported 'real negatives: 0 kept';
    --negatives-limit without --negatives and --negatives ',' were ignored: each is one error
    line naming the option, before any scan, and nothing is written."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    neg = str(shared_dir / "pools" / "math_deepscaler_aime_1983_2023.jsonl")
    path = _write(tmp_path / "l.jsonl", LABELS)
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo), "SLUICE_BENCHMARKS_DIR": str(benchmarks_dir)}
    p = subprocess.run(
        [sys.executable, "-m", "flows.cli", "decontam", "evaluate", "--labels", str(path),
         "--out", str(tmp_path / "out"), "--detectors", "ngram", "--benchmarks", "aime24",
         *[neg if a == "NEG" else a for a in args]],
        env=env, capture_output=True, text=True, cwd=repo,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr[-2000:]
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert message in p.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"uid": 5}, "uid", "uid must be a non-empty string, got 5"),
        ({"uid": ""}, "uid", "uid must be a non-empty string, got ''"),
        ({"kind": 3}, "kind", "kind must be a non-empty string, got 3"),
        ({"kind": None}, "kind", "kind must be a non-empty string, got None"),
        ({"domain": ["math"]}, "domain", "domain must be a non-empty string"),
        ({"field": 5}, "field", "field must be a string (or null: problem), got 5"),
        ({"text": "  "}, "text", "text is empty"),
        ({"benchmark": None}, "benchmark", "a contaminated row needs its benchmark"),
        ({"benchmark_item": 7}, "benchmark_item", "benchmark_item must be a string, got 7"),
    ],
)
def test_label_values_of_the_wrong_type_name_file_row_and_field(tmp_path, change, field, message):
    """A uid, kind or field of the wrong type was an Arrow traceback after the whole scan; an
    empty uid or text, a kind of null and a contaminated row without its benchmark (its item
    never checked against any benchmark) were measured silently."""
    path = _write(tmp_path / "l.jsonl", [LABELS[1], {**LABELS[0], **change}, *LABELS[2:]])
    with pytest.raises(InputError) as exc:
        load_labels(path)
    assert f"l.jsonl, row 2, field '{field}': {message}" in str(exc.value)


def test_a_label_uid_of_the_wrong_type_is_one_error_line_in_the_cli(tmp_path, benchmarks_dir):
    import os
    import subprocess
    import sys
    from pathlib import Path

    path = _write(tmp_path / "l.jsonl", [LABELS[1], {**LABELS[0], "uid": 5}, *LABELS[2:]])
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo), "SLUICE_BENCHMARKS_DIR": str(benchmarks_dir)}
    p = subprocess.run(
        [sys.executable, "-m", "flows.cli", "decontam", "evaluate", "--labels", str(path),
         "--out", str(tmp_path / "out"), "--detectors", "ngram", "--benchmarks", "aime24"],
        env=env, capture_output=True, text=True, cwd=repo,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr[-2000:]
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "row 2, field 'uid'" in p.stderr and not (tmp_path / "out").exists()


def test_labels_or_negatives_that_are_a_folder_say_so(tmp_path):
    """A --labels or --negatives path that exists as a folder said 'not found'."""
    from decontam.evaluate import load_negatives

    with pytest.raises(InputError, match="is a folder, not a file") as exc:
        load_labels(tmp_path)
    assert "--labels" in str(exc.value) and "not found" not in str(exc.value)
    with pytest.raises(InputError, match="is a folder, not a file") as exc:
        load_negatives([tmp_path])
    assert "--negatives" in str(exc.value) and "not found" not in str(exc.value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target-fpr", "0.1"], "--target-fpr would be ignored"),
        (["--target-fpr", "1.5", "--calibrate"], "--target-fpr must be in [0, 1), got 1.5"),
        (["--embedding-backend", "foo"], "--embedding-backend 'foo' is not a backend"),
        (["--embedding-backend", "onnx"], "--embedding-backend would be ignored"),
        (["--cv-folds", "2", "--cv-deals", "0"], "cv_deals (--cv-deals) must be >= 1, got 0"),
        (["--cv-deals", "3"], "--cv-deals would be ignored"),
    ],
)  # fmt: skip
def test_options_without_effect_or_out_of_range_are_refused(
    tmp_path, benchmarks_dir, args, message
):
    """--target-fpr without --calibrate/--cv-folds, --cv-deals without --cv-folds and
    --embedding-backend with detectors that use no embedding model were ignored without a word (exit 0, a backend 'foo' unchecked):
    each is one error line naming the option, before any scan, and nothing is written."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    path = _write(tmp_path / "l.jsonl", LABELS)
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo), "SLUICE_BENCHMARKS_DIR": str(benchmarks_dir)}
    p = subprocess.run(
        [sys.executable, "-m", "flows.cli", "decontam", "evaluate", "--labels", str(path),
         "--out", str(tmp_path / "out"), "--detectors", "ngram", "--benchmarks", "aime24",
         *args],
        env=env, capture_output=True, text=True, cwd=repo,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr[-2000:]
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert message in p.stderr and not (tmp_path / "out").exists()
