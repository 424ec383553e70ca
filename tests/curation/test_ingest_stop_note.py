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

ROLLED_BACK = (
    "sluice: ingest of small stopped while publishing; the publish was rolled back, nothing was "
    "published. An ingest keeps no partial work: run the same command again to ingest from the "
    "start."
)


def _pool(path, offset: int, n: int):
    """``n`` generic math rows, "What is i + offset?" (distinct offsets: distinct contents)."""
    path.write_text("".join(json.dumps({"problem": f"What is {i} + {offset}?",
                                        "answer": str(i + offset)}) + "\n"
                            for i in range(n)))  # fmt: skip
    return path


def _argv(src) -> list[str]:
    return [sys.executable, "-m", "flows.cli", "ingest", str(src), "--map", "generic_math",
            "--name", "small"]  # fmt: skip


def _env(data_root) -> dict[str, str]:
    from process_helpers import REPO

    return {**os.environ, "PYTHONPATH": str(REPO), "SLUICE_DATA_ROOT": str(data_root)}


def _ingest(src, data_root) -> None:
    from process_helpers import REPO

    done = subprocess.run(_argv(src), cwd=REPO, env=_env(data_root), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def _ctrl_c_at(hook: str, src, data_root, marker) -> str:
    """The ingest of ``src`` stopped by Ctrl-C once the catalog's test hook ``hook`` is reached
    (it sleeps there): its stderr, after checking it exited 130."""
    from process_helpers import REPO

    proc = subprocess.Popen(
        _argv(src), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**_env(data_root), "SLUICE_CATALOG_TEST_HOOK": hook,
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
    return err


def test_ctrl_c_inside_the_commit_says_it_was_rolled_back_and_the_rerun_publishes(
    tmp_path, data_root
):
    """Ctrl-C while the publish transaction is open (SLUICE_CATALOG_TEST_HOOK=in-transaction):
    the line says the publish was rolled back and nothing is kept; the catalog agrees, and the
    same command again publishes the three datasets."""
    src = _pool(tmp_path / "pool.jsonl", 1, 50)
    err = _ctrl_c_at("in-transaction", src, data_root, tmp_path / "reached")
    lines = err.rstrip().splitlines()[-2:]
    assert lines == ["sluice: interrupted (SIGINT, Ctrl-C)", ROLLED_BACK], err[-3000:]
    assert Catalog(data_root).datasets() == []
    assert not [p for p in (data_root / "staging").iterdir() if p.name.startswith("ingest-")]

    _ingest(src, data_root)
    assert Catalog(data_root).datasets() == ["small", "small.duplicates", "small.rejects"]


def test_a_stopped_republish_of_older_content_says_rolled_back(tmp_path, data_root):
    """Pool A, then pool B, then A again under one name: the third ingest publishes content the
    catalog already holds (A's versions become the latest again). Ctrl-C inside that commit:
    the line says the publish was rolled back (the catalog holding A's refs does not mean this
    publish went through), @latest is still B's, and the same command again makes it A's."""
    a, b = _pool(tmp_path / "a.jsonl", 1, 30), _pool(tmp_path / "b.jsonl", 2, 30)
    cat = Catalog(data_root)
    _ingest(a, data_root)
    a_version = cat.resolve("small@latest").version
    _ingest(b, data_root)
    b_version = cat.resolve("small@latest").version
    assert a_version != b_version

    err = _ctrl_c_at("in-transaction", a, data_root, tmp_path / "reached")
    assert err.rstrip().splitlines()[-1] == ROLLED_BACK, err[-3000:]
    assert cat.resolve("small@latest").version == b_version

    _ingest(a, data_root)
    assert cat.resolve("small@latest").version == a_version


def test_ctrl_c_after_the_commit_says_what_was_published(tmp_path, data_root):
    """Ctrl-C once the publish transaction has committed (SLUICE_CATALOG_TEST_HOOK=committed):
    the line names the three published refs and says nothing is left to do; the catalog holds
    them."""
    src = _pool(tmp_path / "pool.jsonl", 3, 20)
    err = _ctrl_c_at("committed", src, data_root, tmp_path / "reached")
    cat = Catalog(data_root)
    refs = [cat.resolve(f"{n}@latest").ref for n in ("small.rejects", "small.duplicates", "small")]
    assert err.rstrip().splitlines()[-1] == (
        f"sluice: ingest of small stopped after publishing {', '.join(refs)}; nothing is left "
        "to do."
    ), err[-3000:]
