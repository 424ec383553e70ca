"""End to end: the whole ``sluice decontam run`` process against open-r1's method run as its own
process, on the same generated pool (issue 16 item 3).

Pool: the ~25k real math problems of ``../shared/pools`` (every ``math_*`` file's problem /
question / prompt text), repeated with a variant suffix (`` (variant k)``) until ``--rows`` rows,
so every row is a distinct text (nothing is served by the scan cache). Benchmarks: aime24,
aime25, lcb_v6; 9-grams only. Each side is timed from process start to exit (wall clock), with its
peak RSS (``/usr/bin/time -v``); Sluice twice on a pool new to it: with a fresh data root (cold:
the n-gram index is fitted first), and with a data root whose benchmarks were prepared
(``sluice benchmarks prepare --detectors ngram``, timed apart: a nightly job's root after its
first night, the fitted index loaded from the fit cache):

* ``open-r1``: one Python process as open-r1's ``scripts/decontaminate.py`` works: the
  benchmark problems lowercased and whitespace-split into a lookup of 9-gram strings per
  benchmark, the pool read line by line with ``json``, and per benchmark, per row, a set of its
  9-gram strings and ``any(set(ngram in lookup ...))`` (the helpers of bench_ngram.py,
  re-typed here because importing that module would load Sluice into the baseline process);
* ``sluice``: ``sluice decontam run POOL --text-field text --id-field uid --detectors ngram
  --benchmarks aime24,aime25,lcb_v6 --out DIR``: CLI start, benchmark loading, index build,
  streamed reading, normalization (LaTeX-aware, columnar), scan, policy and the run directory.

The Sluice command then runs a second time on the same pool and data root (the nightly case:
every text is in the scan cache) and its wall time and peak RSS are printed too.

Two ratios are printed: end to end (the two process wall times; goal >= 5x), and the scan stage
(open-r1's matching loop, its lowercasing included, against the ``scan_s`` that ``run.json``
records: normalization, n-gram scan and evidence of every batch, reading excluded; goal >= 20x).

Run: ``.venv/bin/python tests/benchmarks/bench_decontam_e2e.py [--rows 3000000] [--keep DIR]``
(needs the shared data folder; builds the pool under a temp folder, about 60 bytes a row more
than the texts). Take figures on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
BENCHMARKS = ("aime24", "aime25", "lcb_v6")
N = 9
_TEXT_FIELDS = ("problem", "question", "prompt")


# ------------------------------------------------------------------ open-r1's process (child)


def _openr1_ngram_set(document: str, n: int) -> set[str]:
    words = " ".join(document.lower().strip().split()).split()
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


def openr1_child(pool: str, bench_dir: str) -> None:
    """open-r1's decontamination of ``pool``; prints its stage times as JSON."""
    t0 = time.perf_counter()
    lookups: dict[str, dict[str, set[int]]] = {}
    for b in BENCHMARKS:
        lookup: dict[str, set[int]] = {}
        with open(Path(bench_dir) / f"{b}.jsonl", encoding="utf-8") as fh:
            for doc_id, line in enumerate(fh):
                r = json.loads(line)
                doc = r.get("problem") or r.get("question_content") or r.get("question") or ""
                for g in _openr1_ngram_set(doc, N):
                    lookup.setdefault(g, set()).add(doc_id)
        lookups[b] = lookup
    t1 = time.perf_counter()
    texts = []
    with open(pool, encoding="utf-8") as fh:
        for line in fh:
            texts.append(json.loads(line)["text"])
    t2 = time.perf_counter()
    flagged: set[int] = set()
    for lookup in lookups.values():
        for r, text in enumerate(texts):
            if any(set(g in lookup for g in _openr1_ngram_set(text, N))):  # noqa: C401
                flagged.add(r)
    t3 = time.perf_counter()
    print(json.dumps({"index_s": t1 - t0, "read_s": t2 - t1, "match_s": t3 - t2,
                      "flagged": len(flagged)}))  # fmt: skip


# ------------------------------------------------------------------ the parent


