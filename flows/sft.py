"""`sft_flow`: prompt pool version -> teacher responses -> graded, filtered, decontaminated SFT
sets (the scaling grid) -> report. Thin: each task calls one library function of
:mod:`sft_generation.runs` and passes catalog refs and paths, never tables.

Config (TOML/YAML), one ``[sft]`` table::

    [sft]
    pool = "gsm8k.decontaminated@latest"
    name = "gsm8k"                       # catalog name of the outputs (default: the pool's)
    out = "runs/sft"                     # run directory (default: under the data root)
    responses_per_prompt = 4
    data_root = ".sluice"                # optional
    # out, data_root and benchmarks_dir: relative to this file's folder; ${VAR} and ~ expanded
    [sft.teacher]                        # TeacherConfig: temperature, top_p, max_tokens, seed...
    model = "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"
    [sft.generation]                     # GenerationConfig: backend, base_url, mode, concurrency...
    backend = "openai"
    base_url = "http://localhost:8000/v1"
    [sft.filters]                        # FilterConfig
    keep_policy = "verified"
    [sft.grid]
    prompts = [1000, 5000]
    responses = [1, 2, 4]

An unchanged rerun makes no model call: every response is found in the content-keyed sample
store (the generate task republishes identical content, which the catalog keeps as the same
version), and the build task is cached on the raw version, the config and the code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prefect import flow, task

from curation.errors import ConfigError, did_you_mean
from flows.tasks import _COMMON, _hash, _policy, cached_or_rerun, code_fingerprint

SFT_KEYS = ("pool", "name", "out", "responses_per_prompt", "data_root", "teacher", "generation",
            "filters", "grid", "limit", "benchmarks_dir")  # fmt: skip


def load_sft_config(path: str | os.PathLike) -> dict[str, Any]:
    """The ``[sft]`` table of a config file, checked (unknown keys name the allowed ones)."""
    from curation.config_files import read_config_file

    p = Path(path)
    data = read_config_file(p, hint="see docs/sft.md for the format")
    cfg = data.get("sft")
    if not isinstance(cfg, dict):
        raise ConfigError(f"{p}: no [sft] table", hint="see docs/sft.md for the format")
    for k in cfg:
        if k not in SFT_KEYS:
            raise ConfigError(f"{p}: unknown [sft] key {k!r}", hint=did_you_mean(k, SFT_KEYS))
    if "pool" not in cfg:
        raise ConfigError(f"{p}: [sft] needs pool = NAME@VERSION")
    # validate the typed parts now, not after the model has been called
    from curation.generation import GenerationConfig
    from sft_generation.build import parse_counts
    from sft_generation.config import FilterConfig, TeacherConfig, check_output_names

    for key in ("responses_per_prompt", "limit"):
        v = cfg.get(key)
        if v is None and (key == "limit" or key not in cfg):
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{p}: [sft] {key} must be a whole number >= 1, got {v!r}")
    for key in ("pool", "name", "out", "data_root", "benchmarks_dir"):
        if key in cfg and not isinstance(cfg[key], str):
            raise ConfigError(f"{p}: [sft] {key} must be text, got {cfg[key]!r}")
        if key in cfg and not cfg[key].strip():  # "" was the config's own folder, or no pool
            raise ConfigError(
                f"{p}: [sft] {key} is empty", hint="leave the key out for its default"
            )
    for key in ("generation", "teacher", "filters"):
        if not isinstance(cfg.get(key) or {}, dict):
            raise ConfigError(f"{p}: [sft.{key}] must be a table, got {cfg[key]!r}",
                              hint="see docs/sft.md for the format")  # fmt: skip
    grid = cfg.get("grid") or {}
    if not isinstance(grid, dict):
        raise ConfigError(f"{p}: [sft.grid] must be a table, got {grid!r}")
    for k in grid:
        if k not in ("prompts", "responses"):
            raise ConfigError(
                f"{p}: unknown [sft.grid] key {k!r}",
                hint=did_you_mean(k, ["prompts", "responses"]),
            )
    try:
        grid_p = parse_counts(grid.get("prompts"), "prompts")
        grid_r = parse_counts(grid.get("responses"), "responses")
    except ConfigError as exc:
        raise ConfigError(f"{p}: [sft.grid] {exc.message.lstrip('-')}") from None
    if bool(grid_p) != bool(grid_r):
        raise ConfigError(f"{p}: [sft.grid] give both prompts and responses, or neither")
    if "name" in cfg:
        cells = [f".sft.p{a}.r{b}" for a in grid_p for b in grid_r] or [".sft.all"]
        try:
            check_output_names(cfg["name"], [".sft_raw", ".sft_responses", *cells],
                               option="[sft] name")  # fmt: skip
        except ConfigError as exc:
            raise ConfigError(f"{p}: {exc.message}", hint=exc.hint) from None
    gen = dict(cfg.get("generation") or {})
    teacher = dict(cfg.get("teacher") or {})
    if "model" not in gen and "model" in teacher:
        gen["model"] = teacher["model"]
    elif "model" in gen and "model" in teacher and gen["model"] != teacher["model"]:
        raise ConfigError(  # one of them was silently ignored (the generation's won)
            f"{p}: [sft.teacher] model {teacher['model']!r} and [sft.generation] model "
            f"{gen['model']!r} differ",
            hint="name the teacher once (either table); it is the model that is sampled",
        )
    tables = {"generation": GenerationConfig, "teacher": TeacherConfig, "filters": FilterConfig}
    values = {"generation": gen, "teacher": teacher, "filters": cfg.get("filters") or {}}
    for table, klass in tables.items():
        _typed(klass, values[table], f"{p} [sft.{table}]", siblings=tables)
    # paths are relative to the file's folder, as in the pipeline config (they were relative to
    # wherever the command ran, so a served flow wrote elsewhere than the same config run by hand)
    from curation.config_files import resolve_path

    for key in ("out", "data_root", "benchmarks_dir"):
        if key in cfg:
            cfg[key] = resolve_path(cfg[key], p.resolve().parent)
            where = Path(cfg[key])
            if where.exists() and not where.is_dir():
                raise ConfigError(f"{p}: [sft] {key} {str(where)!r} is not a folder",
                                  hint="give a folder path")  # fmt: skip
            if key == "benchmarks_dir" and not where.exists():
                raise ConfigError(f"{p}: [sft] benchmarks_dir {str(where)!r} does not exist",
                                  hint="give the folder of the benchmark files, or leave the key "
                                  "out for the default")  # fmt: skip
    return cfg


def _typed(
    klass: type, values: dict[str, Any], where: str, siblings: dict[str, type] | None = None
) -> Any:
    """``klass(**values)`` for one table of the file: an unknown key (a TypeError traceback)
    or a bad value is one error naming the file and the table (``where``). An unknown key close
    to none of this table's but to a key of a sibling table (``siblings``: table name -> class)
    says where that key is: ``temprature`` under [sft.generation] is [sft.teacher]'s."""
    import dataclasses
    import difflib

    allowed = sorted(f.name for f in dataclasses.fields(klass))
    for k in values:
        if k not in allowed:
            hint = did_you_mean(k, allowed)
            if not difflib.get_close_matches(k, allowed, n=1):  # none of its own: a sibling's?
                for table, other in (siblings or {}).items():
                    theirs = [f.name for f in dataclasses.fields(other)]
                    close = difflib.get_close_matches(k, theirs, n=1)
                    if other is not klass and close:
                        hint = f"did you mean {close[0]!r}? It is a key of [sft.{table}]"
                        break
            raise ConfigError(f"{where}: unknown key {k!r}", hint=hint)
    try:
        return klass(**values)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc.message}", hint=exc.hint) from None


