"""SFT exports: the chat layout TRL's SFTTrainer trains on (loaded and stepped by TRL itself),
and a Hub push staged offline (dry run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from generation_helpers import tiny_model_dir

from curation.hub import dataset_card, push_to_hub
from sft_generation.build import SFT_SET_SCHEMA
from sft_generation.export import export_trl, to_chat


def _set() -> pa.Table:
    rows = [
        {
            "uid": f"r_{i}",
            "problem_uid": f"p_{i}",
            "prompt": f"What is {i} + {i}? Please reason step by step.",
            "reasoning": f"{i} plus {i} is {2 * i}.",
            "final_answer": f"The answer is \\boxed{{{2 * i}}}.",
            "generator_model": "teacher",
            "verification": "correct",
        }
        for i in range(6)
    ]
    return pa.Table.from_pylist(rows, schema=SFT_SET_SCHEMA)


def test_inline_and_split_layouts():
    t = _set()
    inline = to_chat(t).to_pylist()[1]["messages"]
    assert inline[0] == {"role": "user", "content": t["prompt"][1].as_py()}
    assert inline[1]["content"] == "<think>\n1 plus 1 is 2.\n</think>\n\nThe answer is \\boxed{2}."
    split = to_chat(t, reasoning="split").to_pylist()[1]
    assert split["messages"][1]["content"] == "The answer is \\boxed{2}."
    assert split["reasoning"] == split["messages"][1]["reasoning_content"] == "1 plus 1 is 2."


def test_trl_sft_trainer_trains_on_the_export(tmp_path):
    from datasets import load_dataset
    from trl import SFTConfig, SFTTrainer

    path = export_trl(_set(), tmp_path / "export")
    ds = load_dataset("parquet", data_files=str(path), split="train")
    assert ds.column_names[0] == "messages" and len(ds) == 6
    model = tiny_model_dir(tmp_path / "m")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    args = SFTConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=2,
        bf16=False,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        use_cpu=True,
    )
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(str(model)),
        args=args,
        train_dataset=ds.select_columns(["messages"]),
        processing_class=tok,
    )
    out = trainer.train()
    assert out.global_step == 2 and out.training_loss > 0
    # TRL rendered the assistant turn with the thinking in it
    first = trainer.train_dataset[0]["input_ids"]
    assert "<think>" in tok.decode(first)


def test_push_to_hub_dry_run_stages_files_and_card(tmp_path):
    chat = to_chat(_set())
    card = dataset_card("me/sft-demo", title="SFT demo", lineage=["x.sft.all@abc", "x.sft_raw@def"])
    res = push_to_hub({"train": chat}, "me/sft-demo", card=card, dry_run=True, staging_dir=tmp_path)
    assert res.dry_run and res.splits == {"train": 6}
    from datasets import load_dataset

    back = load_dataset("parquet", data_files=str(tmp_path / res.files[0]), split="train")
    assert back[0]["messages"] == chat.to_pylist()[0]["messages"]
    assert "`x.sft_raw@def`" in (tmp_path / "README.md").read_text()
    assert json.loads((tmp_path / "push_plan.json").read_text())["repo_id"] == "me/sft-demo"
    from curation.errors import ConfigError

    with pytest.raises(ConfigError, match="OWNER/NAME"):
        push_to_hub({"train": chat}, "no-slash", card=card, staging_dir=tmp_path)


@pytest.mark.shared_data
def test_only_an_sft_set_is_exported(pools_dir, data_root, tmp_path):
    """`sluice sft export` of NAME.sft_responses (every response, the dropped ones too), of
    NAME.sft_raw or of ingested, ungraded traces wrote them as training data; each is one error
    line naming the kind of dataset and what to export, and nothing is written."""
    import os
    import subprocess
    import sys

    ref, res = _few_build(pools_dir, data_root, tmp_path)
    env = {**os.environ, "SLUICE_DATA_ROOT": str(data_root)}

    def export(what, out):
        return subprocess.run(
            [sys.executable, "-c", "from flows.cli import run; run()", "sft", "export", what,
             "--out", str(out), "--root", str(data_root)],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    for what, kind in ((res.responses_ref, "sft_response/1"), (ref, "sft_sample/1")):
        r = export(what, tmp_path / "x")
        assert r.returncode == 2, (what, r.stderr)
        assert f"is not an SFT set (schema {kind!r})" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and not (tmp_path / "x").exists()
    r = export(res.grid[0]["ref"], tmp_path / "ok")
    assert r.returncode == 0 and (tmp_path / "ok" / "train.parquet").is_file(), r.stderr


@pytest.mark.shared_data
def test_dry_run_without_push_to_hub_is_refused(pools_dir, data_root, tmp_path, capsys):
    """`sluice sft export SET --out DIR --dry-run` without --push-to-hub wrote the export as if
    --dry-run were not there; it is one error line naming both options, nothing written."""
    from curation.catalog import Catalog
    from curation.ingest import ingest
    from flows.cli import main
    from sft_generation.build import build_sft, rows_from_sft_samples
    from sft_generation.config import FilterConfig

    traces = pools_dir / "sft_r1distill_math_traces_thoughtanchors.jsonl"
    src = tmp_path / "few.jsonl"
    with open(traces, encoding="utf-8") as f:
        src.write_text("".join(line for _, line in zip(range(4), f, strict=False)))
    cat = Catalog(data_root)
    ref = ingest(str(src), field_map="thoughtanchors_r1_traces", name="few", catalog=cat).ref
    rows = rows_from_sft_samples(cat.load(ref), source=ref)
    res = build_sft(rows, name="few", out_dir=tmp_path / "run", catalog=cat,
                    filters=FilterConfig(decontaminate=False))  # fmt: skip
    out = tmp_path / "x"
    with pytest.raises(SystemExit) as exc:
        main(["sft", "export", res.grid[0]["ref"], "--out", str(out), "--dry-run",
              "--root", str(data_root)])  # fmt: skip
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--dry-run" in err and "--push-to-hub" in err, err
    assert "Traceback" not in err and not out.exists()


def test_an_out_folder_named_like_a_parquet_file_is_refused_and_leaves_nothing(tmp_path):
    """`sluice sft export SET --out runs/x.parquet` where runs/x.parquet is a folder wrote the
    whole export to runs/x.parquet.tmp, left it there and named the temp file in the error.
    It is refused before writing, naming --out; nothing is left beside it."""
    from curation.errors import ConfigError

    (tmp_path / "x.parquet").mkdir()
    with pytest.raises(ConfigError, match=r"--out .*x\.parquet is a folder") as e:
        export_trl(_set(), tmp_path / "x.parquet")
    assert ".tmp" not in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.parquet"]
    assert list((tmp_path / "x.parquet").iterdir()) == []
    path = export_trl(_set(), tmp_path / "ok.parquet")  # a file path still works
    assert path == tmp_path / "ok.parquet" and path.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.parquet", "x.parquet"]


def test_an_r1_distill_student_keeps_the_thinking_only_with_assistant_only_loss(tmp_path):
    """The chat template DeepSeek-R1-Distill checkpoints ship (TRL carries a copy) cuts every
    assistant turn at `</think>`: with SFTTrainer's defaults the inline export trains such a
    student on the answers only, silently. With `assistant_only_loss=True` TRL swaps in its
    training template, which keeps the thinking (what docs/sft.md "Export" tells users)."""
    import trl
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    template = Path(trl.__file__).parent / "chat_templates" / "deepseek_r1_distill.jinja"
    if not template.is_file():
        pytest.skip(f"this TRL ({trl.__version__}) ships no R1-Distill template")
    path = export_trl(_set(), tmp_path / "export")
    ds = load_dataset("parquet", data_files=str(path), split="train")
    model = tiny_model_dir(tmp_path / "m")
    tok = AutoTokenizer.from_pretrained(str(model))
    tok.chat_template = template.read_text()
    seen = {}
    for only in (False, True):
        args = SFTConfig(output_dir=str(tmp_path / f"out{only}"), max_steps=1, bf16=False,
                         per_device_train_batch_size=2, report_to=[], save_strategy="no",
                         use_cpu=True, assistant_only_loss=only)  # fmt: skip
        trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(str(model)), args=args,
                             train_dataset=ds, processing_class=tok)  # fmt: skip
        seen[only] = tok.decode(trainer.train_dataset[1]["input_ids"])
    assert "1 plus 1 is 2." not in seen[False] and "\\boxed{2}" in seen[False]
    assert "1 plus 1 is 2." in seen[True] and "\\boxed{2}" in seen[True]


def _few_build(pools_dir, data_root, tmp_path):
    """4 real R1 traces ingested, and the SFT set built from them (no decontamination):
    (the ingested version's ref, the build result)."""
    from curation.catalog import Catalog
    from curation.ingest import ingest
    from sft_generation.build import build_sft, rows_from_sft_samples
    from sft_generation.config import FilterConfig

    traces = pools_dir / "sft_r1distill_math_traces_thoughtanchors.jsonl"
    src = tmp_path / "few.jsonl"
    with open(traces, encoding="utf-8") as f:
        src.write_text("".join(line for _, line in zip(range(4), f, strict=False)))
    cat = Catalog(data_root)
    ref = ingest(str(src), field_map="thoughtanchors_r1_traces", name="few", catalog=cat).ref
    rows = rows_from_sft_samples(cat.load(ref), source=ref)
    res = build_sft(rows, name="few", out_dir=tmp_path / "run", catalog=cat,
                    filters=FilterConfig(decontaminate=False))  # fmt: skip
    return ref, res


def _few_set(pools_dir, data_root, tmp_path) -> str:
    """An SFT set built from 4 real R1 traces (no decontamination): its grid version's ref."""
    return _few_build(pools_dir, data_root, tmp_path)[1].grid[0]["ref"]


@pytest.mark.shared_data
def test_a_hub_staging_out_named_like_a_file_is_refused(pools_dir, data_root, tmp_path, capsys):
    """`sft export SET --push-to-hub X --dry-run --out staged.parquet` staged the upload into a
    FOLDER named staged.parquet/ (like `rl export --format trl`, which refuses it). A Hub upload
    is staged in a folder: a .parquet --out, or an existing file, is one line naming --out and
    the fix, and nothing is written."""
    from flows.cli import main

    ref = _few_set(pools_dir, data_root, tmp_path)
    capsys.readouterr()
    a_file = tmp_path / "exists.txt"
    a_file.write_text("keep")
    for out in (tmp_path / "staged.parquet", a_file):
        with pytest.raises(SystemExit) as exc:
            main(["sft", "export", ref, "--push-to-hub", "me/few", "--dry-run", "--out", str(out),
                  "--root", str(data_root)])  # fmt: skip
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip()
        assert "Traceback" not in err and len(err.splitlines()) == 1, err
        assert f"--out {out}" in err and "folder" in err, err
    assert not (tmp_path / "staged.parquet").exists() and a_file.read_text() == "keep"
    with pytest.raises(SystemExit) as exc:
        main(["sft", "export", ref, "--push-to-hub", "me/few", "--dry-run", "--out",
              str(tmp_path / "staged"), "--root", str(data_root)])  # fmt: skip
    assert exc.value.code == 0
    assert (tmp_path / "staged" / "data" / "train-00000-of-00001.parquet").is_file()


@pytest.mark.shared_data
def test_a_real_push_keeps_its_staged_copy_in_out(pools_dir, data_root, tmp_path, monkeypatch,
                                                  capsys):  # fmt: skip
    """`sft export SET --push-to-hub X --out DIR` (no --dry-run) required --out and then ignored
    it: nothing was written there. It now stages the upload in DIR, as --dry-run does, before
    pushing it, and says so (the Hub calls are recorded, not sent)."""
    import datasets
    import huggingface_hub

    from flows.cli import main

    ref = _few_set(pools_dir, data_root, tmp_path)
    sent: list = []
    monkeypatch.setattr(datasets.DatasetDict, "push_to_hub",
                        lambda self, repo_id, **kw: sent.append(repo_id))  # fmt: skip
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_file",
                        lambda self, **kw: sent.append(kw["path_in_repo"]))  # fmt: skip
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["sft", "export", ref, "--push-to-hub", "me/few", "--out", str(tmp_path / "copy"),
              "--root", str(data_root)])  # fmt: skip
    assert exc.value.code == 0
    assert sent == ["me/few", "README.md"]
    assert (tmp_path / "copy" / "data" / "train-00000-of-00001.parquet").is_file()
    assert "lineage" in (tmp_path / "copy" / "README.md").read_text().lower()
    err = capsys.readouterr().err
    assert f"pushed me/few; a copy of the files is in {tmp_path / 'copy'}" in err, err
    assert "Creating parquet" not in err, err  # Sluice's lines only, no datasets bar


