"""Reading a config file (TOML or YAML) into a dict, with errors that name the file.

One reader for every stage's config (pipeline, SFT, training): the same formats, the same
error messages, and a parse error keeps the parser's own line number.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from curation.errors import ConfigError, NotFoundError

FORMATS = (".toml", ".yaml", ".yml")


def read_config_file(
    path: str | os.PathLike, *, expand_env: bool = False, hint: str | None = None
) -> dict[str, Any]:
    """The contents of a ``.toml`` / ``.yaml`` / ``.yml`` file. ``expand_env``: ``${VAR}`` is
    replaced from the environment first. ``hint``: how to get a file, for a missing one."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise NotFoundError(f"config file {str(p)!r} not found", hint=hint)
    text = p.read_text(encoding="utf-8")
    if expand_env:
        text = os.path.expandvars(text)
    suffix = p.suffix.lower()
    if suffix not in FORMATS:
        raise ConfigError(
            f"config file {str(p)!r}: unknown format {suffix!r}", hint="use .toml or .yaml"
        )
    try:
        if suffix == ".toml":
            import tomllib

            raw = tomllib.loads(text)
        else:
            import yaml

            raw = yaml.safe_load(text)
    except Exception as exc:  # tomllib / yaml errors carry the line number
        raise ConfigError(f"config file {str(p)!r} is not valid {suffix[1:]}: {exc}") from exc
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {str(p)!r} must hold a table/mapping at the top")
    return raw
