"""Prefect tasks: one per pipeline stage or scan shard, each a thin call into the library.

Tasks pass dataset references (``name@version``) and paths, never tables (Prefect would
serialize them into its result store). Every task is safe to retry and is cached on what
defines its result:

* the *content* of its inputs (the source file bytes for ingest; the content-addressed dataset
  version for decontamination; the run directory's files for reports),
* the stage's config (pool map, detectors, thresholds, benchmarks),
* the code: the task's own source (Prefect's ``TASK_SOURCE``) plus a fingerprint of the library
  packages it calls and the installed sluice version,

never the flow-run id. Results (small JSON summaries) are persisted under the data root, so a
rerun in a fresh process finds them and skips the work.

Each task's function can be called without Prefect as ``task.fn(...)``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import TASK_SOURCE, CacheKeyFnPolicy
from prefect.tasks import exponential_backoff

from curation.errors import SluiceError

_PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Packages whose code defines a stage's result (flows itself is covered by TASK_SOURCE).
_LIBRARY_PACKAGES = ("curation", "decontam", "reports")


# -- fingerprints --------------------------------------------------------------------------
def sluice_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sluice-data")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0+unknown"


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Hash of the library source the stages run (so an edited detector invalidates caches
    even when the package version is unchanged) plus the installed version. Every file of
    those packages counts (sources, field maps, templates, the report's inlined CSS and JS),
    except bytecode."""
    h = hashlib.sha256(sluice_version().encode())
    for pkg in _LIBRARY_PACKAGES:
        for f in sorted((_PROJECT_ROOT / pkg).rglob("*")):
            if f.suffix in (".pyc", ".pyo") or "__pycache__" in f.parts:
                continue
            if f.is_file():
                h.update(str(f.relative_to(_PROJECT_ROOT)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def content_fingerprint(path: str | os.PathLike) -> str:
    """xxh3-128 of a file's bytes, or of every file under a folder / matching a glob (names
    included). Anything that is not a local path (a hub id, a URL) is fingerprinted by name:
    those sources are pinned by their own revision, not by us."""
    import glob

    import xxhash

    p = str(path)
    if "://" in p:
        return "name:" + p
    if "#" in p and not os.path.exists(p) and os.path.isdir(p.rsplit("#", 1)[0]):
        # folder#split (a DatasetDict's split, a folder of Hub shards): the folder's bytes and
        # the split's name, as the ingest reads them (by name alone, a changed folder was stale)
        folder, split = p.rsplit("#", 1)
        return content_fingerprint(folder) + "#" + split
    files: list[Path]
    if os.path.isfile(p):
        files = [Path(p)]
    elif os.path.isdir(p):
        files = sorted(f for f in Path(p).rglob("*") if f.is_file())
    elif any(c in p for c in "*?["):
        files = sorted(Path(f) for f in glob.glob(p, recursive=True) if os.path.isfile(f))
    else:
        return "name:" + p
    h = xxhash.xxh3_128()
    for f in files:
        h.update(str(f).encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _hash(*parts: Any) -> str:
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def _ingest_key(ctx: Any, params: dict[str, Any]) -> str:
    pool = params["pool"]
    map_file = pool.get("map") if os.path.isfile(str(pool.get("map"))) else None
    return _hash(
        "ingest",
        pool,
        params["data_root"],
        content_fingerprint(pool["source"]),
        content_fingerprint(map_file) if map_file else None,
        code_fingerprint(),
    )


def _benchmarks_fingerprint(benchmarks_dir: str | None) -> str:
    from curation.settings import benchmarks_dir as resolve

    d = resolve(benchmarks_dir)
    return content_fingerprint(d) if d else "hub"


# DecontamConfig fields that set how a scan runs, never what it finds (the run's output does
# not depend on them: test_unsharded_flow_scans_in_worker_processes_like_one, the streamed
# runs' tests): left out of the cache keys, so retuning them reruns nothing.
_HOW_NOT_WHAT = ("workers", "stream_rows", "batch_size")


def _what(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with the ``decontam`` dict's how-not-what fields dropped."""
    p = dict(params)
    if isinstance(p.get("decontam"), dict):
        p["decontam"] = {k: v for k, v in p["decontam"].items() if k not in _HOW_NOT_WHAT}
    return p


def _decontaminate_key(ctx: Any, params: dict[str, Any]) -> str:
    # input_ref is content-addressed (name@version), so it stands for the input's bytes.
    p = _what(params)
    ref = params.get("input_ref")
    if ref and os.path.isfile(ref):  # a file input: key on its bytes, not its name
        p["input_content"] = content_fingerprint(ref)
    if params.get("matches_paths"):  # finalize: the shards' matches, by content
        p["matches_content"] = [content_fingerprint(m) for m in params["matches_paths"]]
    return _hash(
        "decontaminate",
        p,
        _benchmarks_fingerprint(params.get("benchmarks_dir")),
        code_fingerprint(),
    )


def _run_dir_fingerprint(run_dir: str, out_dir: str | None = None) -> str:
    """The run dir's files, less those under ``out_dir`` when the report is written inside it
    (report_flow's default ``<run dir>/report``): the report it renders must not change the
    key of its next render."""
    if not os.path.isdir(run_dir):
        return "missing:" + run_dir
    skip = Path(out_dir).resolve() if out_dir else None
    files = [
        str(f)
        for f in sorted(Path(run_dir).resolve().rglob("*"))
        if f.is_file() and not (skip is not None and f.is_relative_to(skip))
    ]
    return _hash([content_fingerprint(f) for f in files])


def _report_key(ctx: Any, params: dict[str, Any]) -> str:
    fp = _run_dir_fingerprint(params["run_dir"], params.get("out_dir"))
    return _hash("report", params, fp, code_fingerprint())


def _scan_key(ctx: Any, params: dict[str, Any]) -> str:
    p = _what(params)
    p["shard_path"] = content_fingerprint(params["shard_path"])
    return _hash(
        "scan", p, _benchmarks_fingerprint(params.get("benchmarks_dir")), code_fingerprint()
    )


def _policy(key_fn) -> Any:
    return TASK_SOURCE + CacheKeyFnPolicy(cache_key_fn=key_fn)


def _retry_unless_user_error(task: Any, task_run: Any, state: Any) -> bool:
    """Retry transient failures (network, hub, judge endpoint), never a SluiceError: bad
    input or config fails the same way every time, and the user needs the message now."""
    try:
        state.result()
    except SluiceError:
        return False
    except Exception:
        return True
    return False


_COMMON: dict[str, Any] = dict(persist_result=True, result_serializer="json")
_NETWORK_RETRIES: dict[str, Any] = dict(
    retries=3,
    retry_delay_seconds=exponential_backoff(backoff_factor=2),
    retry_jitter_factor=0.5,
    retry_condition_fn=_retry_unless_user_error,
)


# -- test-only crash hook -------------------------------------------------------------------
# When SLUICE_FLOWS_TEST_HOOK names a stage, the process writes SLUICE_FLOWS_TEST_HOOK_MARKER
# and sleeps there, so tests/flows/test_crash_safety.py can SIGKILL it at that exact point.
# "scan:<shard file name>" stops before scanning that shard; "publish" forwards to the
# catalog's own hook, stopping inside the transaction that publishes the decontaminated data.
_HOOK_ENV = "SLUICE_FLOWS_TEST_HOOK"
_HOOK_MARKER_ENV = "SLUICE_FLOWS_TEST_HOOK_MARKER"


def _test_hook(stage: str) -> None:
    wanted = os.environ.get(_HOOK_ENV)
    if not wanted:
        return
    if wanted == "publish" and stage == "decontaminate":
        os.environ["SLUICE_CATALOG_TEST_HOOK"] = "in-transaction"
        os.environ["SLUICE_CATALOG_TEST_HOOK_MARKER"] = os.environ.get(_HOOK_MARKER_ENV, "")
        return
    if wanted != stage:
        return
    import time

    marker = os.environ.get(_HOOK_MARKER_ENV)
    if marker:
        Path(marker).write_text(stage)
    time.sleep(3600)


# -- JSON summaries -------------------------------------------------------------------------
def jsonable(obj: Any) -> Any:
    """Turn a library result (dataclass, DatasetVersion, Path...) into JSON-safe data."""
    if obj is None or isinstance(obj, str | int | float | bool):
        return obj
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_asdict"):  # NamedTuple
        return {k: jsonable(v) for k, v in obj._asdict().items()}
    if isinstance(obj, list | tuple | set):
        return [jsonable(v) for v in obj]
    if is_dataclass(obj) and not isinstance(obj, type):
        return {k: jsonable(v) for k, v in asdict(obj).items() if not _is_table(v)}
    if hasattr(obj, "__dict__"):
        return {
            k: jsonable(v)
            for k, v in vars(obj).items()
            if not k.startswith("_") and not _is_table(v)
        }
    return str(obj)


def _is_table(v: Any) -> bool:
    return type(v).__name__ in ("Table", "DataFrame", "RecordBatch", "LazyFrame")


def version_ref(v: Any) -> str | None:
    """``name@version`` from a DatasetVersion, a ref string or None."""
    if v is None:
        return None
    if isinstance(v, str):
        return v
    name, ver = getattr(v, "name", None), getattr(v, "version", None)
    return f"{name}@{ver}" if name and ver else str(v)


# -- stage tasks ----------------------------------------------------------------------------
@task(name="ingest", cache_policy=_policy(_ingest_key), **_COMMON, **_NETWORK_RETRIES)
def ingest_pool(pool: dict[str, Any], data_root: str) -> dict[str, Any]:
    """Ingest one pool into the catalog. Returns ``{"ref": "name@version", "counts": ...}``."""
    from curation.catalog import Catalog
    from curation.ingest import ingest

    res = ingest(
        pool["source"],
        field_map=pool.get("map", "auto"),
        name=pool["name"],
        catalog=Catalog(data_root),
        on_conflict=pool.get("on_conflict", "keep_first"),
    )
    out = jsonable(res)
    if not isinstance(out, dict):
        out = {"result": out}
    ref = version_ref(getattr(res, "ref", None) or getattr(res, "version", None))
    out["ref"] = ref
    out["pool"] = pool["name"]
    return out


@task(name="decontaminate", cache_policy=_policy(_decontaminate_key), **_COMMON)
def decontaminate_pool(
    input_ref: str,
    text_fields: list[str],
    id_field: str | None,
    decontam: dict[str, Any],
    out_dir: str,
    data_root: str,
    benchmarks_dir: str | None = None,
    publish_as: str | None = None,
) -> dict[str, Any]:
    """Scan one dataset version against the benchmarks (through the per-text scan cache),
    write the run dir, publish ``<name>.decontaminated`` / ``<name>.excluded``.
    ``decontam`` is ``DecontamConfig.to_dict()``. Returns refs, paths and counts. The scan's
    progress goes to the run's log (``decontam <name>: done / total texts, texts/s, ETA``
    every few seconds), as the sharded path's does."""
    from prefect import get_run_logger
    from prefect.exceptions import MissingContextError

    from curation.catalog import Catalog
    from decontam.run import DecontamConfig, run_decontamination

    _test_hook("decontaminate")
    try:
        progress: Any = get_run_logger().info
    except MissingContextError:  # called as a plain function (``decontaminate_pool.fn``)
        progress = False
    res = run_decontamination(
        input_ref,
        text_fields=text_fields,
        id_field=id_field,
        out_dir=out_dir,
        config=DecontamConfig(**decontam),
        catalog=Catalog(data_root),
        benchmarks_dir=benchmarks_dir,
        publish=True,
        publish_as=publish_as,
        data_root=data_root,
        progress=progress,
    )
    return run_summary(res)


def run_summary(res: Any) -> dict[str, Any]:
    """JSON summary of a decontamination RunResult. ``run_json_sha256`` ties it to the run dir
    as this run wrote it: a later run into the same folder (another config, another input
    version in between) makes the cached summary stale (:func:`run_dir_is`)."""
    return {
        "run_dir": os.fspath(res.out_dir),
        "run_json_sha256": file_sha256(Path(res.out_dir) / "run.json"),
        "matches_path": os.fspath(res.matches_path),
        "decisions_path": os.fspath(res.decisions_path),
        "clean_ref": version_ref(res.clean_ref),
        "excluded_ref": version_ref(res.excluded_ref),
        "counts": jsonable(res.counts),
    }


@task(name="report", cache_policy=_policy(_report_key), **_COMMON)
def render_pool_report(run_dir: str, out_dir: str) -> dict[str, str]:
    """Render the contamination report (HTML, Markdown, JSON) for one run dir."""
    from reports.contamination import render_report

    paths = jsonable(render_report(run_dir, out_dir))  # {"html": ..., "markdown": ..., ...}
    return {k: str(v) for k, v in paths.items()}


# -- sharded scan (scale-out) ----------------------------------------------------------------
# The progress of the flow's sharded scan (a decontam.progress.ScanProgress that writes to the
# flow's run logger, set by flows.decontaminate._sharded around its scan tasks, as
# SHARD_PROGRESS.current). A scan task run in the flow's thread (the flow calls its tasks, so
# they run there) reports each batch to it; one run elsewhere (a task run on its own, submitted
# to a runner, another process) reports nothing, and the flow still writes each shard's line
# when its result comes back. Thread-local, not a ContextVar: Prefect's process-pool runner
# pickles the flow's context to submit a task, and a ContextVar set in it does not pickle.
SHARD_PROGRESS = threading.local()


def shard_progress() -> Any:
    """The flow's shard progress, when this thread runs the flow's sharded scan (else None)."""
    return getattr(SHARD_PROGRESS, "current", None)


@task(name="prepare-shards", cache_policy=_policy(_decontaminate_key), **_COMMON)
def prepare_shards(
    input_ref: str,
    text_fields: list[str],
    id_field: str | None,
    shards: int,
    work_dir: str,
    data_root: str,
    batch_rows: int = 50_000,
) -> list[str]:
    """Write the dataset's texts as ``shards`` Parquet files (contiguous slices of its rows in
    input order, so shards are deterministic), reading it ``batch_rows`` rows at a time
    (:func:`decontam.shards.write_shards`)."""
    from curation.catalog import Catalog
    from decontam.shards import write_shards

    return write_shards(
        input_ref,
        text_fields=text_fields,
        id_field=id_field,
        shards=shards,
        work_dir=work_dir,
        catalog=Catalog(data_root),
        batch_rows=batch_rows,
    )


def _atomic_parquet(table: Any, path: str) -> None:
    """Write then rename, so a killed run never leaves a half-written file under ``path``."""
    import pyarrow.parquet as pq

    tmp = f"{path}.{os.getpid()}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, path)


@task(name="scan-shard", cache_policy=_policy(_scan_key), **_COMMON)
def scan_shard(
    shard_path: str,
    decontam: dict[str, Any],
    data_root: str,
    benchmarks_dir: str | None = None,
) -> dict[str, Any]:
    """Score one text-table shard in batches through the per-text scan cache; writes
    ``<shard>.matches.parquet``. Returns its path and the scan counts."""
    from decontam import shards

    _test_hook("scan:" + os.path.basename(shard_path))
    cfg, bset, dets = fitted_detectors(decontam, benchmarks_dir, data_root)
    out = shard_path.removesuffix(".parquet") + ".matches.parquet"
    prog = shard_progress()
    stats = shards.scan_shard(
        shard_path, out, detectors=dets, benchmarks=bset, config=cfg, data_root=data_root,
        on_rows=prog.advance if prog is not None else None,
    )  # fmt: skip
    return {"matches_path": out, "matches_sha256": file_sha256(out), **stats}


@task(name="finalize", cache_policy=_policy(_decontaminate_key), **_COMMON)
def finalize_shards(
    input_ref: str,
    matches_paths: list[str],
    text_fields: list[str],
    id_field: str | None,
    decontam: dict[str, Any],
    out_dir: str,
    data_root: str,
    benchmarks_dir: str | None = None,
    publish_as: str | None = None,
    scan_stats: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Merge shard matches (plus metadata matches), apply the policy, write the run dir and
    publish, reading the input again in batches (:func:`decontam.shards.finalize_shards`):
    the same outputs :func:`decontaminate_pool` writes for the unsharded input."""
    from curation.catalog import Catalog
    from decontam import shards
    from decontam.run import _reproduce_command

    cfg, bset, dets = fitted_detectors(decontam, benchmarks_dir, data_root)
    catalog = Catalog(data_root)
    # the unsharded command gives the same run (test_sharded_scan_matches_the_single_process_run)
    command = _reproduce_command(
        input_ref, text_fields, id_field, cfg, out_dir, publish_as=publish_as,
        benchmarks_dir=benchmarks_dir, root=catalog.root,
    )  # fmt: skip
    res = shards.finalize_shards(
        input_ref,
        matches_paths,
        text_fields=text_fields,
        id_field=id_field,
        detectors=dets,
        benchmarks=bset,
        config=cfg,
        out_dir=out_dir,
        catalog=catalog,
        publish=True,
        publish_as=publish_as,
        scan_stats=scan_stats,
        command=command,
    )
    return run_summary(res)


def fitted_detectors(
    decontam: dict[str, Any], benchmarks_dir: str | None, data_root: str | None = None
) -> tuple[Any, Any, list]:
    """(DecontamConfig, BenchmarkSet, fitted detectors), cached per process: fitting is the
    costly part and every shard of a run shares it. Detector caches live under ``data_root``.

    The cache is keyed on the benchmark files' content (:func:`benchmark_files_fingerprint`),
    not only their folder: a long-running worker whose benchmark copy changed loads it again,
    through the loader's pinned-hash checks, instead of serving detectors fitted on the old
    files."""
    content = benchmark_files_fingerprint(benchmarks_dir)
    key = json.dumps([decontam, benchmarks_dir, content, data_root], sort_keys=True, default=str)
    if key not in _FITTED:
        from decontam.run import DecontamConfig, build_detectors, load_benchmark_set

        cfg = DecontamConfig(**decontam)
        bset = load_benchmark_set(cfg, benchmarks_dir=benchmarks_dir)
        _FITTED.clear()
        _FITTED[key] = (cfg, bset, build_detectors(cfg.detectors, cfg, bset, data_root))
    return _FITTED[key]


_FITTED: dict[str, tuple[Any, Any, list]] = {}


def benchmark_files_fingerprint(benchmarks_dir: str | None) -> str:
    """The content of the files a benchmark load reads: the mirror folder (``benchmarks_dir``,
    else the configured one) and the user definitions in ``$SLUICE_DATA_ROOT/benchmarks``.
    Hashed (:func:`content_fingerprint`) only when a file's path, size or mtime_ns differs from
    the last call's, so an unchanged folder costs a directory walk, not a read."""
    from curation.settings import benchmarks_dir as resolve
    from decontam.benchmarks import user_definition_dir

    folders = [str(d) for d in (resolve(benchmarks_dir), user_definition_dir()) if d]
    stats = []
    for d in folders:
        for f in sorted(Path(d).rglob("*")):
            if f.is_file():
                st = f.stat()
                stats.append((str(f), st.st_size, st.st_mtime_ns))
    sig = json.dumps([folders, stats])
    if sig not in _CONTENT:
        if len(_CONTENT) >= 8:  # a worker that sees many folders: bounded
            _CONTENT.clear()
        _CONTENT[sig] = _hash(*(content_fingerprint(d) for d in folders)) if folders else "hub"
    return _CONTENT[sig]


_CONTENT: dict[str, str] = {}


# -- helpers the flows share ------------------------------------------------------------------
def results_dir(data_root: str) -> Path | None:
    """Where task results (and their cache records) persist: ``<data root>/prefect-results``
    for a local data root; Prefect's default store for a remote (fsspec URL) one."""
    if "://" in data_root:
        return None
    return Path(data_root).expanduser().resolve() / "prefect-results"


def with_storage(t: Any, data_root: str) -> Any:
    store = results_dir(data_root)
    return t.with_options(result_storage=store) if store is not None else t


def cached_or_rerun(t: Any, data_root: str, outputs_exist: Any, /, **params: Any) -> Any:
    """Run task ``t`` (a cache hit returns the stored summary without doing the work); if the
    summary points at outputs that are gone (a deleted run dir, a fresh catalog) or have been
    replaced since (``outputs_exist`` checks they are still this result's: latest versions,
    the run dir's run.json), run it again with ``refresh_cache`` so the cache can never hand
    back something that does not exist or is no longer there."""
    t = with_storage(t, data_root)
    out = t(**params)
    if not outputs_exist(out, data_root):
        out = t.with_options(refresh_cache=True)(**params)
    return out


def catalog_has(data_root: str, *refs: str | None) -> bool:
    """True when every ref resolves in the catalog at ``data_root``."""
    from curation.catalog import Catalog
    from curation.errors import NotFoundError

    cat = Catalog(data_root)
    for ref in refs:
        if not ref:
            continue
        try:
            cat.resolve(ref)
        except (NotFoundError, KeyError, FileNotFoundError):
            return False
    return True


def catalog_current(data_root: str, *refs: str | None) -> bool:
    """True when every ref resolves and is the *latest* version of its name. A cached stage
    whose outputs were replaced since (the source changed, then changed back) publishes again,
    so ``NAME@latest`` is what this run produced, not what the run in between did."""
    from curation.catalog import Catalog
    from curation.errors import NotFoundError

    cat = Catalog(data_root)
    for ref in refs:
        if not ref:
            continue
        try:
            if cat.resolve(ref.partition("@")[0]).ref != cat.resolve(ref).ref:
                return False
        except (NotFoundError, KeyError, FileNotFoundError):
            return False
    return True


def file_sha256(path: str | os.PathLike) -> str | None:
    """SHA-256 of a file's bytes (None: no such file)."""
    from curation.rundir import file_sha256 as sha256

    try:
        return sha256(path)
    except FileNotFoundError:
        return None


def run_dir_is(summary: dict[str, Any]) -> bool:
    """The run dir a decontamination summary names still holds that run (its run.json)."""
    want = summary.get("run_json_sha256")
    return want is not None and file_sha256(Path(summary["run_dir"]) / "run.json") == want


def artifact_key(pool: str, what: str) -> str:
    """A stable artifact key: ``sluice-<pool>-<what>``, lowercase letters, digits, dashes."""
    import re

    slug = re.sub(r"[^a-z0-9]+", "-", f"sluice-{pool}-{what}".lower()).strip("-")
    return slug


def _ray_key(ctx: Any, params: dict[str, Any]) -> str:
    p = {
        k: v for k, v in _what(params).items() if k not in ("address", "num_workers", "block_rows")
    }
    p["shard_paths"] = [content_fingerprint(s) for s in params["shard_paths"]]
    return _hash(
        "ray-scan", p, _benchmarks_fingerprint(params.get("benchmarks_dir")), code_fingerprint()
    )


@task(name="ray-scan", cache_policy=_policy(_ray_key), **_COMMON)
def ray_scan_shards(
    shard_paths: list[str],
    decontam: dict[str, Any],
    benchmarks_dir: str | None = None,
    address: str | None = None,
    num_workers: int = 2,
    block_rows: int = 2000,
    data_root: str | None = None,
) -> dict[str, Any]:
    """Score every shard on Ray (see :mod:`flows.ray_scan`), reading each in blocks of
    ``block_rows`` texts and writing its matches block by block to one ``.matches.parquet``
    per shard (memory bounded by the blocks in flight). The result depends on neither the
    address, the worker count nor the block size, so none is part of the cache key. The actors
    fit their detectors against ``data_root`` (catalog refs of a background corpus, caches),
    as :func:`scan_shard` does."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from decontam.base import MATCH_SCHEMA
    from flows.ray_scan import ray_scan_blocks

    outs = [p.removesuffix(".parquet") + ".matches.parquet" for p in shard_paths]
    tmps = [f"{o}.{os.getpid()}.tmp" for o in outs]
    n = 0
    prog = shard_progress()  # the blocks come back in order: a shard ends at the next one's
    sizes = [pq.ParquetFile(p).metadata.num_rows for p in shard_paths] if prog else []
    ended = 0

    def shards_end(upto: int) -> None:
        nonlocal ended
        for k in range(ended, upto):
            prog.part_done(f"shard {k + 1} of {len(shard_paths)}", sizes[k])
        ended = max(ended, upto)

    def blocks():
        nonlocal n
        for i, p in enumerate(shard_paths):
            for rb in pq.ParquetFile(p).iter_batches(batch_size=block_rows):
                n += rb.num_rows
                yield (i, rb.num_rows), pa.Table.from_batches([rb])

    writers: dict[int, Any] = {}
    try:
        if prog is not None:
            prog.part_start()
        for (i, rows), m in ray_scan_blocks(
            blocks(), decontam, benchmarks_dir=benchmarks_dir, address=address,
            num_workers=num_workers, data_root=data_root,
        ):  # fmt: skip
            if i not in writers:
                writers[i] = pq.ParquetWriter(tmps[i], MATCH_SCHEMA)
            writers[i].write_table(m)
            if prog is not None:
                shards_end(i)
                prog.advance(rows)
        for i in range(len(outs)):  # a shard without texts gets an empty matches file
            if i not in writers:
                writers[i] = pq.ParquetWriter(tmps[i], MATCH_SCHEMA)
            writers[i].close()
            os.replace(tmps[i], outs[i])
        if prog is not None:
            shards_end(len(shard_paths))
    finally:
        for w in writers.values():
            w.close()
        for t in tmps:
            Path(t).unlink(missing_ok=True)
    return {
        "matches_paths": outs,
        "matches_sha256": [file_sha256(o) for o in outs],
        "texts": n,
        "texts_scanned": n,
        "texts_cached": 0,
    }
