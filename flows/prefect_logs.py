"""Prefect's run loggers without tracebacks for the errors Sluice already explains.

A task or flow that fails logs "Encountered exception during execution" with the whole
traceback (Prefect's engine, 80 lines of its own frames for one empty input file) before the
CLI prints its one ``error:`` line. For a :class:`~curation.errors.SluiceError` (bad input, a
wrong config, a full disk: the message names the file, row and field and the fix) the traceback
says nothing the message does not, and it buries the message. The filter keeps the log line and
drops the traceback for those errors only: any other exception is a bug and keeps its traceback,
in the terminal and in the Prefect UI.
"""

from __future__ import annotations

import logging

from curation.errors import SluiceError, storage_error

# the loggers of Prefect's flow and task run engines (prefect.logging.loggers)
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


def _explained(exc: BaseException | None) -> bool:
    """``exc``, or an exception it was raised from or during, is a SluiceError or a storage
    refusal the CLI turns into one line (a full disk, a read-only data root)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, SluiceError) or storage_error(exc) is not None:
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


class ExplainedErrorFilter(logging.Filter):
    """Drop the traceback of a log record whose exception is a :class:`SluiceError`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and _explained(record.exc_info[1]):
            record.exc_info = None
            record.exc_text = None
        return True


_FILTER = ExplainedErrorFilter()


def hide_explained_tracebacks() -> None:
    """Install the filter on Prefect's run loggers (idempotent; the loggers need not exist
    yet, and Prefect's own logging setup keeps a logger's filters)."""
    for name in RUN_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


__all__ = ["ExplainedErrorFilter", "hide_explained_tracebacks"]