def _build_key(ctx: Any, params: dict[str, Any]) -> str:
    return _hash("sft-build", params, code_fingerprint())


@task(name="sft-generate", **_COMMON)
def sft_generate(cfg: dict[str, Any], data_root: str) -> dict[str, Any]:
    """Generate the missing teacher responses; publish NAME.sft_raw (a ref)."""
    from curation.catalog import Catalog
    from curation.generation import GenerationConfig
    from sft_generation.config import TeacherConfig
    from sft_generation.runs import generate_from_pool

    gen = dict(cfg.get("generation") or {})
    teacher = dict(cfg.get("teacher") or {})
    gen.setdefault("model", teacher.get("model"))
    res = generate_from_pool(
        cfg["pool"],
        generation=GenerationConfig(**gen),
        teacher=TeacherConfig(**teacher) if teacher else None,
        responses_per_prompt=int(cfg.get("responses_per_prompt", 1)),
        name=cfg.get("name"),
        catalog=Catalog(data_root),
        data_root=data_root,
        limit=cfg.get("limit"),
    )
    print(f"{len(res.rows)} responses: {res.generated} generated, {res.reused} from the store")
    return {"raw_ref": res.raw_ref, "generated": res.generated, "reused": res.reused,
            "failed": res.failed}  # fmt: skip


