"""`sft build` keeps its grades in a log under the data root: a rebuild (after a stop, or with
other filters) grades only what it has not graded before, and publishes what a fresh build
would. Real R1-distill traces (thought-anchors) and real LeetCode problems with their reference
solutions; the grading work is counted at the verifier's and the sandbox's entry points
(`MathVerifier.verify` answers, `sandbox.run_tests` programs), which still do the real work."""

from __future__ import annotations

import copy
import json
import os
import signal
import threading
import time

import pyarrow.parquet as pq
import pytest

from curation.catalog import Catalog
from curation.ingest import ingest
from sft_generation.build import build_sft, rows_from_sft_samples
from sft_generation.config import FilterConfig
from sft_generation.responses import make_row

pytestmark = pytest.mark.shared_data

TRACES = "sft_r1distill_math_traces_thoughtanchors.jsonl"
FAST = FilterConfig(decontaminate=False)


@pytest.fixture()
def traces(pools_dir, data_root, tmp_path):
    """12 real traces that close their thinking (each one is sent to the verifier)."""
    raw = [json.loads(line) for line in open(pools_dir / TRACES)]
    raw = [r for r in raw if "</think>" in r["solutions"][0]["solution"]][:12]
    src = tmp_path / "traces.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in raw))
    cat = Catalog(data_root)
    ref = ingest(str(src), field_map="thoughtanchors_r1_traces", name="ta", catalog=cat).ref
    return cat, ref, rows_from_sft_samples(cat.load(ref), source=ref)


def _responses(run) -> list[dict]:
    return pq.read_table(run / "responses.parquet").to_pylist()


def _log(data_root):
    return data_root / "cache" / "grades" / "sft.jsonl"  # a data-root cache, like cache/scan


def _log_lines(data_root) -> list[bytes]:
    return _log(data_root).read_bytes().splitlines(keepends=True)


def test_a_rebuild_reuses_every_grade_and_publishes_the_same_set(traces, graded, tmp_path,
                                                                 data_root):  # fmt: skip
    cat, ref, rows = traces
    first = build_sft(copy.deepcopy(rows), name="ta", out_dir=tmp_path / "a", parents=[ref],
                      catalog=cat, filters=FAST, prompts=[4, 12], responses=[1])  # fmt: skip
    assert graded["math"] == 12
    graded["math"] = graded["verify_calls"] = 0
    again = build_sft(copy.deepcopy(rows), name="ta", out_dir=tmp_path / "b", parents=[ref],
                      catalog=cat, filters=FAST, prompts=[4, 12], responses=[1])  # fmt: skip
    assert graded["math"] == graded["verify_calls"] == 0  # no answer verified again
    assert first.counts["grades"] == {"made": 12, "reused": 0, "no_grader": 0, "not_logged": 0,
                                      "log": str(_log(data_root))}  # fmt: skip
    assert again.counts["grades"]["reused"] == 12 and again.counts["grades"]["made"] == 0
    run_json = json.loads((tmp_path / "b" / "run.json").read_text())
    assert run_json["counts"]["grades"]["reused"] == 12
    # what a fresh build published, the same versions, row for row
    assert _responses(tmp_path / "b") == _responses(tmp_path / "a")
    assert again.responses_ref == first.responses_ref
    assert [g["ref"] for g in again.grid] == [g["ref"] for g in first.grid]
    # other filters over the same responses: still no grading work
    other = build_sft(copy.deepcopy(rows), name="ta", out_dir=tmp_path / "c", catalog=cat,
                      filters=FilterConfig(decontaminate=False, keep_policy="all"), publish=False)  # fmt: skip
    assert graded["math"] == 0 and other.counts["grades"]["reused"] == 12
    assert len(_log_lines(data_root)) == 12  # nothing written twice


def test_a_changed_reference_regrades_only_that_response(traces, graded, tmp_path, data_root):
    cat, _, rows = traces
    build_sft(copy.deepcopy(rows), name="ta", out_dir=tmp_path / "a", catalog=cat, filters=FAST,
              publish=False)  # fmt: skip
    before = {r["uid"]: r for r in _responses(tmp_path / "a")}
    target = next(r for r in rows if before[r["uid"]]["verification"] == "correct")
    changed = copy.deepcopy(rows)
    for r in changed:
        if r["uid"] == target["uid"]:
            r["reference_answer"] = "-98765"  # a corrected pool's answer, say
    graded["math"] = 0
    res = build_sft(changed, name="ta", out_dir=tmp_path / "b", catalog=cat, filters=FAST,
                    publish=False)  # fmt: skip
    assert graded["math"] == 1
    assert res.counts["grades"]["made"] == 1 and res.counts["grades"]["reused"] == 11
    after = {r["uid"]: r for r in _responses(tmp_path / "b")}
    assert after[target["uid"]]["verification"] == "incorrect"  # graded against the new one
    cols = ("verification", "verification_reason", "extracted")
    for uid, r in after.items():
        if uid != target["uid"]:
            assert [r[c] for c in cols] == [before[uid][c] for c in cols]
    # the old reference's grade stays valid for the old reference
    graded["math"] = 0
    build_sft(copy.deepcopy(rows), name="ta", out_dir=tmp_path / "c", catalog=cat, filters=FAST,
              publish=False)  # fmt: skip
    assert graded["math"] == 0


