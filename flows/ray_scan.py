"""Scale-out of the decontamination scan on Ray.

The text table (one row per sample text) is split into blocks; a pool of Ray actors,
each holding the *fitted* detectors (fit once in the actor's ``__init__``, from the benchmark
set the driver loaded and shipped once), scores the blocks; the driver gathers the match
records and sorts them exactly as :func:`decontam.run.scan` does, so a Ray run and a
single-process run produce the same records. The policy (decisions) then runs once, on the
driver, over all matches: it is cheap and needs every match of a sample together.

Locally: ``ray.init(num_cpus=N)`` (started on demand). On a cluster: pass its address
(``--ray-address ray://head:10001`` or ``auto``); the workers need ``sluice-data`` installed
and the benchmarks are shipped from the driver, so only the driver reads them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa


class _ScanActor:
    """Holds fitted detectors; scores one pyarrow batch of the text table per call."""

    def __init__(
        self, decontam: dict[str, Any], benchmarks: Any, data_root: str | None = None
    ) -> None:
        from decontam.run import DecontamConfig, build_detectors

        self.config = DecontamConfig(**decontam)
        # the run's data root: catalog refs in detector options (ngram's background corpus)
        # resolve there, and caches live there, as in the single-process scan
        self.detectors = build_detectors(
            self.config.detectors, self.config, benchmarks, data_root=data_root
        )

    def score(self, batch: pa.Table) -> pa.Table:
        from decontam.run import scan

        texts = batch.select(["sample_uid", "field", "text"])
        return scan(texts, self.detectors, batch_size=self.config.batch_size)


def ensure_ray(address: str | None = None, *, num_cpus: int | None = None) -> Any:
    """Connect to ``address`` (a cluster), or start a local Ray with ``num_cpus`` CPUs; reuse
    a session that is already up. Returns the ``ray`` module."""
    from curation.errors import require

    ray = require("ray", extra="scale")
    if not ray.is_initialized():
        if address and address != "local":
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    return ray


def ray_scan(
    texts: pa.Table,
    decontam: dict[str, Any],
    *,
    benchmarks: Any = None,
    benchmarks_dir: str | None = None,
    address: str | None = None,
    num_workers: int = 2,
    block_rows: int = 2000,
) -> pa.Table:
    """Score ``texts`` (:data:`~decontam.base.TEXT_TABLE_SCHEMA`) on Ray with ``num_workers``
    detector actors. Returns the match table sorted like :func:`decontam.run.scan`."""
    from decontam.base import empty_matches
    from decontam.run import _MATCH_SORT

    blocks = ((None, texts.slice(i, block_rows)) for i in range(0, texts.num_rows, block_rows))
    parts = [
        m
        for _, m in ray_scan_blocks(
            blocks,
            decontam,
            benchmarks=benchmarks,
            benchmarks_dir=benchmarks_dir,
            address=address,
            num_workers=num_workers,
        )  # fmt: skip
        if m.num_rows
    ]
    if not parts:
        return empty_matches()
    return pa.concat_tables(parts).sort_by(_MATCH_SORT)


def ray_scan_blocks(
    blocks: Iterable[tuple[Any, pa.Table]],
    decontam: dict[str, Any],
    *,
    benchmarks: Any = None,
    benchmarks_dir: str | None = None,
    address: str | None = None,
    num_workers: int = 2,
    data_root: str | None = None,
) -> Iterator[tuple[Any, pa.Table]]:
    """``(key, matches)`` for each ``(key, texts)`` block, in order, scored on Ray with
    ``num_workers`` detector actors (match records in :data:`~decontam.base.MATCH_SCHEMA`,
    unsorted). At most two blocks per actor are in flight, so the driver holds a bounded
    number of blocks however many it is given. Ray starts only when there is a block."""
    from collections import deque

    from decontam.base import MATCH_SCHEMA
    from decontam.run import DecontamConfig, load_benchmark_set

    it = iter(blocks)
    first = next(it, None)
    if first is None:
        return
    cfg = DecontamConfig(**decontam)
    if benchmarks is None:
        benchmarks = load_benchmark_set(cfg, benchmarks_dir=benchmarks_dir)
    ray = ensure_ray(address, num_cpus=num_workers)
    # Plain actors rather than Ray Data: scoring is CPU-bound and stateful (fitted indexes), and
    # a fixed pool of actors fed blocks round-robin keeps every CPU busy without Ray Data's
    # own scheduling needing spare CPUs (which deadlocks on a 2-CPU machine).
    actor_cls = ray.remote(num_cpus=1)(_ScanActor)
    bench_ref = ray.put(benchmarks)  # shipped once, shared by every actor
    actors = [actor_cls.remote(cfg.to_dict(), bench_ref, data_root) for _ in range(num_workers)]
    queue: deque = deque()

    def done() -> tuple[Any, pa.Table]:
        key, fut = queue.popleft()
        return key, ray.get(fut).select(MATCH_SCHEMA.names).cast(MATCH_SCHEMA)

    try:
        for k, (key, block) in enumerate(itertools.chain([first], it)):
            queue.append((key, actors[k % num_workers].score.remote(block)))
            if len(queue) >= 2 * num_workers:
                yield done()
        while queue:
            yield done()
    finally:
        for a in actors:
            ray.kill(a)