@pytest.mark.shared_data
def test_a_hub_staging_stopped_midway_leaves_no_plan_beside_its_data(pools_dir, data_root,
                                                                      tmp_path):  # fmt: skip
    """Ctrl-C while `sft export --push-to-hub B --dry-run --out DIR` restaged DIR over an earlier
    staging for A: DIR kept A's push_plan.json and card beside B's data (a folder that looked
    like a finished staging of A). Now the earlier plan and card go first and every file is
    written through a temporary name, the plan last: no plan, no temporary file, and a rerun
    stages B."""
    import signal

    from process_helpers import REPO, sluice_held_after, stop_group

    ref = _few_set(pools_dir, data_root, tmp_path)
    out = tmp_path / "staged"
    env = {"SLUICE_DATA_ROOT": str(data_root)}
    argv = ["sft", "export", ref, "--dry-run", "--out", str(out)]
    res = subprocess.run([sys.executable, "-m", "flows.cli", *argv, "--push-to-hub", "me/a"],
                         env={**os.environ, **env}, capture_output=True, text=True,
                         timeout=300, cwd=REPO)  # fmt: skip
    assert res.returncode == 0, res.stderr
    again = [*argv, "--push-to-hub", "me/b", "--reasoning", "split"]
    proc = sluice_held_after(
        "datasets:Dataset.to_parquet", again, env=env, marker=tmp_path / "held"
    )
    code, err = stop_group(proc, signal.SIGINT)
    assert code == 130 and "Traceback" not in err and "sluice: interrupted" in err, err
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert left == ["data/train-00000-of-00001.parquet"], left  # no plan or card of me/a
    res = subprocess.run([sys.executable, "-m", "flows.cli", *argv, "--push-to-hub", "me/b"],
                         env={**os.environ, **env}, capture_output=True, text=True,
                         timeout=300, cwd=REPO)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert json.loads((out / "push_plan.json").read_text())["repo_id"] == "me/b"
    assert "me/b" in (out / "README.md").read_text()