def test_changed_tests_rerun_only_that_problems_programs(pools_dir, data_root, tmp_path, graded):
    cat = Catalog(data_root)
    res = ingest(str(pools_dir / "code_leetcodedataset_v0.2.0_train.jsonl"),
                 field_map="leetcodedataset", name="lc", catalog=cat, limit=3)  # fmt: skip
    problems = {p["uid"]: p for p in cat.load(res.ref).to_pylist()}
    rows = []
    for p in problems.values():
        for seed in (0, 1):  # the reference solution, and a broken one
            code = p["solutions"][0]
            if seed:
                code = code.replace("return ", "return None and ", 1)
            rows.append(make_row(problem={"uid": p["uid"], "domain": "code", "source": "lc"},
                                 prompt=p["problem"], text=f"Done.</think>\n\n```python\n{code}\n```",
                                 model="teacher", sampling_params={"seed": seed},
                                 sample_index=seed, prompt_hash="h"))  # fmt: skip
    fast = FilterConfig(decontaminate=False, near_dup_threshold=None)
    first = build_sft(copy.deepcopy(rows), name="lc", out_dir=tmp_path / "a", catalog=cat,
                      problems=problems, filters=fast, publish=False)  # fmt: skip
    assert graded["code"] == 6
    assert (
        sorted(r["verification"] for r in _responses(tmp_path / "a"))
        == ["failed"] * 3 + ["passed"] * 3
    )
    graded["code"] = 0
    build_sft(copy.deepcopy(rows), name="lc", out_dir=tmp_path / "b", catalog=cat,
              problems=problems, filters=fast, publish=False)  # fmt: skip
    assert graded["code"] == 0  # no program ran again
    assert first.counts["grades"]["made"] == 6
    assert _responses(tmp_path / "b") == _responses(tmp_path / "a")
    fixed = copy.deepcopy(problems)
    uid = next(iter(fixed))
    fixed[uid]["tests"] = fixed[uid]["tests"][:-1]  # the pool's tests of one problem changed
    again = build_sft(copy.deepcopy(rows), name="lc", out_dir=tmp_path / "c", catalog=cat,
                      problems=fixed, filters=fast, publish=False)  # fmt: skip
    assert graded["code"] == 2  # that problem's two programs, nothing else
    assert again.counts["grades"]["made"] == 2 and again.counts["grades"]["reused"] == 4


def test_a_torn_log_line_is_skipped_and_regraded(traces, graded, tmp_path, data_root):
    """A SIGKILL during an append leaves the last line without its newline; a line of junk in
    the middle (a hand edit) is no grade either. Both are graded again, nothing else is."""
    cat, _, rows = traces
    build_sft(copy.deepcopy(rows), name="ta", out_dir=tmp_path / "a", catalog=cat, filters=FAST,
              publish=False)  # fmt: skip
    path = _log(data_root)
    lines = _log_lines(data_root)
    assert len(lines) == 12
    lines[5] = b'{"key":"' + json.loads(lines[5])["key"].encode() + b'","status":\n'
    path.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    graded["math"] = 0
    res = build_sft(copy.deepcopy(rows), name="ta", out_dir=tmp_path / "b", catalog=cat,
                    filters=FAST, publish=False)  # fmt: skip
    assert graded["math"] == 2
    assert res.counts["grades"]["made"] == 2 and res.counts["grades"]["reused"] == 10
    assert _responses(tmp_path / "b") == _responses(tmp_path / "a")
    after = _log_lines(data_root)
    assert all(line.endswith(b"\n") for line in after)  # the torn tail was cut, not appended to
    good = [json.loads(line) for line in after if line != lines[5]]
    assert len(good) == 12 and len({g["key"] for g in good}) == 12


def test_a_build_stopped_mid_grading_resumes_with_the_grades_it_made(traces, graded, tmp_path,
                                                                     data_root, monkeypatch):  # fmt: skip
    """A SIGTERM to the verification workers (systemd stopping the job) in the second chunk: the
    first chunk's grades are in the log, the stopped chunk left no grade (VerifierStopped, not
    'worker died'); the rerun grades the rest only and builds what a fresh build does."""
    import sft_generation.responses as responses
    from rl_pools import verify
    from rl_pools.verify import VerifierStopped

    cat, _, rows = traces
    monkeypatch.setattr(responses, "_MATH_CHUNK", 4)
    counted = verify.MathVerifier.verify

    def stop_second_chunk(self, answers, references):
        if graded["verify_calls"] == 1:  # the second chunk: stop the worker on its answer
            w = self._workers[0]
            os.kill(w.proc.pid, signal.SIGSTOP)

            def stop() -> None:
                deadline = time.monotonic() + 30
                while w.task is None and time.monotonic() < deadline:
                    time.sleep(0.01)
                os.kill(w.proc.pid, signal.SIGTERM)
                os.kill(w.proc.pid, signal.SIGCONT)

            threading.Thread(target=stop, daemon=True).start()
        return counted(self, answers, references)

    monkeypatch.setattr(verify.MathVerifier, "verify", stop_second_chunk)
    with pytest.raises(VerifierStopped):
        build_sft(copy.deepcopy(rows), name="ta", out_dir=tmp_path / "a", catalog=cat,
                  filters=FAST, publish=False, workers=1)  # fmt: skip
    assert len(_log_lines(data_root)) == 4  # the first chunk only
    monkeypatch.setattr(verify.MathVerifier, "verify", counted)
    graded["math"] = 0
    res = build_sft(copy.deepcopy(rows), name="ta", out_dir=tmp_path / "b", catalog=cat,
                    filters=FAST, publish=False, workers=1)  # fmt: skip
    assert graded["math"] == 8 and res.counts["grades"]["reused"] == 4
    fresh = build_sft(copy.deepcopy(rows), name="ta", out_dir=tmp_path / "c", catalog=cat,
                      filters=FAST, publish=False, grade_log=tmp_path / "fresh.jsonl")  # fmt: skip
    assert fresh.counts["grades"]["made"] == 12
    assert _responses(tmp_path / "b") == _responses(tmp_path / "c")
