"""Publishing an exported dataset to the Hugging Face Hub (`datasets.DatasetDict.push_to_hub`).

Shared by every stage that exports (SFT sets, RL pools). A dry run builds exactly what would be
pushed — the ``DatasetDict`` (so the features are checked by ``datasets`` itself), the Parquet
shards and the dataset card with the lineage — into a local folder, and sends nothing; that is
how it is tested offline.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from curation.errors import ConfigError, SluiceError


@dataclass
class HubPush:
    repo_id: str
    dry_run: bool
    splits: dict[str, int]  # split -> rows
    features: dict[str, str]
    staged: Path | None  # the local folder the files were staged in (a dry run's, or --out)
    card: str
    files: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "repo_id": self.repo_id,
            "dry_run": self.dry_run,
            "splits": self.splits,
            "features": self.features,
            "staged": str(self.staged) if self.staged else None,
            "files": self.files,
        }


@contextlib.contextmanager
def quiet_datasets() -> Iterator[None]:
    """datasets' progress bars (``Creating parquet from Arrow format``, the upload's) off for
    the block, then back as they were: a command prints its own lines only, and a library user's
    setting is kept. datasets offers no context manager of its own (only the global switch)."""
    from datasets.utils import logging as ds_logging

    was = ds_logging.is_progress_bar_enabled()
    with warnings.catch_warnings():  # HF_DATASETS_DISABLE_PROGRESS_BARS=0 wins, without a word
        warnings.simplefilter("ignore")
        ds_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            ds_logging.enable_progress_bar()


def dataset_card(repo_id: str, *, title: str, lineage: list[str], body: str = "") -> str:
    """A dataset card (README.md) that names every catalog version the data came from."""
    lines = [
        "---",
        "tags: [sluice]",
        "---",
        f"# {title}",
        "",
        f"Published as `{repo_id}` by Sluice. Lineage (catalog versions, newest first):",
        "",
        *[f"- `{ref}`" for ref in lineage],
        "",
    ]
    if body:
        lines += [body, ""]
    return "\n".join(lines)


def push_to_hub(
    splits: dict[str, pa.Table],
    repo_id: str,
    *,
    card: str,
    dry_run: bool = True,
    staging_dir: str | Path | None = None,
    private: bool = True,
    token: str | None = None,
) -> HubPush:
    """Push ``splits`` (split name -> table) to ``repo_id`` with ``card`` as README.md.

    The shards and the card are staged in ``staging_dir`` when it is given (with
    ``push_plan.json``); ``dry_run`` (the default) stops there and sends nothing, and needs
    ``staging_dir``. A real push stages first too, so ``--out`` keeps a copy of what was sent
    (it was ignored).
    """
    from datasets import Dataset, DatasetDict

    if "/" not in repo_id or repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ConfigError(f"bad Hub repo id {repo_id!r}", hint="use OWNER/NAME")
    if not splits:
        raise ConfigError("nothing to push: no splits")
    dd = DatasetDict({k: Dataset(v) for k, v in splits.items()})
    if dry_run and staging_dir is None:
        raise ConfigError("a dry run needs a staging folder", hint="pass --out DIR")
    with quiet_datasets():  # Sluice's own lines only
        return _push(dd, repo_id, card, dry_run, staging_dir, private, token)


def _stage(dd: Any, out: Path, card: str, plan: dict[str, Any]) -> list[str]:
    """Write the upload into ``out``: the shards, the card, and ``push_plan.json`` last; return
    the files staged.

    A staging into a folder that holds an earlier one (a rerun, another version's export)
    removes the earlier plan and card first, and each file goes through a temporary name, so a
    staging that stops midway (Ctrl-C, SIGTERM, a full disk) leaves no ``push_plan.json``: it
    left the earlier staging's plan and card beside its new data, a folder that read as a
    finished staging of the earlier export, or a torn shard."""
    from curation.rundir import replacing

    for name in ("push_plan.json", "README.md"):
        (out / name).unlink(missing_ok=True)
    (out / "data").mkdir(parents=True, exist_ok=True)
    files = []
    for name, ds in dd.items():
        rel = f"data/{name}-00000-of-00001.parquet"
        with replacing(out / rel) as tmp:
            ds.to_parquet(str(tmp))
        files.append(rel)
    with replacing(out / "README.md") as tmp:
        tmp.write_text(card, encoding="utf-8")
    files.append("README.md")
    with replacing(out / "push_plan.json") as tmp:
        tmp.write_text(json.dumps({**plan, "files": files}, indent=2, sort_keys=True))
    return files


def _push(
    dd: Any,
    repo_id: str,
    card: str,
    dry_run: bool,
    staging_dir: str | Path | None,
    private: bool,
    token: str | None,
) -> HubPush:
    feats = {k: str(v) for k, v in next(iter(dd.values())).features.items()}
    sizes = {k: len(v) for k, v in dd.items()}
    out, files = None, []
    if staging_dir is not None:
        out = Path(staging_dir)
        files = _stage(dd, out, card, {"repo_id": repo_id, "private": private, "splits": sizes})
    if dry_run:
        return HubPush(repo_id, True, sizes, feats, out, card, files)
    try:  # needs the network and a token (tests record these two calls instead)
        dd.push_to_hub(repo_id, private=private, token=token)
        from huggingface_hub import HfApi

        HfApi(token=token).upload_file(
            path_or_fileobj=card.encode(),
            path_in_repo="README.md",
            repo_id=repo_id,
            repo_type="dataset",
        )
    except Exception as exc:  # pragma: no cover - network
        staged = f"; the files are staged in {out}" if out is not None else ""
        raise SluiceError(
            f"push to {repo_id} failed: {exc}",
            hint="check HF_TOKEN and the network, or use --dry-run to stage the files locally"
            + staged,
        ) from exc
    return HubPush(repo_id, False, sizes, feats, out, card, files)