def build_pool(pools: Path, rows: int, dst: Path) -> int:
    """Write ``rows`` rows of {uid, text}; returns the number of distinct source problems."""
    base = []
    for path in sorted(pools.glob("math_*.jsonl")):
        for line in path.open(encoding="utf-8"):
            r = json.loads(line)
            for f in _TEXT_FIELDS:
                v = r.get(f)
                if isinstance(v, list):  # chat prompt
                    v = "\n".join(m.get("content", "") for m in v if isinstance(m, dict))
                if isinstance(v, str) and v.strip():
                    base.append(v)
                    break
    with open(dst, "w", encoding="utf-8") as out:
        for i in range(rows):
            k, j = divmod(i, len(base))
            text = base[j] if k == 0 else f"{base[j]} (variant {k})"
            out.write(json.dumps({"uid": f"p{i}", "text": text}) + "\n")
    return len(base)


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int, int, str]:
    """(wall seconds, peak RSS of its largest process, peak summed RSS of its process tree,
    stdout) of ``cmd``: the first from ``/usr/bin/time -v``, the second polled with psutil
    every 0.1 s (worker processes count)."""
    import psutil

    t = time.perf_counter()
    proc = subprocess.Popen(
        ["/usr/bin/time", "-v", *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env,
    )  # fmt: skip
    tree_peak = 0
    ps = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            procs = [ps, *ps.children(recursive=True)][1:]  # not /usr/bin/time itself
            tree_peak = max(tree_peak, sum(p.memory_info().rss for p in procs))
        except psutil.Error:
            pass
        time.sleep(0.1)
    out, err = proc.communicate()
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"{cmd[0]} failed:\n{err[-3000:]}")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
    return wall, int(m.group(1)) * 1024 if m else -1, tree_peak, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=3_000_000)
    ap.add_argument("--keep", help="keep the pool and run directory in this folder")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from curation.settings import shared_dir

    shared = shared_dir()
    if shared is None:
        sys.exit("shared data folder not found: set SLUICE_SHARED_DIR")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_e2e_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        pool = work / "pool.jsonl"
        n_base = build_pool(shared / "pools", args.rows, pool)
        size = pool.stat().st_size
        print(f"pool: {args.rows:,} rows from {n_base:,} real math problems, {size / 1e6:,.0f} MB")
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        bench_dir = str(shared / "benchmarks")
        o_wall, o_rss, _, o_out = timed(
            [sys.executable, str(HERE), "--child-openr1", str(pool), bench_dir], env
        )
        o = json.loads(o_out.strip().splitlines()[-1])
        out = work / "run"
        sluice = str(Path(sys.executable).with_name("sluice"))
        cmd = [sluice, "decontam", "run", str(pool), "--text-field", "text", "--id-field", "uid"]
        cmd += ["--detectors", "ngram", "--benchmarks", ",".join(BENCHMARKS), "--out", str(out)]

        def fresh_root(name: str) -> dict[str, str]:
            root = work / name
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(out, ignore_errors=True)
            return dict(env, SLUICE_DATA_ROOT=str(root), SLUICE_BENCHMARKS_DIR=bench_dir)

        # cold: a fresh data root (no scan cache, no fitted index)
        c_wall, c_rss, _, _ = timed(cmd, fresh_root("root-cold"))
        cold = json.loads((out / "run.json").read_text())
        # a nightly job's root: the benchmarks prepared (the n-gram index fitted and kept,
        # not timed here: printed apart), the pool new to it
        s_env = fresh_root("root")
        prep = [sluice, "benchmarks", "prepare", "--benchmarks", ",".join(BENCHMARKS)]
        p_wall, _, _, _ = timed([*prep, "--detectors", "ngram"], s_env)
        s_wall, s_rss, s_tree, _ = timed(cmd, s_env)
        run = json.loads((out / "run.json").read_text())
        # the nightly case: the same pool again, its texts in the scan cache (warm)
        shutil.rmtree(out)
        w_wall, w_rss, w_tree, _ = timed(cmd, s_env)
        warm = json.loads((out / "run.json").read_text())
        t = run["timings"]
        gib = 1024**3
        print(f"{'':28} {'wall s':>8} {'peak RSS':>10}  stages")
        print(
            f"{'open-r1 (own process)':28} {o_wall:8.1f} {o_rss / gib:8.2f} GiB  "
            f"index {o['index_s']:.1f} s, read {o['read_s']:.1f} s, match {o['match_s']:.1f} s; "
            f"{o['flagged']:,} rows flagged"
        )
        for label, wall, rss, r in (
            ("sluice, fresh data root", c_wall, c_rss, cold),
            ("sluice, benchmarks prepared", s_wall, s_rss, run),
        ):
            t = r["timings"]
            print(
                f"{label:28} {wall:8.1f} {rss / gib:8.2f} GiB  "
                f"fit {t.get('fit_s', 0):.1f} s, read {t.get('read_s', 0):.1f} s, "
                f"scan {t['scan_s']:.1f} s (ngram {t['detectors']['ngram']['seconds']:.1f} s); "
                f"{r['counts']['contaminated']:,} rows contaminated"
            )
        t = run["timings"]
        if cold["counts"] != run["counts"]:
            sys.exit(f"the prepared root changed the counts: {cold['counts']} != {run['counts']}")
        print(
            f"{'sluice, again (cache warm)':28} {w_wall:8.1f} {w_rss / gib:8.2f} GiB  "
            f"scan {warm['timings']['scan_s']:.1f} s, "
            f"{warm['counts'].get('texts_cached', 0):,} texts served by the scan cache; "
            f"{warm['counts']['contaminated']:,} rows contaminated"
        )
        print(
            f"end to end (process wall):      Sluice is {o_wall / c_wall:.2f}x open-r1 with a fresh "
            f"data root, {o_wall / s_wall:.2f}x with the benchmarks prepared (goal >= 5x; "
            f"`sluice benchmarks prepare --detectors ngram` took {p_wall:.1f} s, once per data root)"
        )
        print(
            f"end to end, rerun (cache warm): Sluice is {o_wall / w_wall:.2f}x open-r1 "
            f"(peak RSS, all processes: {w_tree / gib:.2f} GiB)"
        )
        print(
            f"scan stage (in-process):        Sluice is {o['match_s'] / t['scan_s']:.2f}x open-r1 "
            "(goal >= 20x)"
        )
        print(
            f"peak RSS for {args.rows:,} rows: largest process {s_rss / gib:.2f} GiB, all "
            f"{t.get('workers', 1)} scan workers and the parent together {s_tree / gib:.2f} GiB "
            "(budget 2 GiB)"
        )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child-openr1":
        openr1_child(sys.argv[2], sys.argv[3])
    else:
        main()
