"""`sluice demo`: the project's own small sample pool + config, run end to end.

The pool is *generated* by :mod:`curation.sample_pool` (no data ships with the package): 60
math word problems with a fixed seed, disguised exact duplicates and one bad row of each kind
(so the ingest shows its rejects), plus three rows planted from the benchmark mirror at run
time (one verbatim, one with a preamble, one lightly reworded), so the report has contamination
to show. Nothing from the benchmarks is stored in the repository.
"""

from __future__ import annotations

import json
from pathlib import Path

DEMO_BENCHMARKS = ("aime24", "aime25")


def planted_rows(benchmarks_dir: str | Path | None = None) -> list[dict]:
    """Three rows derived, at run time, from the first AIME 2024 items (loaded and verified by
    the benchmark registry: local mirror or Hub)."""
    from decontam.benchmarks import load_benchmark

    items, _info = load_benchmark("aime24", benchmarks_dir=benchmarks_dir, include_variants=False)
    out = []
    for k, item in enumerate(items.sort_by("item_id").slice(0, 3).to_pylist()):
        text = item["text"]
        if k == 1:
            text = "Solve the following problem and put the answer in a box.\n\n" + text
        elif k == 2:
            text = text.replace("Find", "Determine").replace("find", "determine")
        out.append({"id": f"demo-planted-{k}", "problem": text, "answer": str(item["answer"])})
    return out


def write_demo(out: str | Path, benchmarks_dir: str | Path | None = None) -> Path:
    """Write the sample pool (``curation.sample_pool``: generated problems, disguised duplicates,
    one bad row of each kind, plus the planted rows) and ``demo.toml`` into ``out``; return the
    config path."""
    from curation.sample_pool import write_sample_pool
    from decontam.registry import DEFAULT_DETECTORS

    out = Path(out).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    pool = write_sample_pool(out, n_math=60, extra_math=planted_rows(benchmarks_dir))
    bdir = f'dir = "{Path(benchmarks_dir).resolve()}"\n' if benchmarks_dir else ""
    config = out / "demo.toml"
    config.write_text(
        f"""# Sluice demo pipeline (written by `sluice demo`)
data_root = ".sluice"

[benchmarks]
names = {json.dumps(list(DEMO_BENCHMARKS))}
{bdir}
# [detectors] left out: the default set ({", ".join(DEFAULT_DETECTORS)})
# with its calibrated thresholds; embedding uses the offline model.

[[pools]]
name = "demo-pool"
source = "{pool.math.name}"
map = "{pool.math_map}"
text_fields = ["problem"]
id_field = "uid"

[outputs]
report_dir = "reports"
""",
        encoding="utf-8",
    )
    return config


def run_demo_pipeline(
    out: str | Path | None = None, benchmarks_dir: str | Path | None = None
) -> tuple[Path, dict]:
    """Write the demo into ``out`` (default: a new temp folder) and run the curate flow on it
    with embedded defaults: (the demo's config path, the flow's results per pool)."""
    import tempfile

    from flows.commands.pipeline import run_pipeline

    out = Path(out) if out else Path(tempfile.mkdtemp(prefix="sluice-demo-"))
    config = write_demo(out, benchmarks_dir)
    return config, run_pipeline(config)


def run_demo(out: str | Path | None = None, benchmarks_dir: str | Path | None = None) -> Path:
    """:func:`run_demo_pipeline`, returning the path of the HTML report."""
    _config, results = run_demo_pipeline(out, benchmarks_dir)
    return Path(results["demo-pool"]["report"]["html"])


def next_steps(config: Path, results: dict) -> list[str]:
    """The commands to look at what the demo made (printed after its summary; each one runs
    as printed, from any folder)."""
    import shlex

    root = config.parent / ".sluice"  # demo.toml's data_root
    q = shlex.quote
    report_dir = Path(results["demo-pool"]["report"]["html"]).parent
    return [
        f"sluice datasets list --root {q(str(root))}",
        f"sluice datasets diff demo-pool@latest demo-pool.decontaminated@latest --root {q(str(root))}",
        f"sluice report verify {q(str(report_dir))}",
        f"sluice run {q(str(config))}   # again: every step from the cache",
    ]
