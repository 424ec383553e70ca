"""Sluice's exception hierarchy.

Every error a user can cause is a :class:`SluiceError` whose message names the fix.
The CLI prints ``str(error)`` on one line (plus the hint) and exits non-zero; it never
shows a traceback for these.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import fields
from typing import Any


class SluiceError(Exception):
    """Base class for errors the user can act on."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class ConfigError(SluiceError):
    """A config file, option or field map is wrong or unknown."""


class NotFoundError(SluiceError):
    """A file, dataset, version, map or benchmark does not exist."""


class DatasetRef(str):
    """A catalog reference (``name@version``) where an error's ``file`` goes: :class:`InputError`
    calls it a dataset, not a file (a plain ``str`` everywhere else)."""


class InputError(SluiceError):
    """Input data is malformed. Carries the location so it can be reported precisely
    (``file``: a path, or a :class:`DatasetRef` for a catalog version)."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        row: int | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        where = ", ".join(
            p
            for p in (
                (f"dataset {file}" if isinstance(file, DatasetRef) else f"file {file}")
                if file
                else "",
                f"row {row}" if row is not None else "",
                f"field {field!r}" if field else "",
            )
            if p
        )
        super().__init__(f"{where}: {message}" if where else message, hint=hint)
        self.file, self.row, self.field = file, row, field


class IntegrityError(SluiceError):
    """A copy of data does not match its pinned counts or hashes."""


class StorageError(SluiceError):
    """The file system refused a write: full, read-only, no permission, or a file in the way."""


# errno -> (what happened, what to do). Matched by errno, or by the C library's message when a
# library (pyarrow, DuckDB) reports the failure as text only.
_STORAGE_ERRNOS = {
    28: ("no space left on the device", "free space there or point --root/--out elsewhere"),
    122: ("disk quota exceeded", "free space there or point --root/--out elsewhere"),
    30: (
        "the file system is read-only",
        "use a writable --root/--out (reading a read-only data root works)",
    ),
    13: ("permission denied", "make it writable for this user or point --root/--out elsewhere"),
    1: (
        "operation not permitted",
        "make it writable for this user or point --root/--out elsewhere",
    ),
    20: ("a file is in the way of a folder", "give a folder path, or remove/rename that file"),
    17: ("a file is in the way of a folder", "give a folder path, or remove/rename that file"),
    21: ("a folder is in the way of a file", "give another path, or remove/rename that folder"),
}
_STORAGE_MESSAGES = {
    "No space left on device": 28,
    "Disk quota exceeded": 122,
    "Read-only file system": 30,
    "Permission denied": 13,
    "Not a directory": 20,
    "File exists": 17,
    "Is a directory": 21,
}


def storage_error(exc: BaseException, path: str | None = None) -> StorageError | None:
    """A one-line :class:`StorageError` naming the path and the fix, when ``exc`` is a
    file-system refusal (``OSError`` with a known errno, or a library error whose message carries
    the C library's text); ``None`` for anything else."""
    import re

    code = getattr(exc, "errno", None)
    text = str(exc)
    if code == 2 and _raised_by_mkdir(exc):
        # ENOENT from mkdir with parents: the file system has no place for the folder (a
        # path under /proc or /sys, a parent that vanished): a write refused, not a missing input
        where = path or getattr(exc, "filename", None)
        return StorageError(
            f"cannot write {where}: the folder cannot be created there"
            if where
            else "cannot write: a folder cannot be created there",
            hint="point --root/--out at a folder on writable storage",
        )
    if code not in _STORAGE_ERRNOS:
        code = next((c for m, c in _STORAGE_MESSAGES.items() if m in text), None)
    if code is None:
        return None
    what, fix = _STORAGE_ERRNOS[code]
    where = path or getattr(exc, "filename", None)
    if not where:
        quoted = re.search(r"['\"](/[^'\"]+)['\"]", text) or re.search(r"(/[\w./\-]+)", text)
        where = quoted.group(1) if quoted else None
    msg = f"cannot write {where}: {what}" if where else f"cannot write: {what}"
    return StorageError(msg, hint=fix)


def _raised_by_mkdir(exc: BaseException) -> bool:
    """Whether ``exc`` was raised inside ``Path.mkdir`` / ``os.makedirs`` (its last frame)."""
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last is not None and last.tb_frame.f_code.co_name in ("mkdir", "makedirs")


@contextlib.contextmanager
def writing_to(where: str) -> Iterator[None]:
    """Turn a file-system refusal inside the block into a :class:`StorageError` naming ``where``."""
    try:
        yield
    except SluiceError:
        raise
    except Exception as exc:
        err = storage_error(exc, where)
        if err is None:
            raise
        raise err from None


class MissingDependencyError(SluiceError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


def did_you_mean(
    name: str,
    available: list[str] | tuple[str, ...],
    *,
    limit: int | None = None,
    see_all: str = "",
) -> str:
    """Return 'Did you mean X? Available: a, b, c' for an unknown ``name``.

    ``limit``: name at most that many (the closest first), then how many more and ``see_all``
    (the command that lists them all), so a catalog of hundreds of names stays one short line.
    """
    import difflib

    avail = sorted(available)
    close = difflib.get_close_matches(name, avail, n=1)
    parts = []
    if close:
        parts.append(f"did you mean {close[0]!r}?")
    shown = avail
    if limit is not None and len(avail) > limit:
        near = difflib.get_close_matches(name, avail, n=limit, cutoff=0.0)
        shown = sorted(near) + [
            f"... {len(avail) - len(near)} more" + (f" ({see_all})" if see_all else "")
        ]
    parts.append("available: " + (", ".join(shown) if shown else "(none)"))
    return " ".join(parts)


def check_keys(section: str, raw: dict[str, Any], cls: type) -> None:
    """Raise a :class:`ConfigError` for the first key of a config table ``raw`` that is not a
    field of the dataclass ``cls`` ("unknown key 'x' in SECTION", naming the close one)."""
    known = [f.name for f in fields(cls)]
    for key in raw:
        if key not in known:
            raise ConfigError(
                f"unknown key {key!r} in {section}", hint=did_you_mean(str(key), known)
            )


def require(module: str, extra: str | None = None, package: str | None = None):
    """Import a heavy optional module lazily, with an error that names how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        what = (
            f"pip install 'sluice-data[{extra}]'" if extra else f"pip install {package or module}"
        )
        raise MissingDependencyError(
            f"{module} is required for this step but is not installed", hint=f"run: {what}"
        ) from exc
