"""The embedding cache shared by processes on one data root (two `benchmarks prepare` or
`decontam run`s at once): a compaction never drops vectors another process stored."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from decontam import embed_cache
from decontam.embed_cache import EmbeddingCache, text_hash

pytestmark = pytest.mark.shared_data

_PUT = """
import sys, numpy as np
from decontam.embed_cache import EmbeddingCache
EmbeddingCache("m@1", "prep/1", root=sys.argv[1]).put_many([sys.argv[2]], np.ones((1, 4)))
"""


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
