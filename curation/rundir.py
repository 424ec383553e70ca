"""Output directories that appear complete or not at all, and that say what they hold.

A step that writes several files into ``--out`` (a decontamination run: ``run.json`` plus its
Parquet files) writes them into a temporary sibling folder and renames it into place at the end,
so a failed or killed rerun never leaves new files beside an old ``run.json``. The manifest
records each file's size, row count and SHA-256 (:func:`describe_files`), and a reader refuses a
folder whose files disagree with it (:func:`check_files`).

Replacing ``--out`` deletes what was there, so only an empty folder or a run directory of the
same kind (its manifest's ``schema_version``, :class:`Kind`) is replaced; any other folder is
refused before any work is done (and again just before the rename).

Hand-written (no library does this): it is a rename protocol on one file system, a few lines.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from curation.errors import ConfigError, IntegrityError, StorageError, writing_to
from curation.lock_holder import alive, host_tag

_PARTIAL = ".partial-"
_OLD = ".old-"


@dataclass(frozen=True)
class Kind:
    """The run directories a command writes: its manifest file and the ``schema_version`` prefix
    it writes there (``"decontam_run/"``). A folder whose manifest has that prefix is one of
    them, and is replaced by a rerun; ``command`` names the writer in messages."""

    schema_prefix: str
    command: str
    manifest_name: str = "run.json"

    def written_here(self, folder: Path) -> bool:
        """Whether ``folder`` holds a manifest of this kind (a run directory this tool wrote)."""
        try:
            manifest = json.loads((folder / self.manifest_name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        version = manifest.get("schema_version") if isinstance(manifest, dict) else None
        return isinstance(version, str) and version.startswith(self.schema_prefix)


def _refuse_replacing(out: Path, kind: Kind) -> None:
    """Refuse an existing ``out`` that replacing would lose data from: the current folder (or
    one holding it), or a folder that is neither empty nor a run directory of ``kind``."""
    here = Path.cwd().resolve()
    full = out.resolve()
    if full == here or full in here.parents:
        raise StorageError(
            f"--out {out} is the current folder or holds it: writing the run there would "
            "replace it, and everything in it",
            hint="choose a new or empty folder for --out, e.g. --out runs/NAME",
        )
    if not out.is_dir() or kind.written_here(out):
        return
    try:
        entry = next(iter(sorted(out.iterdir())), None)
    except OSError as exc:
        raise StorageError(
            f"cannot read --out {out}: {exc.strerror}", hint="point --out to a new folder"
        ) from None
    if entry is not None:
        raise StorageError(
            f"--out {out} is not empty (it holds {entry.name}) and is not a run directory "
            f"written by `{kind.command}` (its {kind.manifest_name} would say so): writing the "
            "run there would delete what it holds",
            hint="choose a new or empty folder for --out",
        )


# names of data files, not folders: an output folder named like one (``report.parquet/``) is a
# slip for a file path, made silently into a folder
FILE_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv")


def check_out_folder(out: str | os.PathLike, *, holds: str, option: str = "--out") -> Path:
    """Refuse ``out`` as the folder a command writes (``holds``: what goes there, for the
    message) when it names a file: a data-file suffix (``report.parquet``), a file that
    exists, or a path inside a file. Every command whose ``--out`` is a folder calls it before
    any work, so nothing is written."""
    p = Path(out)
    suffix = p.suffix.lower()
    if suffix in FILE_SUFFIXES:
        raise ConfigError(
            f"{option} {out} is named like a {suffix} file, but {holds} is written to a folder",
            hint=f"give a folder, e.g. {option} {p.with_suffix('')}; nothing was written",
        )
    if p.exists() and not p.is_dir():
        raise ConfigError(
            f"{option} {out} is a file, but {holds} is written to a folder",
            hint="give a folder path (it is created), or remove or rename that file; "
            "nothing was written",
        )
    inside = next((q for q in p.parents if q.exists() and not q.is_dir()), None)
    if inside is not None:
        raise ConfigError(
            f"{option} {out} is inside a file ({inside}), but {holds} is written to a folder",
            hint="give a folder path whose parents are folders; nothing was written",
        )
    return p


REPORT_MARK = ".sluice-report"


def claim_report_folder(
    out: str | os.PathLike, *, files: Sequence[str], kind: Kind, option: str = "--out"
) -> Path:
    """Before a report writes its ``files`` (names relative to ``out``; glob patterns allowed)
    into ``out``: refuse when one of them is there and the folder holds no report of ``kind``
    (its manifest says so, or the mark an unfinished one left), since writing would replace a
    file that is not the report's; then mark the folder (made if new) as the report's until
    :func:`release_report_folder`, once its manifest is written (a report stopped before that
    leaves the mark, so its rerun may replace what it wrote). The other files of the folder are
    left alone."""
    out = Path(out)
    mark = out / REPORT_MARK
    try:
        marked = mark.read_text(encoding="utf-8").strip() == kind.schema_prefix
    except OSError:
        marked = False
    if not (marked or kind.written_here(out)):
        present = sorted(p for f in files for p in out.glob(f)) if out.is_dir() else []
        if present:
            name = present[0].relative_to(out)
            raise StorageError(
                f"{option} {out} holds {name}, which is not part of a report written by "
                f"`{kind.command}` (its {kind.manifest_name} would say so): writing the report "
                "there would replace it",
                hint=f"choose a new or empty folder for {option}, or move {name} away",
            )
    out.mkdir(parents=True, exist_ok=True)
    if not marked:
        mark.write_text(kind.schema_prefix + "\n", encoding="utf-8")
    return out


def release_report_folder(out: str | os.PathLike) -> None:
    """The report in ``out`` is finished (its manifest says what it is): drop the mark."""
    (Path(out) / REPORT_MARK).unlink(missing_ok=True)


def _refuse_inputs_inside(out: Path, inputs: Iterable[str | os.PathLike]) -> None:
    """Refuse an input file that lies inside ``out`` (symlinks resolved, and the link itself):
    replacing ``out`` would delete the input the run read, and its manifest would name a file
    that is gone."""
    if not out.is_dir():
        return
    here = out.resolve()
    for given in inputs:
        p = Path(given)
        for where in (p.resolve(), p.absolute().parent.resolve() / p.name):
            if where.is_relative_to(here):
                shown = given if where == p.absolute() else f"{given} (that is {where})"
                raise ConfigError(
                    f"input {shown} is inside --out {out}: writing the run there would "
                    "replace that folder, and the input with it",
                    hint=f"choose another folder for --out, or move or copy {where.name} out "
                    f"of {out} first; nothing was written",
                )


def check_out_dir(
    out: str | os.PathLike, *, kind: Kind, inputs: Iterable[str | os.PathLike] = ()
) -> Path:
    """Refuse an ``--out`` that cannot become a folder (:func:`check_out_folder`), that holds
    anything but an earlier run directory of ``kind`` (it would be replaced, and its contents
    lost), or that holds one of the run's ``inputs`` (files), before any work is done."""
    out = check_out_folder(out, holds=f"the run directory of `{kind.command}`")
    _refuse_replacing(out, kind)
    _refuse_inputs_inside(out, inputs)
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise StorageError(
            f"cannot create --out {out}: {parent} is a file, not a folder",
            hint="give a folder path whose parents are folders",
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise StorageError(
            f"cannot write --out {out}: {parent} is not writable (read-only or no permission)",
            hint="point --out to a writable folder",
        )
    return out


def _owner_tag() -> str:
    """``<host>-<pid>-``: who writes a temporary sibling, so a later run can tell whether its
    writer is still alive (:func:`_collect_dead`)."""
    return f"{host_tag()}-{os.getpid()}-"


_UNNAMED_STALE_S = 7 * 24 * 3600


def _stale(folder: Path, now: float) -> bool:
    """Nothing in ``folder`` (itself included) was modified in the last ``_UNNAMED_STALE_S``."""
    try:
        times = [folder.lstat().st_mtime] + [f.lstat().st_mtime for f in folder.rglob("*")]
    except OSError:
        return False
    return now - max(times) > _UNNAMED_STALE_S


def _collect_dead(out: Path) -> None:
    """Remove ``out``'s temporary siblings (``.partial-``, ``.old-``) whose writer was a
    process of this host that is gone (SIGKILL, the OOM killer, a power cut): nothing else
    ever removes them, so a nightly run into the same --out piled up a hidden copy of its
    Parquet files per killed night. A live writer's folder and another host's (a shared file
    system) are left alone; an unnamed one (``<12 hex digits>``, written before folders named
    their writer) only when nothing in it changed for ``_UNNAMED_STALE_S`` (no run takes a
    week, and its writer cannot be asked)."""
    import glob

    now = time.time()
    for marker in (_PARTIAL, _OLD):
        for sib in out.parent.glob(glob.escape(f".{out.name}{marker}") + "?" * 12):
            if re.fullmatch(r"[0-9a-f]{12}", sib.name[-12:]) and _stale(sib, now):
                shutil.rmtree(sib, ignore_errors=True)
        for sib in _gone_writers(out.parent, f".{out.name}{marker}"):
            shutil.rmtree(sib, ignore_errors=True)


def _gone_writers(folder: Path, prefix: str, suffix: str = "") -> Iterator[Path]:
    """The entries of ``folder`` named ``<prefix><this host>-<pid>-...<suffix>`` (the
    :func:`_owner_tag` of their writer) whose writer is a process of this host that is gone; a
    live writer's, this process's and another host's (a shared file system) are not listed."""
    import glob

    head = f"{prefix}{host_tag()}-"
    for p in folder.glob(glob.escape(head) + "*-*" + glob.escape(suffix)):
        pid = p.name[len(head) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not alive(int(pid)):
            yield p


def start(out: str | os.PathLike, *, kind: Kind) -> Path:
    """A fresh temporary sibling of ``out`` to write into (removed by :func:`abandon`); the
    siblings of earlier runs killed before their end are removed first."""
    out = check_out_dir(out, kind=kind)
    with writing_to(str(out)):
        out.parent.mkdir(parents=True, exist_ok=True)
        _collect_dead(out)
        tmp = out.parent / f".{out.name}{_PARTIAL}{_owner_tag()}{uuid.uuid4().hex[:12]}"
        tmp.mkdir()
    return tmp


# How long a finishing run waits for another one finishing the same --out (which holds the
# lock only for two renames and an fsync: seconds mean a hung process or a lost lock)
LOCK_WAIT_S = 60.0


@contextlib.contextmanager
def _switch_lock(out: Path) -> Iterator[None]:
    """Hold ``.<out>.lock`` beside ``out`` (``fcntl.flock``) while the folders are switched, so
    two runs finishing the same ``--out`` take turns. The holder removes the file before it
    lets go, so nothing is left beside ``out``; a run that locked a file already removed (it
    waited on it) sees that the path names another file, or none, and locks again. A file
    system without ``flock`` runs unlocked (a collision is then the error of :func:`_switch`)."""
    import fcntl

    lock = out.parent / f".{out.name}.lock"
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        fh = open(lock, "a+b")  # noqa: SIM115 - held across the yield below
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            if time.monotonic() >= deadline:
                raise StorageError(
                    f"cannot finish --out {out}: another run is finishing the same folder "
                    f"and has held {lock} for {LOCK_WAIT_S:g} s",
                    hint="wait for that run to end, then rerun this command (its folder "
                    "is replaced), or give each run its own --out",
                ) from None
            time.sleep(0.05)
            continue
        except OSError:  # no flock here (some network file systems)
            fh.close()
            with contextlib.suppress(OSError):
                lock.unlink()
            yield
            return
        try:
            same = os.stat(lock).st_ino == os.fstat(fh.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        fh.close()  # the holder before us removed this file: lock the path's file again
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()  # before unlocking: a waiter then finds the path gone and retries
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        fh.close()


def _switch(tmp: Path, out: Path) -> Path | None:
    """Rename ``out`` aside (returned) and ``tmp`` into its place; a run that switched the
    same folder at that moment without the lock is one error, and ``out`` is left as found."""
    old = None
    try:
        if out.exists():
            old = out.parent / f".{out.name}{_OLD}{_owner_tag()}{uuid.uuid4().hex[:12]}"
            os.replace(out, old)
        os.replace(tmp, out)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
            raise
        if old is not None and not out.exists():
            os.replace(old, out)  # put the previous run back
        raise StorageError(
            f"cannot finish --out {out}: another run replaced it at the same moment "
            f"({exc.strerror}); this run's files are in {tmp}",
            hint="rerun this command to write its run there, or give each run its own --out",
        ) from None
    return old


def finish(tmp: Path, out: str | os.PathLike, *, kind: Kind) -> Path:
    """Move the complete folder ``tmp`` into place at ``out`` (replacing an older run directory
    of ``kind``; anything else found there meanwhile is refused, not deleted). Two runs
    finishing the same ``out`` take turns (:func:`_switch_lock`); the later one's folder stays."""
    out = Path(out)
    with writing_to(str(out)):
        for f in tmp.iterdir():
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        with _switch_lock(out):
            out = check_out_dir(out, kind=kind)
            old = _switch(tmp, out)
            fd = os.open(out.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return out


_TMP = ".tmp-"


def _remove_dead_tmp(path: Path) -> None:
    """Remove the temporary files of :func:`replacing` beside ``path`` whose writer was a
    process of this host that is gone (a report killed with SIGKILL mid-write left one per
    kill)."""
    for left in _gone_writers(path.parent, f".{path.stem}{_TMP}", path.suffix):
        left.unlink(missing_ok=True)


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary name beside ``path`` to write (``.NAME.tmp-<host>-<pid>-<8 hex>.SUFFIX``:
    its own per writer, so two processes writing the same folder never rename or remove each
    other's half-written file; the suffix last for writers that choose the format by it);
    renamed to ``path`` when the block ends normally, removed otherwise, so ``path`` is never a
    torn file. The temporary files of killed writers of this host are removed first. For a
    command that writes loose files into a folder it does not own; with the folder's marker
    file (its plan, its summary) removed first and written last, a stop midway leaves no
    folder that reads as finished."""
    path = Path(path)
    _remove_dead_tmp(path)
    tmp = path.with_name(f".{path.stem}{_TMP}{_owner_tag()}{uuid.uuid4().hex[:8]}{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def abandon(tmp: Path) -> None:
    shutil.rmtree(tmp, ignore_errors=True)


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes (the project's one file checksum: run files, benchmark copies,
    the flows' cache checks)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def describe_files(folder: Path, names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``{name: {"bytes", "sha256", "rows"}}`` for the files of a run (rows for Parquet)."""
    import pyarrow.parquet as pq

    out: dict[str, dict[str, Any]] = {}
    for name in names:
        p = folder / name
        rec: dict[str, Any] = {"bytes": p.stat().st_size, "sha256": file_sha256(p)}
        if name.endswith(".parquet"):
            rec["rows"] = pq.ParquetFile(p).metadata.num_rows
        out[name] = rec
    return out


def check_files(
    folder: Path, described: dict[str, dict[str, Any]], manifest_name: str
) -> dict[str, str]:
    """Raise unless every file ``described`` is in ``folder`` with its recorded size and hash;
    return each file's SHA-256 (as checked)."""
    hashes: dict[str, str] = {}
    for name, rec in described.items():
        p = folder / name
        rec = rec if isinstance(rec, dict) else {}
        if not p.is_file():
            problem = "is missing"
        elif p.stat().st_size != rec.get("bytes") or (h := file_sha256(p)) != rec.get("sha256"):
            problem = "is not the file its manifest describes"
        else:
            hashes[name] = h
            continue
        raise IntegrityError(
            f"run directory {folder} is inconsistent: {name} {problem} ({manifest_name} "
            "records its size and SHA-256; another run or an edit changed it)",
            hint="re-run the command recorded in run.json to write the directory again",
        )
    return hashes


def reseal(folder: str | os.PathLike, manifest_name: str = "run.json") -> None:
    """Re-record the size and hash of the files a manifest lists (after a deliberate edit,
    e.g. a test building a variant of a run; a reader refuses the folder otherwise)."""
    import json

    folder = Path(folder)
    path = folder / manifest_name
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(manifest.get("files"), dict):
        manifest["files"] = describe_files(folder, list(manifest["files"]))
        path.write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")
