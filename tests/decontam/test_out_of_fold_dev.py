"""Issue 17 item 1: the calibration holds its false-positive budget on benchmark items it has not
seen, whatever the fold count. Scored for real: the default detector set on the whole labelled
dev set, and LeetCodeDataset's rows older than LiveCodeBench's window as real negatives.

Under the calibration before this test (detectors raised in list order, no real-negative floor)
the look-alike + near-miss rows flagged out of fold were 4/280 with 3 folds, 1/280 with 5 and
2/280 with 10 (math-near_miss-01, code-near_miss-12 and code-lookalike-004 by the embedding
fitted at 0.832 / 0.848; math-near_miss-08 by the n-gram detectors), and 3-fold format recall
was 0.97."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from semantic_data import cache_root

from decontam.evaluate import (
    EvalConfig,
    active_rules,
    best_scores,
    calibrate,
    cross_validate,
    load_labels,
    load_negatives,
    make_detectors,
    policy_of,
    real_negative_floors,
    run_detectors,
    text_table,
    with_rules,
)

# Encoding the dev set, every benchmark wording and 1,657 LeetCode statements with MiniLM on CPU
# is the cost (about 4-7 minutes on 2 busy cores): one worker does it once, with room to spare.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.shared_data,
    pytest.mark.xdist_group("dev_out_of_fold"),
    pytest.mark.timeout(1500),
]

STRONG = ("verbatim", "format", "embedded", "edit")
BUDGET = 0.005  # look-alikes + near misses, out of fold


# session, not module: xdist's loadgroup keeps these tests on one worker but may run other
# modules' tests between them, and a module fixture is then built again (twice in CI: 2 x 160 s)
@pytest.fixture(scope="session")
def scored(contam_dev_path, pools_dir):
    from decontam.benchmarks import load_benchmarks

    cfg = EvalConfig(
        detector_configs={"embedding": {"cache_root": cache_root()},
                          "fuzzy": {"embedding": {"cache_root": cache_root()}}},
    )  # fmt: skip
    labels = load_labels(contam_dev_path)
    neg, _info = load_negatives([pools_dir / "code_leetcodedataset_v0.2.0_train.jsonl"])
    dets, notes = make_detectors(cfg)
    assert not notes, notes
    bench = load_benchmarks(cfg.benchmarks, include_variants=True)
    matches = run_detectors(dets, bench, text_table(labels + neg))
    is_neg = pc.is_in(matches.column("sample_uid"), pa.array([r["uid"] for r in neg]))
    names = [d.name for d in dets]
    rules = active_rules(cfg.corroborated, names)
    rule_only = [d for d in cfg.rule_only if d in names]
    cal_names = [n for n in names if n not in rule_only] + list(rules)
    dev = matches.filter(pc.invert(is_neg))
    scores = best_scores(with_rules(dev, rules), labels, cal_names)
    floors = real_negative_floors(matches.filter(is_neg), neg, cal_names, rules)
    return dev, scores, labels, cal_names, rules, rule_only, floors


def test_real_negatives_set_the_embeddings_floor(scored):
    *_, floors = scored
    # LeetCodeDataset rows reach 0.857 against LCB items; the dev set's clean rows under its
    # top one (0.869) stop at 0.847, which is where a fold without that row put its threshold
    assert 0.85 < floors["embedding"] < 0.869
    assert floors["ngram"] < 0.5  # no real LeetCode row is a copy of an LCB item


def test_in_sample_no_clean_row_and_every_copy(scored):
    from decontam.evaluate import flagged_items, metrics
    from decontam.policy import decide

    dev, scores, labels, cal_names, rules, rule_only, floors = scored
    thr = calibrate(scores, labels, cal_names, 0.0, floors=floors)
    pol = policy_of(thr, rules, rule_only)
    m = metrics(flagged_items(decide(dev, [r["uid"] for r in labels], pol)), labels)
    assert m["fpr_by_kind"]["all_clean"]["fp"] == 0
    assert all(m["recall_by_kind"][k]["item"] == 1.0 for k in STRONG)
    # the order detectors are listed in does not choose the thresholds
    assert calibrate(scores, labels, cal_names[::-1], 0.0, floors=floors) == thr


@pytest.mark.parametrize("k", [3, 5, 10])
def test_out_of_fold_budget_holds_at_every_fold_count(scored, k):
    dev, scores, labels, cal_names, rules, rule_only, floors = scored
    cv = cross_validate(dev, scores, labels, cal_names, 0.0, k, rules, rule_only, floors=floors)
    ln = cv["combined"]["fpr_by_kind"]["lookalike+near_miss"]
    assert ln["n"] == 280
    assert ln["fp"] / ln["n"] <= BUDGET, (k, ln)  # measured: 1/280 (math-near_miss-08) at 3, 5, 10
    recall = cv["combined"]["recall_by_kind"]
    assert all(recall[kind]["item"] == 1.0 for kind in STRONG), (k, recall)
    for pf in cv["per_fold"]:
        assert pf["thresholds"]["embedding"] > floors["embedding"]


def test_out_of_fold_budget_holds_on_average_over_deals(scored):
    """One deal of the items into folds is one sample: which rows are held out together moves
    the figure. Over ten deals the mean holds the budget at 3, 5 and 10 folds; single deals
    reach 4/280 (measured: the three near misses of one AIME template, math-near_miss-08/-09/
    -10, held out together let that fold's fit lower minhash to about 0.4)."""
    from decontam.evaluate import BUDGET_FPR, over_deals

    dev, scores, labels, cal_names, rules, rule_only, floors = scored
    od = over_deals(
        (dev, scores, labels, cal_names, 0.0), ["3", "5", "10"], 10, rules, rule_only, floors
    )
    assert list(od["by_fold_count"]) == ["3", "5", "10"]  # an empty result passed the loop
    for k, v in od["by_fold_count"].items():
        assert v["n"] == 280 and len(v["fp_per_deal"]) == 10
        assert v["mean_fpr"] <= BUDGET_FPR, (k, v["fp_per_deal"])  # 0.36 / 0.46 / 0.39 %
        assert v["fp_per_deal"][0] == 1  # deal 0 is the one the fold-count test checks
