"""Unlucky operators (issue 15 items 9, 10, 13, 14): a full disk, a read-only data root, a bad
--out, a failed rerun, empty or odd input. Each must end in one line that names the path or
field and the fix, exit code 2, and leave what was there intact.

The full disk and the read-only root are real: a 20 MB tmpfs and a read-only bind mount, made
inside a private mount namespace (``unshare``) so nothing leaks onto the host's mounts."""

from __future__ import annotations

import json
import os
import random
import shutil
import string
import subprocess
import sys
from pathlib import Path

import pytest
from flow_helpers import kill_all, server_children

SLUICE = str(Path(sys.executable).with_name("sluice"))


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def _one_error_line(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr + p.stdout, p.stderr[-3000:]
    errors = [ln for ln in _lines(p.stderr) if ln.startswith("error:")]
    assert len(errors) == 1, p.stderr
    return errors[0]


def _in_mount_namespace(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run a bash script in a private mount namespace (root: plain; else a user namespace)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("unshare (util-linux) missing")
    flags = ["-m"] if os.geteuid() == 0 else ["-r", "-m"]
    probe = subprocess.run([unshare, *flags, "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.decode()[:200]}")
    f = tmp_path / "script.sh"
    f.write_text("set -u\n" + script)
    return subprocess.run(
        [unshare, *flags, "bash", str(f)], capture_output=True, text=True, timeout=600
    )


def _sluice(*args: str, root: Path | None = None, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if root is not None:
        env["SLUICE_DATA_ROOT"] = str(root)
    return subprocess.run(
        [SLUICE, *args], capture_output=True, text=True, env=env, timeout=600, **kw
    )


@pytest.fixture()
def aime_head(pools_dir, tmp_path) -> Path:
    src = pools_dir / "math_ttrl_aime24_as_train.jsonl"
    dst = tmp_path / "aime.jsonl"
    dst.write_text("".join(src.read_text().splitlines(keepends=True)[:30]))
    return dst


# -- item 9: full disk, read-only root, bad --out ----------------------------------------------


def test_full_data_root_is_one_line_naming_the_root(tmp_path):
    rnd = random.Random(0)
    big = tmp_path / "big.jsonl"
    with open(big, "w") as f:  # ~36 MB of incompressible text: more than the 20 MB tmpfs holds
        for i in range(12000):
            text = "".join(rnd.choices(string.ascii_letters + " ", k=3000))
            f.write(json.dumps({"id": str(i), "problem": text, "answer": str(i)}) + "\n")
    root = tmp_path / "full"
    root.mkdir()
    p = _in_mount_namespace(
        f"mount -t tmpfs -o size=20m tmpfs {root}\n"
        f"SLUICE_DATA_ROOT={root} {SLUICE} ingest {big} --map generic_math --name big\n"
        "rc=$?\n"
        f"echo staging-left: $(ls {root}/staging | wc -l) >&2\n"
        "exit $rc\n",
        tmp_path,
    )
    line = _one_error_line(p)
    assert "no space left" in line and str(root) in line, line
    assert "staging-left: 0" in p.stderr  # the scratch folder went away with the failure


def test_read_only_root_reads_work_and_writes_are_one_line(aime_head, tmp_path):
    root = tmp_path / "root"
    assert (
        _sluice("ingest", str(aime_head), "--map", "ttrl", "--name", "aime", root=root).returncode
        == 0
    )
    out = tmp_path / "out"
    out.mkdir()
    env = f"SLUICE_DATA_ROOT={root} XDG_CACHE_HOME={tmp_path / 'cache'}"
    run = f"{env} {SLUICE} decontam run aime --text-field problem --benchmarks aime24 --detectors ngram"
    p = _in_mount_namespace(
        f"mount --bind {root} {root} && mount -o remount,bind,ro {root}\n"
        f"{env} {SLUICE} datasets list --json > {out}/list.json; echo list=$? >&2\n"
        f"{env} {SLUICE} datasets verify aime; echo verify=$? >&2\n"
        f"{run} --out {out}/r1 --no-publish > /dev/null; echo scan=$? >&2\n"
        f"{env} {SLUICE} ingest {aime_head} --map ttrl --name aime2 2> {out}/ingest.err;"
        f" echo ingest=$? >&2\n"
        f"{run} --out {out}/r2 2> {out}/publish.err > /dev/null; echo publish=$? >&2\n",
        tmp_path,
    )
    err = p.stderr
    assert "list=0" in err and "verify=0" in err and "scan=0" in err, err
    assert "aime" in [d["name"] for d in json.loads((out / "list.json").read_text())]
    assert "is not writable; keeping caches in" in err  # decontam needs no --no-cache there
    assert (out / "r1" / "run.json").is_file()
    for name, code in (("ingest", "ingest=2"), ("publish", "publish=2")):
        assert code in err, err
        text = (out / f"{name}.err").read_text()
        errors = [ln for ln in _lines(text) if ln.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in text, text
        assert "read-only" in errors[0] and str(root) in errors[0], errors[0]
    assert not (out / "r2").exists()  # the failed run left no run directory


def test_read_only_root_copied_without_its_catalog_file_is_read_from_the_manifests(
    aime_head, tmp_path
):
    """A data root copied without catalog.duckdb (the version manifests beside the objects
    hold everything) and mounted read-only: `sluice datasets rebuild` cannot write there, so
    reads restore the catalog in memory; a writable root still says to rebuild."""
    root = tmp_path / "root"
    ingest = _sluice("ingest", str(aime_head), "--map", "ttrl", "--name", "aime", root=root)
    assert ingest.returncode == 0, ingest.stderr
    before = _sluice("datasets", "list", "--json", root=root)
    (root / "catalog.duckdb").unlink()
    line = _one_error_line(_sluice("datasets", "list", root=root))
    assert "sluice datasets rebuild" in line, line
    out = tmp_path / "out"
    out.mkdir()
    env = f"SLUICE_DATA_ROOT={root} XDG_CACHE_HOME={tmp_path / 'cache'}"
    p = _in_mount_namespace(
        f"mount --bind {root} {root} && mount -o remount,bind,ro {root}\n"
        f"{env} {SLUICE} datasets list --json > {out}/list.json; echo list=$? >&2\n"
        f"{env} {SLUICE} datasets verify aime; echo verify=$? >&2\n"
        f"{env} {SLUICE} datasets show aime@latest > /dev/null; echo show=$? >&2\n",
        tmp_path,
    )
    assert "list=0" in p.stderr and "verify=0" in p.stderr and "show=0" in p.stderr, p.stderr
    assert json.loads((out / "list.json").read_text()) == json.loads(before.stdout)
    assert not (root / "catalog.duckdb").exists()


def test_out_that_is_a_file_or_not_writable_is_refused_before_the_scan(aime_head, tmp_path):
    a_file = tmp_path / "taken"
    a_file.write_text("x")
    args = ["decontam", "run", str(aime_head), "--text-field", "prompt", "--benchmarks", "aime24"]
    args += ["--detectors", "ngram", "--no-publish"]
    line = _one_error_line(_sluice(*args, "--out", str(a_file), root=tmp_path / "r"))
    assert str(a_file) in line and "is a file" in line
    line = _one_error_line(_sluice(*args, "--out", str(a_file / "sub"), root=tmp_path / "r"))
    assert str(a_file) in line
    ro = tmp_path / "ro"
    ro.mkdir()
    p = _in_mount_namespace(
        f"mount --bind {ro} {ro} && mount -o remount,bind,ro {ro}\n"
        f"SLUICE_DATA_ROOT={tmp_path / 'r'} {SLUICE} " + " ".join(args) + f" --out {ro}/run\n",
        tmp_path,
    )
    line = _one_error_line(p)
    assert str(ro) in line and "not writable" in line


def test_a_root_or_out_where_no_folder_can_be_made_is_one_line(aime_head, tmp_path):
    """/proc refuses new folders with ENOENT (not EACCES/EROFS): a --root or --out there is a
    storage error naming the path, for ingest, decontam run and benchmarks prepare (was
    FileNotFoundError's traceback); a missing input file is still called missing."""
    bad = "/proc/sluice-no-such-place"
    line = _one_error_line(
        _sluice("ingest", str(aime_head), "-n", "a", "-m", "ttrl", "--root", bad)
    )
    assert bad in line and "cannot be created there" in line
    line = _one_error_line(_sluice("benchmarks", "prepare", "--detectors", "ngram", "--root", bad))
    assert bad in line and "cannot be created there" in line
    args = ["decontam", "run", str(aime_head), "--text-field", "prompt", "--benchmarks", "aime24"]
    args += ["--detectors", "ngram", "--no-publish", "--out", f"{bad}/run"]
    line = _one_error_line(_sluice(*args, root=tmp_path / "r"))
    assert bad in line and "cannot be created there" in line
    line = _one_error_line(_sluice("ingest", str(tmp_path / "none.jsonl"), "-n", "a",
                                   root=tmp_path / "r"))  # fmt: skip
    assert "source not found" in line


def test_benchmarks_prepare_fails_when_its_fits_cannot_be_kept(tmp_path, benchmarks_dir):
    """A run's fit cache is best effort; keeping it is `benchmarks prepare`'s whole job: a fit
    cache folder that exists but refuses writes (read-only here) is an error, not "fitted ...
    (data root fit cache)" with exit 0."""
    fit = tmp_path / "r" / "cache" / "fit"
    fit.mkdir(parents=True)
    p = _in_mount_namespace(
        f"mount --bind {fit} {fit} && mount -o remount,bind,ro {fit}\n"
        f"{SLUICE} benchmarks prepare --detectors ngram --benchmarks aime24 --root {tmp_path / 'r'} "
        f"--benchmarks-dir {benchmarks_dir}\n",
        tmp_path,
    )
    line = _one_error_line(p)
    assert str(fit) in line and "ngram fitted but not kept" in line
    assert "Read-only file system" in p.stderr  # the warning says why


def test_out_that_holds_other_files_is_refused_and_left_intact(aime_head, tmp_path):
    """--out replaces only an empty folder or an earlier run directory: a project folder (here
    holding the input itself) or the current folder is refused before the scan, nothing lost."""
    proj = tmp_path / "proj"
    proj.mkdir()
    src = proj / "aime.jsonl"
    shutil.copy(aime_head, src)
    (proj / "notes.md").write_text("mine")
    before = sorted(p.name for p in proj.iterdir())
    args = ["decontam", "run", str(src), "--text-field", "prompt", "--benchmarks", "aime24"]
    args += ["--detectors", "ngram", "--no-publish"]
    line = _one_error_line(_sluice(*args, "--out", str(proj), root=tmp_path / "r"))
    assert str(proj) in line and "not empty" in line and "new or empty folder" in line, line
    assert sorted(p.name for p in proj.iterdir()) == before
    assert src.read_bytes() == aime_head.read_bytes()
    line = _one_error_line(_sluice(*args, "--out", ".", root=tmp_path / "r", cwd=proj))
    assert "current folder" in line and "new or empty folder" in line, line
    assert sorted(p.name for p in proj.iterdir()) == before
    # an empty folder and an earlier run directory are written (the latter replaced)
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "empty"):
        p = _sluice(*args, "--out", str(out), root=tmp_path / "r")
        assert p.returncode == 0, p.stderr
    assert (tmp_path / "empty" / "run.json").is_file()


def test_out_filled_during_the_scan_is_not_replaced(tmp_path):
    from curation import rundir
    from curation.errors import StorageError
    from decontam.run import RUN_DIR_KIND

    out = tmp_path / "out"
    tmp = rundir.start(out, kind=RUN_DIR_KIND)
    (tmp / "run.json").write_text(json.dumps({"schema_version": "decontam_run/1"}))
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    with pytest.raises(StorageError, match="not empty"):
        rundir.finish(tmp, out, kind=RUN_DIR_KIND)
    assert (out / "thesis.tex").read_text() == "years of work"
    (out / "thesis.tex").unlink()
    (out / "run.json").write_text(json.dumps({"schema_version": "other_tool/3"}))
    with pytest.raises(StorageError, match="not empty"):
        rundir.finish(tmp, out, kind=RUN_DIR_KIND)
    (out / "run.json").write_text(json.dumps({"schema_version": "decontam_run/1", "old": 1}))
    rundir.finish(tmp, out, kind=RUN_DIR_KIND)  # an earlier run directory: replaced
    assert json.loads((out / "run.json").read_text()) == {"schema_version": "decontam_run/1"}


def test_invalid_utf8_in_the_input_is_one_line_naming_file_row_and_byte(aime_head, tmp_path):
    """A bad byte in a scanned text or in the --id-field: one error line, no run directory (it
    gave a traceback, or out-of-spec Parquet that reports could not read)."""
    lines = aime_head.read_bytes().splitlines(True)
    for i, (old, new) in enumerate(
        ((b'"prompt": "', b'"prompt": "\xff'), (b'"id": "', b'"id": "\xe9'))
    ):
        src = tmp_path / f"bad{i}.jsonl"
        src.write_bytes(b"".join([*lines[:4], lines[4].replace(old, new, 1), *lines[5:]]))
        out = tmp_path / f"run{i}"
        p = _decontam(src, "prompt", out, tmp_path / "root", "--id-field", "id", "--no-publish")
        line = _one_error_line(p)
        assert f"file {src}, row 5: invalid UTF-8 at byte" in line, line
        assert not out.exists()


# -- item 10: a failed rerun, a run directory whose files disagree ------------------------------


def _decontam(src: Path, field: str, out: Path, root: Path, *extra: str):
    return _sluice(
        "decontam", "run", str(src), "--text-field", field, "--benchmarks", "aime24",
        "--detectors", "ngram", "--out", str(out), *extra, root=root,
    )  # fmt: skip


def test_failed_rerun_leaves_the_previous_run_directory_as_it_was(aime_head, pools_dir, tmp_path):
    out, root = tmp_path / "run", tmp_path / "root"
    assert _decontam(aime_head, "prompt", out, root, "--no-publish").returncode == 0
    before = {f.name: f.read_bytes() for f in out.iterdir()}
    gsm = tmp_path / "gsm.jsonl"
    gsm.write_text(
        "".join((pools_dir / "math_gsm8k_train.jsonl").read_text().splitlines(True)[:40])
    )
    # fails after the scan, while publishing (an invalid dataset name)
    p = _decontam(gsm, "question", out, root, "--publish-as", "bad name!")
    _one_error_line(p)
    assert {f.name: f.read_bytes() for f in out.iterdir()} == before
    assert [f.name for f in tmp_path.iterdir() if f.name.startswith(".run")] == []
    rep = _sluice("report", "contamination", str(out), "--out", str(tmp_path / "rep"))
    assert rep.returncode == 0, rep.stderr


def test_report_refuses_a_run_directory_whose_files_disagree(aime_head, pools_dir, tmp_path):
    root = tmp_path / "root"
    a, b = tmp_path / "a", tmp_path / "b"
    gsm = tmp_path / "gsm.jsonl"
    gsm.write_text(
        "".join((pools_dir / "math_gsm8k_train.jsonl").read_text().splitlines(True)[:30])
    )
    assert _decontam(aime_head, "prompt", a, root, "--no-publish").returncode == 0
    assert _decontam(gsm, "question", b, root, "--no-publish").returncode == 0
    shutil.copy(b / "decisions.parquet", a / "decisions.parquet")  # the mix a crash could leave
    line = _one_error_line(_sluice("report", "contamination", str(a), "--out", str(tmp_path / "r")))
    assert "inconsistent" in line and "decisions.parquet" in line and str(a) in line


# -- item 13: quiet successes that must not be ---------------------------------------------------


def test_empty_or_all_rejected_input_is_an_error_unless_allowed(tmp_path):
    root = tmp_path / "root"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    line = _one_error_line(
        _sluice("ingest", str(empty), "--map", "generic_math", "--name", "e", root=root)
    )
    assert "no usable rows" in line and str(empty) in line and "--allow-empty" in line
    bad = tmp_path / "bad.jsonl"
    rows = [{"id": str(i), "problem": " ", "answer": "1"} for i in range(5)]
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    line = _one_error_line(
        _sluice("ingest", str(bad), "--map", "generic_math", "--name", "b", root=root)
    )
    assert "rejected 5" in line and "empty text" in line, line
    from curation.catalog import Catalog

    assert Catalog(root).datasets() == []  # nothing published, not even the rejects
    p = _sluice(
        "ingest", str(empty), "--map", "generic_math", "--name", "e", "--allow-empty", root=root
    )
    assert p.returncode == 0, p.stderr
    assert Catalog(root).resolve("e").num_rows == 0


def test_empty_benchmark_list_and_non_text_fields_are_errors(aime_head, tmp_path):
    root = tmp_path / "root"
    base = ["decontam", "run", str(aime_head), "--text-field", "prompt", "--detectors", "ngram"]
    for flag in ("--benchmarks", "--detectors"):
        args = (
            [a for a in base if a not in ("--detectors", "ngram")]
            if flag == "--detectors"
            else base
        )
        line = _one_error_line(_sluice(*args, flag, ",", "--out", str(tmp_path / "o"), root=root))
        assert flag in line and "names nothing" in line
    odd = tmp_path / "odd.jsonl"
    rows = [{"id": "a", "problem": "fine text"}, {"id": "b", "problem": 5}]
    rows += [{"id": "c", "problem": {"t": "x"}}, {"id": "d", "problem": True}]
    odd.write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = _sluice(
        "decontam", "run", str(odd), "--text-field", "problem", "--benchmarks", "aime24",
        "--detectors", "ngram", "--out", str(tmp_path / "o2"), "--no-publish", root=root,
    )  # fmt: skip
    line = _one_error_line(p)
    assert "row 2" in line and "'problem'" in line and "of type int" in line, line
    assert not (tmp_path / "o2").exists()


# -- item 14: `sluice run` checks its config before starting anything ----------------------------


def test_run_with_a_bad_benchmark_fails_before_prefect_starts(aime_head, tmp_path):
    root = tmp_path / "root"
    cfg = tmp_path / "pipeline.toml"
    cfg.write_text(
        f'data_root = "{root}"\n\n[benchmarks]\nnames = ["aime24", "aime2O"]\n\n'
        f'[[pools]]\nname = "aime"\nsource = "{aime_head}"\nmap = "ttrl"\n'
        'text_fields = ["problem"]\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.pop("PREFECT_HOME", None)  # defaults to <root>/prefect: must stay absent
    p = subprocess.run(
        [SLUICE, "run", str(cfg)], capture_output=True, text=True, env=env, timeout=300
    )
    line = _one_error_line(p)
    assert "aime2O" in line and "aime25" in line  # names the bad one and a close match
    assert len(_lines(p.stdout + p.stderr)) == 1, p.stdout + p.stderr
    assert not root.exists()  # no Prefect home, no catalog, nothing ingested


def test_run_whose_pool_fails_inside_the_flow_prints_no_traceback(aime_head, tmp_path):
    """A pool that passes the checks before the server but whose every row is rejected fails
    inside the flow: Prefect's run loggers say so in one line each, without the engine's
    traceback (80 lines of Prefect frames for an explained error), and the CLI's one error
    line names the file and the reject."""
    root = tmp_path / "root"
    bad = tmp_path / "bad.jsonl"
    rows = [{"uid": f"u{i}", "problem": " ", "answer": "1"} for i in range(3)]
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = tmp_path / "pipeline.toml"
    cfg.write_text(
        f'data_root = "{root}"\n\n[benchmarks]\nnames = ["aime24"]\n\n'
        '[detectors]\nnames = ["ngram"]\n\n'
        f'[[pools]]\nname = "bad"\nsource = "{bad}"\nmap = "auto"\n'
        'text_fields = ["problem"]\nid_field = "uid"\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    p = subprocess.run(
        [SLUICE, "run", str(cfg)], capture_output=True, text=True, env=env, timeout=300
    )
    assert "pools failed" in _one_error_line(p)  # exit 2, no "Traceback", one error: line
    tail = p.stderr[p.stderr.index("error:") :]
    assert str(bad) in tail and "empty text" in tail, tail
    assert "Encountered exception during execution: InputError" in p.stderr  # still logged


def test_run_logger_keeps_the_traceback_of_a_bug():
    """The filter drops tracebacks of explained errors only: anything else is a bug."""
    import logging

    from curation.errors import InputError
    from flows.prefect_logs import ExplainedErrorFilter

    def record(exc: BaseException) -> logging.LogRecord:
        try:
            raise exc
        except BaseException:
            return logging.LogRecord("prefect.flow_runs", logging.ERROR, __file__, 1, "failed",
                                     None, sys.exc_info())  # fmt: skip

    f = ExplainedErrorFilter()
    explained = record(InputError("x.jsonl: row 2, field 'problem': empty text"))
    assert f.filter(explained) and explained.exc_info is None
    try:
        try:
            raise InputError("bad row")
        except InputError as exc:
            raise RuntimeError("wrapped") from exc
    except RuntimeError as exc:
        wrapped = record(exc)
    assert f.filter(wrapped) and wrapped.exc_info is None  # raised from an explained error
    bug = record(KeyError("problem"))
    assert f.filter(bug) and bug.exc_info is not None


def test_run_names_every_pool_that_cannot_run_before_prefect_starts(aime_head, tmp_path):
    """A missing source, an unknown map, a text field the map does not produce and a text
    field given as a string: one error naming each pool, before the server, nothing
    ingested (not Prefect tracebacks after the first pool was published)."""
    root = tmp_path / "root"
    cfg = tmp_path / "pipeline.toml"
    pools = [
        ("good", aime_head, "ttrl", '["problem"]'),
        ("gone", tmp_path / "absent.jsonl", "ttrl", '["problem"]'),
        ("nomap", aime_head, "nosuchmap", '["problem"]'),
        ("field", aime_head, "ttrl", '["problme"]'),
        ("columns", aime_head, "gsm8k", '["problem"]'),  # the file has no 'question' column
    ]
    cfg.write_text(
        f'data_root = "{root}"\n[benchmarks]\nnames = ["aime24"]\n'
        + "".join(
            f'\n[[pools]]\nname = "{n}"\nsource = "{src}"\nmap = "{m}"\ntext_fields = {tf}\n'
            for n, src, m, tf in pools
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.pop("PREFECT_HOME", None)
    p = subprocess.run(
        [SLUICE, "run", str(cfg)], capture_output=True, text=True, env=env, timeout=300
    )
    line = _one_error_line(p)
    out = p.stdout + p.stderr
    assert "4 of 5 pools cannot run" in line
    assert "pool 'columns'" in out and "'question'" in out
    assert "pool 'gone'" in out and "absent.jsonl" in out
    assert "pool 'nomap'" in out and "nosuchmap" in out
    assert "pool 'field'" in out and "did you mean 'problem'" in out
    assert "pool 'good'" not in out
    assert not root.exists()  # no Prefect home, no catalog, nothing ingested
    cfg.write_text(
        f'data_root = "{root}"\n[[pools]]\nname = "a"\nsource = "{aime_head}"\n'
        'text_fields = "problem"\n'
    )
    p = subprocess.run(
        [SLUICE, "run", str(cfg)], capture_output=True, text=True, env=env, timeout=300
    )
    assert "text_fields must be a list of column names" in _one_error_line(p)


# -- items 11 and 12: the temporary Prefect server -----------------------------------------------


@pytest.mark.timeout(600)
def test_kill_9_of_sluice_run_leaves_no_prefect_server(aime_head, tmp_path):
    import signal
    import time

    import psutil

    root = tmp_path / "root"
    cfg = tmp_path / "pipeline.toml"
    cfg.write_text(
        f'data_root = "{root}"\n\n[benchmarks]\nnames = ["aime24"]\n\n[detectors]\n'
        f'names = ["ngram"]\n\n[[pools]]\nname = "aime"\nsource = "{aime_head}"\nmap = "ttrl"\n'
        'text_fields = ["problem"]\n'
    )
    marker = tmp_path / "reached"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(
        PREFECT_HOME=str(tmp_path / "prefect"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        SLUICE_FLOWS_TEST_HOOK="decontaminate",
        SLUICE_FLOWS_TEST_HOOK_MARKER=str(marker),
    )
    proc = subprocess.Popen(
        [SLUICE, "run", str(cfg)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    servers = []
    try:
        deadline = time.monotonic() + 400  # a guard against hanging, not a timed assertion
        while not marker.exists():
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the run never reached decontamination"
            time.sleep(0.2)
        servers = server_children(proc.pid)
        assert servers, "no temporary Prefect server found under sluice run"
        proc.send_signal(signal.SIGKILL)  # only the main process, as the OOM killer does
        proc.wait()
        gone, alive = psutil.wait_procs(servers, timeout=60)
        assert alive == [], f"orphaned Prefect server(s): {[p.pid for p in alive]}"
    finally:
        kill_all(proc, servers)


def test_server_start_up_timeout_is_configurable_and_says_what_to_do(aime_head, tmp_path):
    root = tmp_path / "root"
    cfg = tmp_path / "pipeline.toml"
    cfg.write_text(
        f'data_root = "{root}"\n\n[benchmarks]\nnames = ["aime24"]\n\n[detectors]\n'
        f'names = ["ngram"]\n\n[[pools]]\nname = "aime"\nsource = "{aime_head}"\nmap = "ttrl"\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(
        PREFECT_HOME=str(tmp_path / "prefect"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        SLUICE_PREFECT_STARTUP_TIMEOUT="0.01",  # no server answers its health check that fast
    )
    p = subprocess.run(
        [SLUICE, "run", str(cfg)], capture_output=True, text=True, env=env, timeout=300
    )
    line = _one_error_line(p)
    assert "health check" in line and "SLUICE_PREFECT_STARTUP_TIMEOUT" in line, line
    assert "PREFECT_API_URL" in line and str(tmp_path / "prefect") in line  # the log's place
    env["SLUICE_PREFECT_STARTUP_TIMEOUT"] = "soon"
    line = _one_error_line(
        subprocess.run([SLUICE, "run", str(cfg)], capture_output=True, text=True, env=env)
    )
    assert "SLUICE_PREFECT_STARTUP_TIMEOUT" in line


# every command whose --out is a folder, with inputs that do not exist: the --out check comes
# before anything else (the `sluice demo` and `rl run` ones would run whole with a good --out)
_FOLDER_OUTS = {
    "decontam run": ["decontam", "run", "nope.jsonl", "--text-field", "t", "--no-publish"],
    "decontam evaluate": ["decontam", "evaluate", "--labels", "nope.jsonl"],
    "report contamination": ["report", "contamination", "nope"],
    "report diff": ["report", "diff", "nope-a", "nope-b"],
    "demo": ["demo"],
    "rl report": ["rl", "report", "nope@latest"],
    "rl run": ["rl", "run", "nope@latest", "--model", "m"],
    "rl export --format trl": ["rl", "export", "nope@latest", "--format", "trl"],
    "rl push": ["rl", "push", "nope@latest", "--repo", "me/x"],
    "sft build": ["sft", "build", "nope.sft_raw@latest"],
    "sft export --push-to-hub": ["sft", "export", "nope@latest", "--push-to-hub", "me/x"],
    "train grpo": ["train", "grpo", "nope.toml"],
    "train export-verl": ["train", "export-verl", "nope.toml"],
}


@pytest.mark.parametrize("command", sorted(_FOLDER_OUTS))
def test_a_folder_out_named_like_a_file_is_refused_before_any_work(
    command, tmp_path, monkeypatch, capsys
):
    """`train export-verl --out X.parquet`, `rl report --out X.parquet`, `rl run --out
    X.parquet` (and the other commands that write a folder) made a folder named X.parquet; an
    existing file or a path inside one failed late or not at all. Each is one line naming
    --out and the fix, exit 2, nothing written."""
    from flows.cli import main

    monkeypatch.setenv("SLUICE_DATA_ROOT", str(tmp_path / "root"))
    monkeypatch.chdir(tmp_path)
    a_file = tmp_path / "taken"
    a_file.write_text("keep")
    for out in (tmp_path / "X.parquet", tmp_path / "x.csv", a_file, a_file / "sub"):
        with pytest.raises(SystemExit) as e:
            main([*_FOLDER_OUTS[command], "--out", str(out)])
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2, err
        assert "Traceback" not in err and len(err.splitlines()) == 1, err
        assert err.startswith(f"error: --out {out} ") and "folder" in err, err
        assert "nothing was written" in err, err
    assert a_file.read_text() == "keep" and sorted(os.listdir(tmp_path)) == ["taken"]
    if command not in ("demo", "rl run"):  # a folder passes the check (and fails on the input)
        with pytest.raises(SystemExit):
            main([*_FOLDER_OUTS[command], "--out", str(tmp_path / "reports")])
        assert "error: --out" not in capsys.readouterr().err
