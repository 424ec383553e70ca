"""The embedding cache shared by processes on one data root (two `benchmarks prepare` or
`decontam run`s at once): a compaction never drops vectors another process stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from decontam import embed_cache
from decontam.embed_cache import EmbeddingCache, text_hash

_PUT = """
import sys, numpy as np
from decontam.embed_cache import EmbeddingCache
EmbeddingCache("m@1", "prep/1", root=sys.argv[1]).put_many([sys.argv[2]], np.ones((1, 4)))
"""


@pytest.mark.shared_data
def test_a_compaction_keeps_what_another_process_stored(tmp_path, benchmarks_dir):
    lines = [x for b in ("aime24", "aime25") for x in (benchmarks_dir / f"{b}.jsonl").open()]
    hashes = [text_hash(json.loads(x)["problem"]) for x in lines]
    full = embed_cache._MAX_SHARDS
    mine = EmbeddingCache("m@1", "prep/1", root=tmp_path)
    for i, h in enumerate(hashes[: full - 1]):  # one shard each, one short of a compaction
        mine.put_many([h], np.full((1, 4), i, np.float32))
    # another process stores a vector after this one read the cache: the last free shard
    theirs = hashes[full - 1]
    r = subprocess.run([sys.executable, "-c", _PUT, str(tmp_path), theirs],
                       capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert r.returncode == 0, r.stderr
    mine.put_many([hashes[full]], np.zeros((1, 4)))  # over the limit: this process compacts
    after = EmbeddingCache("m@1", "prep/1", root=tmp_path)
    assert len(list(after.dir.glob("part-*.parquet"))) == 1  # compacted
    assert theirs in after and np.array_equal(after.get_many([theirs])[theirs], np.ones(4))
    assert all(h in after for h in hashes[: full + 1]) and len(after) == full + 1


_KILLED_MID_WRITE = """
import os, signal, sys, numpy as np, pyarrow.parquet as pq
from decontam.embed_cache import EmbeddingCache
real = pq.write_table
def write_then_die(table, where, **kw):  # SIGKILL with the temporary file on disk
    real(table, where, **kw)
    os.kill(os.getpid(), signal.SIGKILL)
pq.write_table = write_then_die
EmbeddingCache("m@1", "prep/1", root=sys.argv[1]).put_many(["h"], np.ones((1, 4)))
"""


def test_the_temporary_file_of_a_killed_writer_goes_on_the_next_open(tmp_path):
    r = subprocess.run([sys.executable, "-c", _KILLED_MID_WRITE, str(tmp_path)],
                       capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert r.returncode == -9, r.stderr
    folder = next(tmp_path.rglob("part-*.tmp")).parent
    (left,) = folder.glob("part-*.tmp")  # what the kill left
    assert len(EmbeddingCache("m@1", "prep/1", root=tmp_path)) == 0 and not left.exists()

    live = (
        folder / f"part-{'a' * 32}.{embed_cache._writer_tag().rsplit('-', 1)[0]}-{os.getppid()}.tmp"
    )
    live.write_bytes(b"a live writer's")  # its writer (this test's parent) is alive
    unnamed_old, unnamed_new = folder / f"part-{'b' * 32}.tmp", folder / f"part-{'c' * 32}.tmp"
    for f in (unnamed_old, unnamed_new):
        f.write_bytes(b"no writer named")
    two_hours_ago = time.time() - 2 * 3600
    os.utime(unnamed_old, (two_hours_ago, two_hours_ago))

    cache = EmbeddingCache("m@1", "prep/1", root=tmp_path)
    assert len(cache) == 0 and not unnamed_old.exists()
    assert live.exists() and unnamed_new.exists()  # may still be written


def test_the_prepare_lock_reads_what_a_holder_stored_even_when_it_was_free(tmp_path, capfd):
    """A prepare that let go between another's look at the cache and its taking the lock: the
    lock was free, so nothing was read again and its vectors were embedded a second time. The
    cache is now read again whenever the lock is taken; a free lock is taken silently."""
    mine = EmbeddingCache("m@1", "prep/1", root=tmp_path)
    assert "h" not in mine  # this process looked: missing
    subprocess.run([sys.executable, "-c", _PUT, str(tmp_path), "h"], check=True, timeout=60,
                   cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    with mine.preparing("test texts"):
        assert "h" in mine
    assert "waiting" not in capfd.readouterr().err
