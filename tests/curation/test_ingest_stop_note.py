"""A stopped `sluice ingest` says, in its last line, whether anything was published and how to
go on (curation.shutdown.stop_note), and the rerun it names publishes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from curation.catalog import Catalog


def test_ctrl_c_inside_the_commit_says_it_was_rolled_back_and_the_rerun_publishes(
    tmp_path, data_root
):
    """Ctrl-C while the publish transaction is open (SLUICE_CATALOG_TEST_HOOK=in-transaction):
    the line says the publish was rolled back and nothing is kept; the catalog agrees, and the
    same command again publishes the three datasets."""
    from process_helpers import REPO

    src = tmp_path / "pool.jsonl"
    src.write_text("".join(json.dumps({"problem": f"What is {i} + 1?", "answer": str(i + 1)})
                           + "\n" for i in range(50)))  # fmt: skip
    argv = [sys.executable, "-m", "flows.cli", "ingest", str(src), "--map", "generic_math",
            "--name", "small"]  # fmt: skip
    marker = tmp_path / "reached"
    env = {**os.environ, "PYTHONPATH": str(REPO), "SLUICE_DATA_ROOT": str(data_root)}
    proc = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**env, "SLUICE_CATALOG_TEST_HOOK": "in-transaction",
             "SLUICE_CATALOG_TEST_HOOK_MARKER": str(marker)},
    )  # fmt: skip
    deadline = time.monotonic() + 120  # a guard against hanging, not a timed assertion
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    err = err.decode()
    assert proc.returncode == 130, err[-3000:]
    assert err.rstrip().splitlines()[-2:] == [
        "sluice: interrupted (SIGINT, Ctrl-C)",
        "sluice: ingest of small stopped while publishing; the publish was rolled back, nothing "
        "was published. An ingest keeps no partial work: run the same command again to ingest "
        "from the start.",
    ], err[-3000:]
    assert Catalog(data_root).datasets() == []
    assert not [p for p in (data_root / "staging").iterdir() if p.name.startswith("ingest-")]

    again = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert Catalog(data_root).datasets() == ["small", "small.duplicates", "small.rejects"]


def test_a_stopped_republish_of_older_content_says_rolled_back(tmp_path, data_root):
    """Pool A, then pool B, then A again under one name: the third ingest publishes content the
    catalog already holds (A's versions become the latest again). Ctrl-C inside that commit:
    the line says the publish was rolled back (the catalog holding A's refs does not mean this
    publish went through), @latest is still B's, and the same command again makes it A's."""
    from process_helpers import REPO

    def pool(path, offset):
        path.write_text("".join(json.dumps({"problem": f"What is {i} + {offset}?",
                                            "answer": str(i + offset)}) + "\n"
                                for i in range(30)))  # fmt: skip
        return path

    a, b = pool(tmp_path / "a.jsonl", 1), pool(tmp_path / "b.jsonl", 2)
    env = {**os.environ, "PYTHONPATH": str(REPO), "SLUICE_DATA_ROOT": str(data_root)}

    def argv(src):
        return [sys.executable, "-m", "flows.cli", "ingest", str(src), "--map", "generic_math",
                "--name", "small"]  # fmt: skip

    cat = Catalog(data_root)
    for src in (a, b):
        done = subprocess.run(argv(src), cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        if src == a:
            a_version = cat.resolve("small@latest").version
    b_version = cat.resolve("small@latest").version
    assert a_version != b_version

    marker = tmp_path / "reached"
    proc = subprocess.Popen(
        argv(a), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**env, "SLUICE_CATALOG_TEST_HOOK": "in-transaction",
             "SLUICE_CATALOG_TEST_HOOK_MARKER": str(marker)},
    )  # fmt: skip
    deadline = time.monotonic() + 120  # a guard against hanging, not a timed assertion
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    err = err.decode()
    assert proc.returncode == 130, err[-3000:]
    assert err.rstrip().splitlines()[-1] == (
        "sluice: ingest of small stopped while publishing; the publish was rolled back, nothing "
        "was published. An ingest keeps no partial work: run the same command again to ingest "
        "from the start."
    ), err[-3000:]
    assert cat.resolve("small@latest").version == b_version

    again = subprocess.run(argv(a), cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert cat.resolve("small@latest").version == a_version


def test_ctrl_c_after_the_commit_says_what_was_published(tmp_path, data_root):
    """Ctrl-C once the publish transaction has committed (SLUICE_CATALOG_TEST_HOOK=committed):
    the line names the three published refs and says nothing is left to do; the catalog holds
    them."""
    from process_helpers import REPO

    src = tmp_path / "pool.jsonl"
    src.write_text("".join(json.dumps({"problem": f"What is {i} + 3?", "answer": str(i + 3)})
                           + "\n" for i in range(20)))  # fmt: skip
    argv = [sys.executable, "-m", "flows.cli", "ingest", str(src), "--map", "generic_math",
            "--name", "small"]  # fmt: skip
    marker = tmp_path / "reached"
    env = {**os.environ, "PYTHONPATH": str(REPO), "SLUICE_DATA_ROOT": str(data_root),
           "SLUICE_CATALOG_TEST_HOOK": "committed",
           "SLUICE_CATALOG_TEST_HOOK_MARKER": str(marker)}  # fmt: skip
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env)  # fmt: skip
    deadline = time.monotonic() + 120  # a guard against hanging, not a timed assertion
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    err = err.decode()
    assert proc.returncode == 130, err[-3000:]
    cat = Catalog(data_root)
    refs = [cat.resolve(f"{n}@latest").ref for n in ("small.rejects", "small.duplicates", "small")]
    assert err.rstrip().splitlines()[-1] == (
        f"sluice: ingest of small stopped after publishing {', '.join(refs)}; nothing is left "
        "to do."
    ), err[-3000:]
