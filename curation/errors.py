"""Sluice's exception hierarchy.

Every error a user can cause is a :class:`SluiceError` whose message names the fix.
The CLI prints ``str(error)`` on one line (plus the hint) and exits non-zero; it never
shows a traceback for these.
"""

from __future__ import annotations


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


class InputError(SluiceError):
    """Input data is malformed. Carries the location so it can be reported precisely."""

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
                f"file {file}" if file else "",
                f"row {row}" if row is not None else "",
                f"field {field!r}" if field else "",
            )
            if p
        )
        super().__init__(f"{where}: {message}" if where else message, hint=hint)
        self.file, self.row, self.field = file, row, field


class IntegrityError(SluiceError):
    """A copy of data does not match its pinned counts or hashes."""


class MissingDependencyError(SluiceError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


def did_you_mean(name: str, available: list[str] | tuple[str, ...]) -> str:
    """Return 'Did you mean X? Available: a, b, c' for an unknown ``name``."""
    import difflib

    avail = sorted(available)
    close = difflib.get_close_matches(name, avail, n=1)
    parts = []
    if close:
        parts.append(f"did you mean {close[0]!r}?")
    parts.append("available: " + (", ".join(avail) if avail else "(none)"))
    return " ".join(parts)


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
