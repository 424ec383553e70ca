"""Reading a config file (TOML or YAML) into a dict, with errors that name the file.

One reader for every stage's config (pipeline, SFT, training): the same formats, the same
error messages, and a parse error keeps the parser's own line number.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
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
    if p.is_dir():
        raise ConfigError(
            f"config file {str(p)!r} is a folder, not a config file",
            hint="give the path of the .toml or .yaml file in it",
        )
    if not p.is_file():
        _refuse_special(p, "config file")
        raise NotFoundError(f"config file {str(p)!r} not found", hint=hint)
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {str(p)!r}: invalid UTF-8 at byte {exc.start}",
            hint="save the file as UTF-8",
        ) from None
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
        raise ConfigError(
            f"config file {str(p)!r} is not valid {suffix[1:]}: {_one_line(exc)}"
        ) from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {str(p)!r} must hold a table/mapping at the top")
    return raw


@contextlib.contextmanager
def naming_config_file(path: str | os.PathLike | None) -> Iterator[None]:
    """A :class:`ConfigError` raised inside the block (reading the file, checking its values)
    names the file: ``config file 'PATH': <what is wrong> (<the fix>)``; so does a dataclass's
    ``TypeError`` for a value of the wrong shape. ``path`` None: errors pass as they are (no
    file was given). Wrap only what comes from the file: an option's mistake is the option's."""
    if path is None:
        yield
        return
    where = f"config file {str(Path(path).expanduser())!r}"
    try:
        yield
    except ConfigError as exc:
        if exc.message.startswith(where):  # read_config_file's own errors name it already
            raise
        raise ConfigError(f"{where}: {exc.message}", hint=exc.hint) from None
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _one_line(exc: Exception) -> str:
    """A parser's error on one line: PyYAML's spans several (context, a mark naming
    "<unicode string>", a caret line); its problem and 1-based line and column are kept."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if problem and mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


def resolve_path(value: str, base: Path, *, other: Callable[[str], bool] | None = None) -> str:
    """A path written in a config file: ``${VAR}`` / ``~`` expanded, a URL or absolute path as
    it is, a relative one against ``base`` (the file's folder, not the working folder), unless
    no such file is there and ``other(value)`` says the value names something else (a Hub id)."""
    v = os.path.expanduser(os.path.expandvars(str(value)))
    if "://" in v or os.path.isabs(v):
        return v
    local = base / v
    if other is not None and not local.exists() and other(v):
        return v
    return str(local.resolve())


def read_json_or_toml(path: str | os.PathLike, *, what: str = "config file") -> dict[str, Any]:
    """The object in a ``.toml`` file (TOML) or any other file (JSON): ``--policy`` and
    ``decontam --config``. A file that does not parse is one :class:`ConfigError`
    ``file X: not valid JSON: <reason> (line L, column C)``, not the parser's traceback."""
    import json
    import re

    p = Path(path)
    if not p.is_file():
        _refuse_special(p, what)
        raise NotFoundError(f"{what} {p} not found")
    kind = "TOML" if p.suffix.lower() == ".toml" else "JSON"
    fix = f"fix the {kind} there, or give another {what}"
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"file {p}: invalid UTF-8 at byte {exc.start}", hint=fix) from None
    try:
        if kind == "TOML":
            import tomllib

            data = tomllib.loads(text)
        else:
            data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"file {p}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
            hint=fix,
        ) from None
    except ValueError as exc:  # tomllib.TOMLDecodeError: "... (at line L, column C)"
        msg = str(exc)
        at = re.search(r"\s*\(at line (\d+), column (\d+)\)", msg) or re.search(
            r"\s*\(at end of document\)", msg
        )
        where = ""
        if at is not None:
            msg = msg[: at.start()] + msg[at.end() :]
            where = (
                f" (line {at[1]}, column {at[2]})" if at.groups() else " (at the end of the file)"
            )
        raise ConfigError(f"file {p}: not valid TOML: {msg}{where}", hint=fix) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"file {p}: expected a {kind} object at the top, got {type(data).__name__}",
            hint=fix,
        )
    return data


def _refuse_special(p: Path, what: str) -> None:
    """A path that exists but is no file nor folder (a FIFO, a device) is said as such, not as
    "not found" (reading a FIFO would wait for a writer forever)."""
    from curation.readers import _special_kind

    kind = _special_kind(p)
    if kind is not None:
        raise ConfigError(
            f"{what} {str(p)!r} is {kind}, not a file",
            hint="give the path of the .toml, .yaml or .json file",
        )
