"""The sharded flow path (prepare_shards -> scan_shard per shard -> finalize_shards) writes its
scan progress to the flow's run log: a line as each shard ends (shard i of N, texts, those the
scan cache served, time) with the overall texts done of the total, texts/s and ETA, and the
overall line within a shard every interval (0 here: one per batch). It printed nothing between
the shards' preparation and the end of the flow."""

from __future__ import annotations

import re

import pytest
from flow_helpers import run_log, write_slice

pytestmark = [
    pytest.mark.shared_data,
    pytest.mark.xdist_group("prefect"),
    pytest.mark.usefixtures("prefect_harness"),
]


@pytest.mark.parametrize("runner", ["default", "threads"])
def test_a_sharded_flow_logs_each_shard_and_the_overall_progress(
    runner, tmp_path, pools_dir, benchmarks_dir, monkeypatch
):
    import flows.decontaminate as dmod
    from decontam.run import DecontamConfig
    from flows.ingest import ingest_flow

    monkeypatch.setattr(dmod, "PROGRESS_INTERVAL", 0.0, raising=False)
    root = str(tmp_path / "root")
    src = write_slice(pools_dir / "math_deepscaler_math_train.jsonl", tmp_path / "m.jsonl", 120)
    ref = ingest_flow(source=str(src), name="m", field_map="deepscaler_math", data_root=root)
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"], stream_rows=20).to_dict()
    flow = dmod.decontaminate_flow
    if runner == "threads":  # the flow calls its tasks: they run in its thread whatever runner
        from prefect.task_runners import ThreadPoolTaskRunner

        flow = flow.with_options(task_runner=ThreadPoolTaskRunner(max_workers=2))
    kw = dict(input_ref=ref["ref"], text_fields=["problem"], id_field="uid", decontam=cfg,
              data_root=root, benchmarks_dir=str(benchmarks_dir), shards=3)  # fmt: skip
    state = flow(**kw, return_state=True)
    out, flow_log = state.result(), run_log(state)
    n = out["counts"]["texts"]
    assert n == 120 and out["counts"]["texts_scanned"] == n
    ours = [x for x in flow_log if x.startswith("decontam m: ")]
    assert ours[:1] == [f"decontam m: {n} texts in 3 shards to scan"], flow_log
    ends = [x for x in ours if re.match(r"decontam m: shard \d of 3", x)]
    assert [x.split(":")[1] for x in ends] == [f" shard {i} of 3" for i in (1, 2, 3)], ours
    assert ends[0].startswith("decontam m: shard 1 of 3: 40 texts in "), ends
    assert f"; 40 / {n} texts (33%), " in ends[0] and "texts/s" in ends[0], ends
    assert "ETA" in ends[0] and "ETA" not in ends[2], ends
    assert f"; {n} / {n} texts (100%), " in ends[2], ends
    # within a shard (two batches of 20 each): the overall line after its first batch
    first = ours.index(ends[0])
    assert any(x.startswith(f"decontam m: 20 / {n} texts (17%), ") for x in ours[:first]), ours

    # the rerun: every shard's cached task result, and a last line saying nothing was scanned
    flow_log = run_log(flow(**kw, return_state=True))
    ours = [x for x in flow_log if x.startswith("decontam m: ")]
    assert ours[1].startswith("decontam m: shard 1 of 3 (cached task result): 40 texts "), ours
    assert (
        ours[-1]
        == f"decontam m: all {n} texts served from the scan cache (reused), nothing scanned"
    )


def test_the_unsharded_flow_logs_its_scan_progress(tmp_path, pools_dir, benchmarks_dir):
    """The default flow path (one task, `shards = 1`) logged no scan progress at all: a nightly
    run over millions of rows showed nothing in Prefect's run log between the task's start and
    its end. The library's progress lines now go to the task's run logger."""
    import flows.decontaminate as dmod
    from decontam.run import DecontamConfig
    from flows.ingest import ingest_flow

    root = str(tmp_path / "root")
    src = write_slice(pools_dir / "math_deepscaler_math_train.jsonl", tmp_path / "m.jsonl", 120)
    ref = ingest_flow(source=str(src), name="m", field_map="deepscaler_math", data_root=root)
    cfg = DecontamConfig(benchmarks=["aime24"], detectors=["ngram"], stream_rows=20).to_dict()
    state = dmod.decontaminate_flow(
        input_ref=ref["ref"], text_fields=["problem"], id_field="uid", decontam=cfg,
        data_root=root, benchmarks_dir=str(benchmarks_dir), return_state=True,
    )  # fmt: skip
    assert state.result()["counts"]["texts_scanned"] == 120
    ours = [x for x in run_log(state) if x.startswith("decontam m: ")]
    assert ours and ours[-1].startswith("decontam m: 120 / 120 rows (100%), "), ours
