"""`train_flow`: pool versions -> GRPO stages -> a checkpoint registered in the catalog with
lineage (``<name>.checkpoint``, parents = every consumed pool version).

Two tasks, passing refs and paths only: :func:`check_training_pools` pins every pool to its
exact ``name@version`` and refuses uncleaned pools; :func:`train_stages` runs all stages (they
share one in-memory model; each stage's checkpoint is written to the run directory) and
registers the final checkpoint. A retried or rerun flow whose run directory already holds a
finished run of the same resolved config returns that run instead of training again; an
interrupted one resumes after its last finished stage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefect import flow, task

from curation.errors import SluiceError


def _config_of(config: str | dict[str, Any]) -> Any:
    from training.config import TrainConfig, load_train_config

    return load_train_config(config) if isinstance(config, str) else TrainConfig.from_dict(config)


def _no_retry_on_user_error(task: Any, task_run: Any, state: Any) -> bool:
    try:
        state.result()
    except SluiceError:
        return False
    except Exception:  # noqa: BLE001 - anything else may be transient
        return True
    return False


@task(name="check-training-pools", cache_policy=None)
def check_training_pools(
    config: dict[str, Any], data_root: str, allow_uncleaned: bool = False
) -> dict[str, Any]:
    """Pin the config's pools to exact versions (refusing uncleaned ones); return the pinned
    config and what is recorded about each pool."""
    from curation.catalog import Catalog
    from training.grpo import resolve_pools

    resolved, pools = resolve_pools(
        _config_of(config), Catalog(data_root), allow_uncleaned=allow_uncleaned
    )
    return {"config": resolved.to_dict(), "pools": [p.to_dict() for p in pools]}


@task(
    name="train-stages",
    cache_policy=None,
    retries=1,
    retry_condition_fn=_no_retry_on_user_error,
)
def train_stages(
    config: dict[str, Any], out_dir: str, data_root: str, allow_uncleaned: bool = False
) -> dict[str, Any]:
    """Run every stage; return the run summary (run dir, checkpoint ref, per-stage counts)."""
    from curation.catalog import Catalog
    from training.grpo import run_grpo

    cfg = _config_of(config)
    done = Path(out_dir) / "run.json"
    if done.is_file():
        man = json.loads(done.read_text())
        if man.get("config_hash") == cfg.hash():
            return _summary(man, out_dir)
    res = run_grpo(cfg, out_dir, catalog=Catalog(data_root), allow_uncleaned=allow_uncleaned)
    return _summary(res.manifest, out_dir)


def _summary(man: dict[str, Any], out_dir: str) -> dict[str, Any]:
    return {
        "run_dir": str(out_dir),
        "checkpoint_ref": man.get("checkpoint_ref"),
        "checkpoint": man.get("checkpoint"),
        "consumed": [c["resolved"] for c in man["consumed"]],
        "stages": [
            {k: s[k] for k in ("name", "steps", "max_completion_length", "temperature", "stopped")}
            for s in man["stages"]
        ],
    }


@flow(name="sluice-train", log_prints=True)
def train_flow(
    config: str | dict[str, Any],
    out_dir: str | None = None,
    data_root: str | None = None,
    allow_uncleaned: bool = False,
) -> dict[str, Any]:
    """Train ``config`` (a .toml/.yaml path or the config as a dict) on its pinned pool versions;
    the checkpoint is published as ``<name>.checkpoint``. Returns the run summary."""
    from curation.settings import data_root as resolve_root

    root = resolve_root(data_root)
    raw = _config_of(config).to_dict()
    checked = check_training_pools(raw, root, allow_uncleaned)
    pinned = _config_of(checked["config"])
    out = out_dir or str(Path(root) / "runs" / "train" / f"{pinned.name}-{pinned.hash()}")
    summary = train_stages(checked["config"], out, root, allow_uncleaned)
    _publish_artifact(summary)
    return summary


def _publish_artifact(summary: dict[str, Any]) -> None:
    import re

    from prefect.artifacts import create_markdown_artifact

    name = re.sub(
        r"[^a-z0-9-]+", "-", (summary.get("checkpoint_ref") or "run").split("@")[0].lower()
    )
    lines = [
        f"# Training run `{summary['run_dir']}`",
        "",
        f"Checkpoint: **`{summary.get('checkpoint_ref')}`**",
        "",
        "Consumed: " + ", ".join(f"`{c}`" for c in summary["consumed"]),
        "",
        "| stage | steps | max_completion_length | temperature | stopped |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {s['name']} | {s['steps']} | {s['max_completion_length']} | {s['temperature']:g} | "
        f"{s['stopped']} |"
        for s in summary["stages"]
    ]
    create_markdown_artifact("\n".join(lines), key=f"sluice-{name}-train"[:100])
