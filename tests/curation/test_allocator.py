"""curation.allocator: freed memory is reused, not mapped (and faulted in) again."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# page faults of four rounds of allocating, touching and freeing 64 MiB, in a fresh process
_ROUNDS = """
import json, resource, sys
sys.path.insert(0, {repo!r})
from curation.allocator import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
faults = []
for _ in range(4):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = b"x" * (64 << 20)
    del block
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({{"kept": kept, "faults": faults}}))
"""


def _rounds(mode: str) -> dict:
    code = _ROUNDS.format(repo=str(REPO))
    out = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt settings are glibc's")
def test_freed_memory_is_reused_without_page_faults():
    pages = (64 << 20) // 4096
    default = _rounds("default")
    # glibc's default: a block this size is mapped fresh each time and faulted in page by page
    assert all(f >= pages * 0.9 for f in default["faults"])
    kept = _rounds("keep")
    assert kept["kept"] is True
    assert kept["faults"][0] >= pages * 0.9  # the first touch still faults
    assert all(f < pages * 0.05 for f in kept["faults"][1:])  # the freed block is reused
