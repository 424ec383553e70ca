"""A stopped `sluice sft generate` says, in its last line, that nothing was published and how
many samples the sample store keeps (curation.shutdown.stop_note); the rerun it names
generates only the rest."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import pyarrow as pa
import pytest
from generation_helpers import StandInServer

from curation.catalog import Catalog
from curation.ingest import ingest

pytestmark = pytest.mark.shared_data


def test_ctrl_c_mid_generation_names_the_samples_kept_and_the_rerun_reuses_them(
    pools_dir, data_root, tmp_path
):
    """Ctrl-C once the first of 48 samples is stored: the line says nothing was published and
    1 of 48 samples is kept in the store; the same command again generates 47 and publishes."""
    from process_helpers import REPO, sluice_held_after, stop_group

    cat = Catalog(data_root)
    res = ingest(str(pools_dir / "math_ttrl_amc23_as_train.jsonl"), field_map="ttrl",
                 name="amc", catalog=cat)  # fmt: skip
    full = cat.load(res.ref)
    ref = cat.publish("amc6", pa.Table.from_pylist(full.to_pylist()[:6], schema=full.schema),
                      parents=[res.ref]).ref  # fmt: skip
    store = tmp_path / "store"
    with StandInServer(lambda text, body: "Thinking.</think>\n\n\\boxed{1}") as srv:
        argv = ["sft", "generate", ref, "--model", "r1-stand-in", "--base-url", srv.url,
                "-n", "8", "--concurrency", "1", "--store", str(store), "--root", str(data_root)]  # fmt: skip
        proc = sluice_held_after("curation.generation.progress:Progress.update", argv,
                                 env={"SLUICE_DATA_ROOT": str(data_root)},
                                 marker=tmp_path / "held")  # fmt: skip
        code, err = stop_group(proc, signal.SIGINT)
        assert code == 130, err[-3000:]
        assert "sluice: interrupted (SIGINT, Ctrl-C)\n" in err, err[-3000:]
        assert err.rstrip().splitlines()[-1] == (  # after the bar's "(stopped)" line
            "sluice: teacher generation stopped before publishing its responses; nothing of them "
            f"was published; 1 of the 48 samples asked for is kept in the sample store ({store}): "
            "run the same command again to generate only the missing ones."
        ), err[-3000:]
        assert not [d for d in Catalog(data_root).datasets() if "sft_raw" in d]

        again = subprocess.run(
            [sys.executable, "-m", "flows.cli", *argv], cwd=REPO, capture_output=True, text=True,
            env={**__import__("os").environ, "PYTHONPATH": str(REPO),
                 "SLUICE_DATA_ROOT": str(data_root)}, timeout=300,
        )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert re.search(r"48 responses: 47 generated, 1 reused", again.stderr), again.stderr[-3000:]
    assert "published: amc6.sft_raw@" in again.stderr