@task(name="sft-build", cache_policy=_policy(_build_key), **_COMMON)
def sft_build(raw_ref: str, cfg: dict[str, Any], out_dir: str, data_root: str) -> dict[str, Any]:
    """Grade, filter and decontaminate the responses; publish the grid versions and the report."""
    from curation.catalog import Catalog
    from sft_generation.config import FilterConfig
    from sft_generation.runs import build_from_ref

    grid = cfg.get("grid") or {}
    res = build_from_ref(
        raw_ref,
        out_dir=out_dir,
        filters=FilterConfig.from_dict(cfg.get("filters") or {}),
        prompts=grid.get("prompts"),
        responses=grid.get("responses"),
        name=cfg.get("name"),
        catalog=Catalog(data_root),
        data_root=data_root,
        benchmarks_dir=cfg.get("benchmarks_dir"),
    )
    return {
        "responses_ref": res.responses_ref,
        "grid": res.grid,
        "warnings": res.warnings,
        "counts": res.counts,
        "report": res.manifest.get("report", {}).get("html"),
        "out_dir": str(out_dir),
    }


def _outputs_exist(summary: dict[str, Any], data_root: str) -> bool:
    from flows.tasks import catalog_has

    refs = [summary.get("responses_ref")] + [g.get("ref") for g in summary.get("grid", [])]
    return os.path.isdir(summary["out_dir"]) and catalog_has(data_root, *refs)


@flow(name="sluice-sft", log_prints=True)
def sft_flow(config_path: str, data_root: str | None = None) -> dict[str, Any]:
    """Run the SFT stage for the ``[sft]`` table of ``config_path``."""
    from curation.settings import data_root as resolve_root

    cfg = load_sft_config(config_path)
    root = resolve_root(data_root or cfg.get("data_root"))
    gen = sft_generate(cfg, root)
    out = cfg.get("out") or str(Path(root) / "runs" / "sft" / gen["raw_ref"].replace("@", "-"))
    built = cached_or_rerun(
        sft_build, root, _outputs_exist, raw_ref=gen["raw_ref"], cfg=cfg,
        out_dir=str(Path(out).expanduser().resolve()), data_root=root,
    )  # fmt: skip
    return {**gen, **built}


def sft_deployment(
    config_path: str | os.PathLike,
    *,
    name: str = "sluice-sft",
    cron: str | None = None,
    interval: float | None = None,
    data_root: str | None = None,
) -> Any:
    """A ``RunnerDeployment`` of :func:`sft_flow` (served by `sluice sft serve`)."""
    from flows.deployments import check_schedule

    check_schedule(cron, interval)
    p = Path(config_path).expanduser().resolve()
    load_sft_config(p)  # fail now, not at 3 a.m.
    params: dict[str, Any] = {"config_path": str(p)}
    if data_root:
        params["data_root"] = str(Path(data_root).expanduser().resolve())
    return sft_flow.to_deployment(
        name=name, cron=cron, interval=interval, parameters=params,
        description=f"Sluice SFT: {p.name}", tags=["sluice", "sft"],
    )  # fmt: skip
