"""What `decontam run` takes as input: an excluded set scanned again, a catalog name with '/',
an input inside --out, a detector named twice (found by a tester)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.errors import ConfigError, NotFoundError
from decontam.run import DecontamConfig, run_decontamination

RUN_COLUMNS = ["sluice_sample_uid", "sluice_reasons", "sluice_benchmarks"]


def _config(stream_rows: int = 50_000, detectors=("ngram",)) -> DecontamConfig:
    return DecontamConfig(benchmarks=["aime24"], detectors=list(detectors), stream_rows=stream_rows)


def _mixed(pools_dir: Path) -> pa.Table:
    """5 AIME 2024 problems (contaminated) and 5 GSM8K ones (clean)."""
    rows = [
        json.loads(x)
        for x in (pools_dir / "math_ttrl_aime24_as_train.jsonl").read_text().splitlines()[:5]
    ]
    rows += [
        json.loads(x) for x in (pools_dir / "math_gsm8k_train.jsonl").read_text().splitlines()[:5]
    ]
    return pa.table(
        {
            "uid": [f"s{i}" for i in range(10)],
            "problem": [r.get("prompt") or r.get("question") for r in rows],
        }
    )


@pytest.mark.parametrize("stream_rows", [0, 2])
def test_an_excluded_catalog_version_scanned_again_keeps_its_earlier_run_columns(
    pools_dir, tmp_path, stream_rows
):
    """`decontam run pool.excluded@latest` crashed (KeyError: Field "sluice_benchmarks" exists
    2 times): the run added its columns next to the input's own. The input's are kept, renamed
    input_sluice_*; the run's own keep their names."""
    from curation.catalog import Catalog

    root = tmp_path / "root"
    cat = Catalog(str(root))
    cat.publish("mixed", _mixed(pools_dir), step="test")
    kw = dict(text_fields=["problem"], catalog=cat, data_root=str(root))
    first = run_decontamination(
        "mixed@latest", out_dir=tmp_path / "a", config=_config(stream_rows), **kw
    )
    earlier = cat.load(first.excluded_ref)
    assert earlier.num_rows == 5 and earlier.column_names == ["uid", "problem", *RUN_COLUMNS]

    again = run_decontamination(
        "mixed.excluded@latest", out_dir=tmp_path / "b", config=_config(stream_rows), **kw
    )
    assert again.excluded_ref.startswith("mixed.excluded.excluded@")
    excl = cat.load(again.excluded_ref)
    kept = [f"input_{c}" for c in RUN_COLUMNS]
    assert excl.column_names == ["uid", "problem", *kept, *RUN_COLUMNS]
    for c in RUN_COLUMNS:  # nothing of the input lost: the earlier run's values, row for row
        assert excl[f"input_{c}"].to_pylist() == earlier[c].to_pylist()
    assert excl["sluice_benchmarks"].to_pylist() == [["aime24"]] * 5
    assert pq.read_table(again.out_dir / "excluded.parquet").equals(excl)
    assert again.counts["flagged_by_benchmark"] == {"aime24": 5}
    # the clean rows are the input's rows as they were, columns included
    clean = cat.load(again.clean_ref)
    assert clean.num_rows == 0 and clean.column_names == earlier.column_names


@pytest.mark.parametrize("stream_rows", [0, 2])
def test_an_excluded_file_scanned_again_and_again_keeps_every_earlier_run(
    pools_dir, tmp_path, stream_rows
):
    """The same for a file input (`cp runs/a/excluded.parquet ex.parquet`), over batches of 2
    rows: each scan adds one `input_` to the earlier runs' columns."""
    src = tmp_path / "p.jsonl"
    lines = (pools_dir / "math_ttrl_aime24_as_train.jsonl").read_text().splitlines()[:5]
    src.write_text("\n".join(lines) + "\n")
    kw = dict(text_fields=["prompt"], id_field="id", config=_config(stream_rows), publish=False)
    kw["data_root"] = str(tmp_path / "root")
    first = run_decontamination(str(src), out_dir=tmp_path / "a", **kw)
    shutil.copy(first.out_dir / "excluded.parquet", tmp_path / "ex.parquet")
    second = run_decontamination(str(tmp_path / "ex.parquet"), out_dir=tmp_path / "b", **kw)
    shutil.copy(second.out_dir / "excluded.parquet", tmp_path / "ex2.parquet")
    third = run_decontamination(str(tmp_path / "ex2.parquet"), out_dir=tmp_path / "c", **kw)

    a = pq.read_table(first.out_dir / "excluded.parquet")
    c = pq.read_table(third.out_dir / "excluded.parquet")
    own = [n for n in a.column_names if n not in RUN_COLUMNS]
    assert c.column_names == [
        *own,
        *(f"input_input_{n}" for n in RUN_COLUMNS),
        *(f"input_{n}" for n in RUN_COLUMNS),
        *RUN_COLUMNS,
    ]
    assert c.num_rows == a.num_rows == 5
    for n in RUN_COLUMNS:
        assert c[f"input_input_{n}"].to_pylist() == a[n].to_pylist()
    assert c.select(own).equals(a.select(own))
    # README says so
    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    after = readme[readme.index("then the run's own") :]
    assert after.split("`")[1].split(", ") == RUN_COLUMNS
    assert "`input_input_sluice_reasons`" in after


