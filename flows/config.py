"""The pipeline config file: one TOML or YAML file that declares what `sluice run` curates.

```toml
data_root = ".sluice"                 # catalog + Parquet store + Prefect state (relative: to this file)

[benchmarks]
names = ["aime24", "aime25"]           # default: every registered benchmark
# dir = "/path/to/benchmarks"          # local mirror (default: SLUICE_BENCHMARKS_DIR / shared)
# window = "paper"                     # or "2024-08-01..2025-05-01"

[detectors]
names = ["ngram", "minhash", "problem_id"]
thresholds = { ngram = 0.5 }

[[pools]]
name = "ttrl-aime24"
source = "${SLUICE_SHARED_DIR}/pools/math_ttrl_aime24_as_train.jsonl"
map = "ttrl"                          # a built-in field map name, or a map file
text_fields = ["problem"]

[outputs]
publish_as = "{pool}"                # -> {pool}.decontaminated, {pool}.excluded
report_dir = "reports"

[scale]
shards = 1                             # > 1: scan shards as separate tasks (or on Ray)
# ray_address = "auto"                 # set: shards run on that Ray cluster
# workers = 0                          # unsharded: scan processes (0: one per core)
# stream_rows = 50000                  # rows read, scanned and written at a time
```

The dataclasses below are the single source of truth for these keys; the CLI reads the same
objects. Paths in the file are relative to the file's folder; ``${VAR}`` is expanded.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from curation.errors import ConfigError, check_keys, did_you_mean

CONFIG_SCHEMA_VERSION = "pipeline/1"

_POOL_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def _check_keys(section: str, raw: dict[str, Any], cls: type) -> None:
    check_keys(f"[{section}]", raw, cls)


@dataclass
class BenchmarksConfig:
    names: list[str] | None = field(
        default=None, metadata={"help": "benchmarks to check against (default: all registered)"}
    )
    dir: str | None = field(
        default=None, metadata={"help": "local benchmark mirror (default: SLUICE_BENCHMARKS_DIR)"}
    )
    window: str | list[str] | None = field(
        default=None,
        metadata={"help": "LiveCodeBench window: 'paper', 'START..END' or [start, end] ISO dates"},
    )
    include_variants: bool = field(
        default=True, metadata={"help": "also check alternative AIME wordings"}
    )

    def __post_init__(self) -> None:
        if self.names is not None and (
            not isinstance(self.names, list) or not all(isinstance(n, str) for n in self.names)
        ):
            raise ConfigError("[benchmarks] names must be a list of benchmark names")
        if self.names is not None:
            # checked here, before Prefect starts or anything is ingested
            from decontam.benchmarks import available_benchmarks

            known = available_benchmarks()
            if not self.names:
                raise ConfigError(
                    "[benchmarks] names is empty",
                    hint="name at least one benchmark, or leave names out for all of them",
                )
            for name in self.names:
                if name not in known:
                    raise ConfigError(
                        f"unknown benchmark {name!r} in [benchmarks]",
                        hint=did_you_mean(name, known),
                    )
        if not isinstance(self.include_variants, bool):
            raise ConfigError(
                f"[benchmarks] include_variants must be true or false, got {self.include_variants!r}"
            )
        if self.dir is not None and not isinstance(self.dir, str):
            raise ConfigError(f"[benchmarks] dir must be a path (a string), got {self.dir!r}")
        if isinstance(self.window, list):
            if len(self.window) != 2:
                raise ConfigError(
                    "[benchmarks] window must be two ISO dates",
                    hint='e.g. ["2024-08-01", "2025-05-01"] or "paper"',
                )
            self.window = f"{self.window[0]}..{self.window[1]}"


@dataclass
class DetectorsConfig:
    names: list[str] | None = field(
        default=None, metadata={"help": "detectors to run (default: the registry's defaults)"}
    )
    thresholds: dict[str, float] = field(
        default_factory=dict,
        metadata={"help": "detector name -> decision threshold (policy; no rescan needed)"},
    )
    evidence_only: list[str] = field(
        default_factory=list,
        metadata={"help": "detectors whose matches are kept as evidence but never flag alone"},
    )
    options: dict[str, dict[str, Any]] = field(
        default_factory=dict,
        metadata={"help": "detector name -> fields of that detector's config dataclass"},
    )

    def __post_init__(self) -> None:
        import dataclasses

        from decontam.registry import DETECTORS, detector_class

        for key, kind in (("names", list), ("evidence_only", list), ("thresholds", dict),
                          ("options", dict)):  # fmt: skip
            v = getattr(self, key)
            if v is not None and not isinstance(v, kind):
                what = "a list of detector names" if kind is list else "a table"
                raise ConfigError(
                    f"[detectors] {key} must be {what}, got {v!r}",
                    hint=f'e.g. {key} = ["ngram", "minhash"]'
                    if kind is list
                    else f"e.g. {key} = {{ ngram = ... }}",
                )
            if kind is list and v is not None and not all(isinstance(x, str) for x in v):
                raise ConfigError(f"[detectors] {key} must be a list of detector names, got {v!r}")
        for name, opts in self.options.items():
            if not isinstance(opts, dict):
                raise ConfigError(
                    f"[detectors] options.{name} must be a table of that detector's settings, "
                    f"got {opts!r}",
                    hint=f"write [detectors.options.{name}] with that detector's config fields",
                )
        for name in [
            *(self.names or []),
            *self.thresholds,
            *self.options,
            *self.evidence_only,
        ]:
            if name not in DETECTORS:
                raise ConfigError(
                    f"unknown detector {name!r} in [detectors]",
                    hint=did_you_mean(name, list(DETECTORS)),
                )
        for name, opts in self.options.items():  # each key a field of that detector's config
            known = [f.name for f in dataclasses.fields(detector_class(name).config_cls)]
            for key in opts:
                if key not in known:
                    raise ConfigError(
                        f"[detectors] options.{name}: unknown setting {key!r}",
                        hint=did_you_mean(key, known),
                    )
        from decontam.policy import check_score

        for name, thr in self.thresholds.items():
            check_score(thr, f"[detectors] thresholds.{name}")


@dataclass
class PoolConfig:
    name: str = field(metadata={"help": "dataset name in the catalog (lowercase, dashes)"})
    source: str = field(
        metadata={"help": "file, folder (folder#split for one split) or hf://<repo>#<split>"}
    )
    map: str = field(
        default="auto",
        metadata={"help": "field map: a shipped map name, a map file, or 'auto' (by file name)"},
    )
    text_fields: list[str] = field(
        default_factory=lambda: ["problem"],
        metadata={"help": "fields scanned for contamination"},
    )
    id_field: str | None = field(default="uid", metadata={"help": "row id field"})
    on_conflict: str = field(
        default="keep_first",
        metadata={
            "help": "a duplicate problem whose answer, tests or starter code differ: keep_first "
            "(keep the first row, flag the later one) or drop (reject both); see docs/ingest.md"
        },
    )

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _POOL_NAME.match(self.name):
            raise ConfigError(
                f"pool name {self.name!r} is not a valid dataset name",
                hint="use lowercase letters, digits, '.', '_' and '-'",
            )
        for key in ("source", "map"):
            if not isinstance(getattr(self, key), str):
                raise ConfigError(
                    f"pool {self.name!r}: {key} must be a string, got {getattr(self, key)!r}"
                )
        if not isinstance(self.text_fields, list) or not all(
            isinstance(f, str) for f in self.text_fields
        ):
            raise ConfigError(
                f"pool {self.name!r}: text_fields must be a list of column names, got "
                f"{self.text_fields!r}",
                hint='e.g. text_fields = ["problem"]',
            )
        if not self.text_fields:
            raise ConfigError(f"pool {self.name!r}: text_fields must name at least one field")
        self.text_fields = list(dict.fromkeys(self.text_fields))  # a field named twice scans once
        from curation.dedup import ON_CONFLICT  # (pyarrow: not at import, for a fast --help)

        if self.on_conflict not in ON_CONFLICT:
            raise ConfigError(
                f"pool {self.name!r}: on_conflict must be one of {', '.join(ON_CONFLICT)}, got "
                f"{self.on_conflict!r}",
                hint="keep_first keeps the first row and flags the conflict; drop rejects both",
            )
        if self.id_field is not None and not isinstance(self.id_field, str):
            raise ConfigError(
                f"pool {self.name!r}: id_field must be a string, got {self.id_field!r}"
            )

    def check(self) -> None:
        """What can be checked before any work: the source exists, the field map loads (``auto``
        picks one, from the file's name or first rows), and the text and id fields are columns
        of the schema that map produces. Raises the first problem as a SluiceError."""
        from curation.ingest import select_map
        from curation.readers import parse_source, read_batches
        from curation.records import PROBLEM_SCHEMA, SFT_SAMPLE_SCHEMA

        spec = parse_source(self.source)
        if spec.kind == "hf_hub" and self.map == "auto":
            return  # choosing a map would read the hub: the ingest does that
        fmap = select_map(self.map, spec)
        if spec.kind != "hf_hub":  # the map reads columns the file has (its first rows)
            seen: set[str] = set()
            for batch in read_batches(spec, batch_size=100):
                seen.update(k for r in batch.rows for k in r)
                if seen:
                    fmap.check_columns(seen, spec.location)
                    break
        columns = (PROBLEM_SCHEMA if fmap.schema == "problem" else SFT_SAMPLE_SCHEMA).names
        for what, name in [
            *(("text_fields", f) for f in self.text_fields),
            ("id_field", self.id_field),
        ]:
            if name is not None and name not in columns:
                raise ConfigError(
                    f"{what}: {name!r} is not a column of what field map {fmap.name!r} "
                    f"produces ({fmap.schema} schema)",
                    hint=did_you_mean(name, columns),
                )


@dataclass
class OutputsConfig:
    publish_as: str = field(
        default="{pool}",
        metadata={
            "help": "base name of the published outputs: <name>.decontaminated, <name>.excluded"
        },
    )
    report_dir: str = field(
        default="reports", metadata={"help": "folder for reports (relative: to the data root)"}
    )

    def __post_init__(self) -> None:
        if not isinstance(self.report_dir, str):
            raise ConfigError(
                f"[outputs] report_dir must be a path (a string), got {self.report_dir!r}"
            )
        if not isinstance(self.publish_as, str):
            raise ConfigError(f"[outputs] publish_as must be a string, got {self.publish_as!r}")
        try:
            self.publish_as.format(pool="pool")
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(
                f"[outputs] publish_as {self.publish_as!r} may name only {{pool}} ({exc!r})",
                hint='e.g. "{pool}" or "curated-{pool}"; write a literal brace as {{ or }}',
            ) from None
        if "{pool}" not in self.publish_as:
            raise ConfigError(
                f"[outputs] publish_as {self.publish_as!r} must contain '{{pool}}'",
                hint='e.g. "{pool}" or "curated-{pool}"',
            )


@dataclass
class ScaleConfig:
    shards: int = field(default=1, metadata={"help": "scan shards (1: one process)"})
    ray_address: str | None = field(
        default=None, metadata={"help": "Ray cluster address; set: shards run on Ray"}
    )
    workers: int = field(
        default=0,
        metadata={
            "help": "scan processes of an unsharded pool (0: one per CPU core for pools of at "
            "least 4 batches; 1: scan in the task's process); output does not depend on it"
        },
    )
    stream_rows: int = field(
        default=50_000,
        metadata={
            "help": "rows read, scanned, decided and written at a time (memory flat in pool "
            "size; larger batches: less overhead, more memory)"
        },
    )

    def __post_init__(self) -> None:
        if self.ray_address is not None and not isinstance(self.ray_address, str):
            raise ConfigError(
                f"[scale] ray_address must be a string, got {self.ray_address!r}",
                hint='e.g. "auto", "local" or "ray://head:10001"',
            )
        for key, low in (("shards", 1), ("workers", 0), ("stream_rows", 1)):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ConfigError(f"[scale] {key} must be an integer >= {low}, got {v!r}")


@dataclass
class PipelineConfig:
    pools: list[PoolConfig]
    data_root: str | None = field(default=None, metadata={"help": "catalog + state folder"})
    benchmarks: BenchmarksConfig = field(default_factory=BenchmarksConfig)
    detectors: DetectorsConfig = field(default_factory=DetectorsConfig)
    outputs: OutputsConfig = field(default_factory=OutputsConfig)
    scale: ScaleConfig = field(default_factory=ScaleConfig)

    def __post_init__(self) -> None:
        if not self.pools:
            raise ConfigError("the config declares no pools", hint="add a [[pools]] table")
        names = [p.name for p in self.pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"pool names must be unique; repeated: {', '.join(dupes)}")
        from curation.catalog import check_name

        for name in names:  # the published names, before any pool is ingested and scanned
            out = self.publish_name(name)
            try:
                check_name(out, ".decontaminated")
            except ConfigError as exc:
                raise ConfigError(
                    f"[outputs] publish_as {self.outputs.publish_as!r} gives {out!r} for pool "
                    f"{name!r}: {exc.message}",
                    hint=exc.hint,
                ) from None

    def check_pools(self) -> None:
        """:meth:`PoolConfig.check` for every pool, before anything starts (no Prefect server,
        no ingest): one :class:`ConfigError` naming each pool that fails, a line each."""
        from curation.errors import SluiceError

        problems = []
        for pool in self.pools:
            try:
                pool.check()
            except SluiceError as exc:
                problems.append(f"pool {pool.name!r}: {exc}")
        if problems:
            n = len(problems)
            raise ConfigError(
                f"{n} of {len(self.pools)} pools cannot run:\n  " + "\n  ".join(problems),
                hint="fix those [[pools]] entries; nothing was ingested",
            )

    # -- derived -----------------------------------------------------------------------
    def resolved_data_root(self) -> str:
        from curation.settings import data_root

        return data_root(self.data_root)

    def report_root(self) -> Path:
        p = Path(self.outputs.report_dir)
        return p if p.is_absolute() else Path(self.resolved_data_root()) / p

    def publish_name(self, pool: str) -> str:
        return self.outputs.publish_as.format(pool=pool)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def decontam_config(self) -> Any:
        """The :class:`decontam.run.DecontamConfig` this file defines (validated)."""
        from decontam.policy import PolicyConfig
        from decontam.registry import DEFAULT_DETECTORS
        from decontam.run import ALL_BENCHMARKS, DecontamConfig

        b, d = self.benchmarks, self.detectors
        # The calibrated default policy, with this file's thresholds on top.
        file_policy = PolicyConfig(
            thresholds={k: float(v) for k, v in d.thresholds.items()},
            evidence_only=list(d.evidence_only or []),
        )
        return DecontamConfig(
            benchmarks=list(b.names or ALL_BENCHMARKS),
            detectors=list(d.names or DEFAULT_DETECTORS),
            detector_configs={k: dict(v) for k, v in d.options.items()},
            policy=file_policy.merged_over(PolicyConfig.default()),
            window=b.window,
            include_variants=b.include_variants,
            workers=self.scale.workers,
            stream_rows=self.scale.stream_rows,
        )

    def hash(self) -> str:
        blob = json.dumps(self.to_dict(), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, base_dir: Path | None = None) -> PipelineConfig:
        if not isinstance(raw, dict):
            raise ConfigError("a pipeline config must be a table/mapping at the top level")
        _check_keys("top level", raw, cls)
        base = base_dir or Path.cwd()

        def section(name: str, sub: type) -> Any:
            val = raw.get(name) or {}
            if not isinstance(val, dict):
                raise ConfigError(f"[{name}] must be a table/mapping")
            _check_keys(name, val, sub)
            return sub(**val)

        pools_raw = raw.get("pools") or []
        if not isinstance(pools_raw, list):
            raise ConfigError("pools must be a list of tables ([[pools]] in TOML)")
        pools = []
        for i, p in enumerate(pools_raw):
            if not isinstance(p, dict):
                raise ConfigError(f"pools[{i}] must be a table/mapping")
            _check_keys(f"pools[{i}]", p, PoolConfig)
            for req in ("name", "source"):
                if req not in p:
                    raise ConfigError(f"pools[{i}] is missing {req!r}")
            p = dict(p)
            p["source"] = _resolve_path(p["source"], base)
            if isinstance(p.get("map"), str) and p["map"].endswith((".toml", ".yaml", ".yml")):
                p["map"] = _resolve_path(p["map"], base)  # a map file beside the config
            pools.append(PoolConfig(**p))

        bench = section("benchmarks", BenchmarksConfig)
        if bench.dir:
            bench.dir = _resolve_path(bench.dir, base)
            if not Path(bench.dir).is_dir():  # else every pool failed after its ingest
                raise ConfigError(
                    f"[benchmarks] dir {bench.dir} is not a folder",
                    hint="point it at a benchmark mirror (the files of `sluice benchmarks list`), "
                    "or leave it out for SLUICE_BENCHMARKS_DIR / the Hub",
                )
        outputs = section("outputs", OutputsConfig)
        data_root = raw.get("data_root")
        if data_root is not None and not isinstance(data_root, str):
            raise ConfigError(f"data_root must be a path (a string), got {data_root!r}")
        if data_root:
            data_root = _resolve_path(data_root, base)
        outputs.report_dir = os.path.expanduser(os.path.expandvars(outputs.report_dir))
        return cls(
            pools=pools,
            data_root=data_root,
            benchmarks=bench,
            detectors=section("detectors", DetectorsConfig),
            outputs=outputs,
            scale=section("scale", ScaleConfig),
        )


def _resolve_path(value: str, base: Path) -> str:
    """A path of the file (:func:`curation.config_files.resolve_path`); URLs (``hf://``,
    ``s3://``...) and hub ids (``org/name`` that do not exist locally) pass."""
    from curation.config_files import resolve_path

    return resolve_path(
        value, base, other=lambda v: bool(_HUB_ID.fullmatch(v)) and not Path(v).suffix
    )


_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")


def load_config(path: str | os.PathLike) -> PipelineConfig:
    """Read a pipeline config from a ``.toml``, ``.yaml`` or ``.yml`` file."""
    from curation.config_files import naming_config_file, read_config_file

    p = Path(path).expanduser()
    raw = read_config_file(p, hint="run `sluice demo` for a sample")
    with naming_config_file(p):  # a wrong value type for a dataclass, too
        return PipelineConfig.from_dict(raw or {}, base_dir=p.resolve().parent)


def prefect_env_defaults(data_root: str) -> None:
    """Embedded defaults, set before Prefect is imported: Prefect's home (its SQLite database
    for the temporary local server, its logs) under the data root, analytics off. Variables
    the user set win; with ``PREFECT_API_URL`` set, flows report to that server instead."""
    if "://" not in data_root:
        home = Path(data_root).expanduser().resolve() / "prefect"
        if "PREFECT_HOME" not in os.environ:
            home.mkdir(parents=True, exist_ok=True)  # Prefect creates only the last level
            os.environ["PREFECT_HOME"] = str(home)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    # The first start of the temporary server creates and migrates its database; on a small,
    # busy machine that takes longer than Prefect's 20 s default.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
