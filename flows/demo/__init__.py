"""`sluice demo`: the project's own small sample pool + config, run end to end.

The pool is *generated* here (no data ships with the package): ~60 arithmetic and algebra word
problems built from templates with a fixed seed, plus a few rows planted from the benchmark
mirror at run time (one verbatim, one with a preamble, one lightly reworded), so the report
has contamination to show. Nothing from the benchmarks is stored in the repository.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SAMPLE_ROWS = 60
DEMO_BENCHMARKS = ("aime24", "aime25")

_TEMPLATES = (
    (
        "A train travels {a} kilometers in {b} hours. At the same speed, how many kilometers "
        "does it travel in {c} hours?",
        lambda a, b, c: a * c / b,
    ),
    (
        "Find the sum of all positive divisors of {a}.",
        lambda a, b, c: sum(d for d in range(1, a + 1) if a % d == 0),
    ),
    (
        "What is the remainder when {a}^{b} is divided by {c}?",
        lambda a, b, c: pow(a, b, c),
    ),
    (
        "A rectangle has perimeter {a} and one side of length {b}. What is its area?",
        lambda a, b, c: b * (a / 2 - b),
    ),
    (
        "How many integers between 1 and {a} inclusive are divisible by {b} or by {c}?",
        lambda a, b, c: a // b + a // c - a // (b * c // _gcd(b, c)),
    ),
)


def _gcd(x: int, y: int) -> int:
    while y:
        x, y = y, x % y
    return x


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.4g}"


def synthetic_rows(n: int = SAMPLE_ROWS, seed: int = 20250101) -> list[dict]:
    rng = random.Random(seed)
    rows, seen = [], set()
    while len(rows) < n:
        i = rng.randrange(len(_TEMPLATES))
        text, fn = _TEMPLATES[i]
        a, b, c = rng.randint(20, 400), rng.randint(2, 12), rng.randint(3, 15)
        if i == 3:
            b = rng.randint(2, a // 2 - 1)
        problem = text.format(a=a, b=b, c=c)
        if problem in seen:
            continue
        seen.add(problem)
        rows.append(
            {"id": f"demo-{len(rows):03d}", "problem": problem, "answer": _fmt(fn(a, b, c))}
        )
    return rows


def planted_rows(benchmarks_dir: str | Path | None = None) -> list[dict]:
    """Three rows derived, at run time, from AIME 2024 items of the local benchmark mirror
    (none when the mirror is absent)."""
    from curation.settings import benchmarks_dir as resolve

    d = resolve(benchmarks_dir)
    src = d / "aime24.jsonl" if d else None
    if src is None or not src.is_file():
        return []
    items = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines() if line]
    items = items[:3]
    out = []
    for k, item in enumerate(items):
        text = item["problem"]
        if k == 1:
            text = "Solve the following problem and put the answer in a box.\n\n" + text
        elif k == 2:
            text = text.replace("Find", "Determine").replace("find", "determine")
        out.append({"id": f"demo-planted-{k}", "problem": text, "answer": str(item["answer"])})
    return out


def write_demo(out: str | Path, benchmarks_dir: str | Path | None = None) -> Path:
    """Write ``sample_pool.jsonl`` and ``demo.toml`` into ``out``; return the config path."""
    out = Path(out).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows = _sample_rows(benchmarks_dir)
    pool = out / "sample_pool.jsonl"
    pool.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    bdir = f'dir = "{Path(benchmarks_dir).resolve()}"\n' if benchmarks_dir else ""
    config = out / "demo.toml"
    config.write_text(
        f"""# Sluice demo pipeline (written by `sluice demo`)
data_root = ".sluice"

[benchmarks]
names = {json.dumps(list(DEMO_BENCHMARKS))}
{bdir}
[detectors]
names = ["ngram", "minhash", "problem_id"]

[[pools]]
name = "demo-pool"
source = "sample_pool.jsonl"
map = "generic_math"
text_fields = ["problem"]
id_field = "uid"

[outputs]
report_dir = "reports"
""",
        encoding="utf-8",
    )
    return config


def _sample_rows(benchmarks_dir: str | Path | None) -> list[dict]:
    """The ingest engineer's generator when present (one sample pool for the project), else
    the templates above."""
    try:
        from curation.sample_pool import sample_rows  # type: ignore[import-not-found]
    except ImportError:
        return synthetic_rows() + planted_rows(benchmarks_dir)
    return list(sample_rows())


def run_demo(out: str | Path | None = None, benchmarks_dir: str | Path | None = None) -> Path:
    """Write the demo into ``out`` (default: a new temp folder), run the curate flow on it
    with embedded defaults, and return the path of the HTML report."""
    import tempfile

    from flows.commands.pipeline import run_pipeline

    out = Path(out) if out else Path(tempfile.mkdtemp(prefix="sluice-demo-"))
    config = write_demo(out, benchmarks_dir)
    results = run_pipeline(config)
    return Path(results["demo-pool"]["report"]["html"])