def test_an_input_column_named_sluice_something_is_kept_once(pools_dir, tmp_path):
    """A streamed run took every `sluice_*` column of the excluded rows for one of its own and
    added it again after the input's: an input column `sluice_note` was in the schema twice.
    Only the columns the run adds are added."""
    rows = [
        {**json.loads(x), "sluice_note": "checked"}
        for x in (pools_dir / "math_ttrl_aime24_as_train.jsonl").read_text().splitlines()[:3]
    ]
    src = tmp_path / "p.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = run_decontamination(
        str(src), text_fields=["prompt"], id_field="id", out_dir=tmp_path / "a",
        config=_config(), publish=False, data_root=str(tmp_path / "root"),
    )  # fmt: skip
    excl = pq.read_table(res.out_dir / "excluded.parquet")
    assert excl.column_names == [*rows[0], *RUN_COLUMNS]
    assert excl["sluice_note"].to_pylist() == ["checked"] * 3


def test_a_catalog_name_with_a_slash_is_read_from_the_catalog(pools_dir, tmp_path, monkeypatch):
    """`sluice ingest --name team/aime` is accepted, but `decontam run team/aime@latest` said
    "input file team/aime@latest not found": a '/' made it a path. A name the catalog holds
    is read from it (also when a folder has that path); an existing file still wins, and a
    name the catalog lacks gets the not-found error, with the close names."""
    from curation.catalog import Catalog

    monkeypatch.chdir(tmp_path)
    root = tmp_path / "root"
    cat = Catalog(str(root))
    v = cat.publish("team/aime", _mixed(pools_dir), step="test")
    kw = dict(text_fields=["problem"], catalog=cat, data_root=str(root), config=_config())
    (tmp_path / "team" / "aime").mkdir(parents=True)  # a folder of the same path
    res = run_decontamination("team/aime@latest", out_dir=tmp_path / "a", **kw)
    assert res.manifest["input"]["ref"] == f"team/aime@{v.version}"
    assert res.counts["contaminated"] == 5
    assert res.clean_ref.startswith("team/aime.decontaminated@")
    res = run_decontamination("team/aime.excluded", out_dir=tmp_path / "b", **kw)
    assert res.manifest["input"]["ref"].startswith("team/aime.excluded@")

    with pytest.raises(NotFoundError, match=r"no dataset 'team/aimee'") as e:
        run_decontamination("team/aimee@latest", out_dir=tmp_path / "c", **kw)
    assert "did you mean 'team/aime'?" in e.value.hint
    with pytest.raises(NotFoundError, match=r"input file team/aime\.jsonl not found"):
        run_decontamination("team/aime.jsonl", out_dir=tmp_path / "c", **kw)
    (tmp_path / "team" / "x").write_text("{}\n")  # a file at the path wins over the catalog
    cat.publish("team/x", _mixed(pools_dir), step="test")
    with pytest.raises(ConfigError, match="unsupported input file type: x"):
        run_decontamination("team/x", out_dir=tmp_path / "c", **kw)


def _first_run(pools_dir, tmp_path) -> tuple[Path, dict]:
    src = tmp_path / "pool.jsonl"
    lines = (pools_dir / "math_ttrl_aime24_as_train.jsonl").read_text().splitlines()[:5]
    src.write_text("\n".join(lines) + "\n")
    kw = dict(config=_config(), data_root=str(tmp_path / "root"), publish=False)
    run_decontamination(str(src), text_fields=["prompt"], out_dir=tmp_path / "run", **kw)
    return tmp_path / "run", kw


@pytest.mark.parametrize("via", ["path", "file link", "folder link", "out link"])
def test_an_input_inside_the_out_folder_is_refused_before_the_run(pools_dir, tmp_path, via):
    """`decontam run runs/a/decisions.parquet ... --out runs/a` replaced runs/a, its input with
    it, and exited 0: run.json named an input whose content was gone. Refused first, naming
    both paths, with links resolved."""
    out, kw = _first_run(pools_dir, tmp_path)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    inp, dest = out / "decisions.parquet", out
    if via == "file link":
        inp = tmp_path / "d.parquet"
        inp.symlink_to(out / "decisions.parquet")
    elif via == "folder link":
        (tmp_path / "link").symlink_to(out)
        inp = tmp_path / "link" / "decisions.parquet"
    elif via == "out link":
        dest = tmp_path / "link"
        dest.symlink_to(out)
    with pytest.raises(ConfigError) as e:
        run_decontamination(str(inp), text_fields=["reasons"], out_dir=dest, **kw)
    assert str(e.value.message).startswith(f"input {inp}")
    assert f"is inside --out {dest}" in e.value.message
    assert "choose another folder for --out" in e.value.hint
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # the same input into another folder runs
    run_decontamination(str(inp), text_fields=["reasons"], out_dir=tmp_path / "other", **kw)


def test_a_detector_named_twice_runs_once(pools_dir, tmp_path):
    """`--detectors ngram,ngram` ran ngram twice: every match recorded twice, and the scan
    cache of an `ngram` run not used. Deduplicated in first-given order, as --text-field is,
    in DecontamConfig itself (the library and the CLI alike)."""
    assert DecontamConfig(detectors=["ngram", "minhash", "ngram"]).detectors == ["ngram", "minhash"]
    assert DecontamConfig(benchmarks=["aime24", "aime24"]).benchmarks == ["aime24"]
    out, kw = _first_run(pools_dir, tmp_path)
    once = json.loads((out / "run.json").read_text())
    twice = run_decontamination(
        str(tmp_path / "pool.jsonl"), text_fields=["prompt"], out_dir=tmp_path / "b",
        detectors=["ngram", "ngram"], **kw,
    )  # fmt: skip
    assert once["counts"]["matches"] > 0
    assert twice.counts["matches"] == once["counts"]["matches"]
    assert pq.read_table(twice.matches_path).num_rows == once["counts"]["matches"]
    assert twice.manifest["config"]["detectors"] == ["ngram"]
    assert twice.counts["texts_cached"] == twice.counts["texts"] == 5  # the first run's scan
