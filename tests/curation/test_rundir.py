"""Run directories (curation.rundir): what a killed run leaves beside --out is collected."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from curation import rundir
from curation.errors import StorageError

REPO = Path(__file__).resolve().parents[2]
KIND = rundir.Kind(schema_prefix="test_run/", command="test")


def test_the_partial_folder_of_a_killed_run_is_removed_by_the_next_run(tmp_path):
    """SIGKILL (the OOM killer) mid-write leaves the temporary sibling: the next run into the
    same --out removes it (they piled up, one hidden copy of the run's files per killed run);
    a live writer's folder is left alone."""
    out = tmp_path / "run"
    code = (
        "import os, signal, sys\n"
        "from curation import rundir\n"
        "tmp = rundir.start(sys.argv[1], kind=rundir.Kind('test_run/', 'test'))\n"
        "(tmp / 'matches.parquet').write_bytes(b'x' * 1000)\n"
        "print(tmp, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", code, str(out)], env=env, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    dead = Path(res.stdout.strip())
    assert res.returncode == -9 and dead.is_dir()
    live = subprocess.Popen([sys.executable, "-c", code.replace("os.kill", "input() or os.kill"),
                             str(out)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        alive = Path(live.stdout.readline().strip())
        tmp = rundir.start(out, kind=KIND)
        assert not dead.exists() and alive.is_dir() and tmp.is_dir()
        rundir.abandon(tmp)
    finally:
        live.kill()
        live.wait()


def test_unnamed_partial_folders_of_older_versions_go_once_a_week_untouched(tmp_path):
    """Before folders named their writer they were ``.<out>.partial-<12 hex>``: whether their
    writer lives cannot be asked, so one goes only when nothing in it changed for a week; a
    recent one, and a folder of another name, stay."""
    out = tmp_path / "run"
    old = tmp_path / ".run.partial-0123456789ab"
    recent = tmp_path / ".run.old-abcdef012345"
    other = tmp_path / ".run.partial-notours12345"
    for d in (old, recent, other):
        d.mkdir()
        (d / "matches.parquet").write_bytes(b"x")
    week_ago = time.time() - 8 * 24 * 3600
    for p in (old, old / "matches.parquet", other, other / "matches.parquet"):
        os.utime(p, (week_ago, week_ago))
    os.utime(recent, (week_ago, week_ago))  # its file was written just now
    tmp = rundir.start(out, kind=KIND)
    assert not old.exists() and recent.is_dir() and other.is_dir()
    rundir.abandon(tmp)


def test_an_out_folder_named_like_a_file_or_that_is_a_file_is_refused(tmp_path):
    """One check for every command whose --out is a folder: a name ending like a data file
    (`report.parquet` became a folder of that name), an existing file, or a path inside a
    file is one ConfigError naming the option and the fix; a folder path passes."""
    import pytest

    from curation.errors import ConfigError

    a_file = tmp_path / "taken"
    a_file.write_text("keep")
    for out, said, fix in (
        (tmp_path / "x.parquet", "is named like a .parquet file", f"--out {tmp_path / 'x'}"),
        (tmp_path / "x.JSONL", "is named like a .jsonl file", f"--out {tmp_path / 'x'}"),
        (a_file, "is a file", "remove or rename"),
        (a_file / "sub", f"is inside a file ({a_file})", "parents are folders"),
    ):
        with pytest.raises(ConfigError) as e:
            rundir.check_out_folder(out, option="--out", holds="the report")
        assert str(e.value).startswith(f"--out {out} {said}"), str(e.value)
        assert fix in e.value.hint and "nothing was written" in e.value.hint, e.value.hint
    assert a_file.read_text() == "keep" and not (tmp_path / "x.parquet").exists()
    for ok in (tmp_path / "new", tmp_path / "new" / "deeper", tmp_path, tmp_path / "v1.2"):
        assert rundir.check_out_folder(ok, holds="the report") == ok


def _complete_run(folder: Path, tag: str) -> Path:
    (folder / "run.json").write_text(f'{{"schema_version": "test_run/1", "tag": "{tag}"}}')
    return folder


def test_two_runs_finishing_the_same_folder_take_turns(tmp_path, monkeypatch):
    """Two runs finishing one --out at the same moment: between the first moving the old folder
    aside and renaming its own in, the second found no folder and renamed its own in, and the
    first failed with a raw "OSError: [Errno 39] Directory not empty". The switch is now done
    under a lock on the folder, so the other run waits for its turn (the later run's folder is
    what stays), and a run that cannot get it names the folder and what to do."""
    import fcntl

    out = tmp_path / "run"
    rundir.finish(_complete_run(rundir.start(out, kind=KIND), "first"), out, kind=KIND)
    second = _complete_run(rundir.start(out, kind=KIND), "second")
    third = _complete_run(rundir.start(out, kind=KIND), "third")
    real_replace = os.replace
    other: list[str] = []

    def other_run_finishes_in_between(src, dst):
        real_replace(src, dst)
        if Path(dst).name.startswith(".run.old-"):  # the old folder was just moved aside
            monkeypatch.setattr(os, "replace", real_replace)
            try:  # the other run, at that very moment (its wait cut short: one thread here)
                rundir.finish(third, out, kind=KIND)
            except StorageError as exc:
                other.append(str(exc))

    monkeypatch.setattr(rundir, "LOCK_WAIT_S", 0.2, raising=False)
    monkeypatch.setattr(os, "replace", other_run_finishes_in_between)
    rundir.finish(second, out, kind=KIND)
    assert json.loads((out / "run.json").read_text())["tag"] == "second"
    assert len(other) == 1 and "another run is finishing" in other[0], other
    assert "Errno" not in other[0] and str(out) in other[0]
    assert not list(tmp_path.glob(".run.old-*"))

    # the lock held by another process (its own open file): a finishing run waits, then names it
    with open(tmp_path / ".run.lock", "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        with pytest.raises(StorageError, match="another run is finishing"):
            rundir.finish(third, out, kind=KIND)
    assert third.is_dir()  # refused before anything moved: rerunning finish completes it
    rundir.finish(third, out, kind=KIND)
    assert json.loads((out / "run.json").read_text())["tag"] == "third"
    assert not (tmp_path / ".run.lock").exists()  # its holder removes it: nothing left beside


def test_a_collision_without_the_lock_is_one_error_and_keeps_the_old_run(tmp_path, monkeypatch):
    """A writer that switches the folder without the lock (a file system without flock): the
    collision is one line naming the folder, and the previous run is put back."""
    import errno

    out = tmp_path / "run"
    rundir.finish(_complete_run(rundir.start(out, kind=KIND), "first"), out, kind=KIND)
    second = _complete_run(rundir.start(out, kind=KIND), "second")
    real_replace = os.replace

    def collide(src, dst):
        if Path(dst) == out and Path(src) == second:
            raise OSError(errno.ENOTEMPTY, "Directory not empty", str(src), None, str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", collide)
    with pytest.raises(StorageError, match="another run replaced it at the same moment") as exc:
        rundir.finish(second, out, kind=KIND)
    assert str(out) in str(exc.value) and "Errno" not in str(exc.value)
    assert json.loads((out / "run.json").read_text())["tag"] == "first"


# a writer in another process: enters `replacing(path)`, writes half its file, says where, waits
# for a line on stdin, writes the rest and ends the block (renaming into place); "kill" instead
# of a line: SIGKILL mid-write (the OOM killer)
_WRITER = (
    "import os, signal, sys\n"
    "from curation.rundir import replacing\n"
    "with replacing(sys.argv[1]) as tmp:\n"
    "    fh = open(tmp, 'w')\n"
    "    fh.write('writer-a first half;')\n"
    "    fh.flush()\n"
    "    print(tmp, flush=True)\n"
    "    if input() == 'kill':\n"
    "        os.kill(os.getpid(), signal.SIGKILL)\n"
    "    fh.write('writer-a second half')\n"
    "    fh.close()\n"
)


def _writer(path: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def test_two_processes_replacing_the_same_file_keep_their_own_temporary_files(tmp_path):
    """Every writer had the same temporary name (``.report.tmp.md``): a second `sluice report
    ... --out X` started while the first was writing truncated the first's half-written file
    and renamed it into place, and the first then failed renaming a file gone. Each writer now
    has its own temporary name (host, pid, a random part; the suffix last), so the first
    writes its whole file and the last to finish is what stays."""
    path = tmp_path / "report.md"
    a = _writer(path)
    try:
        a_tmp = Path(a.stdout.readline().strip())
        with rundir.replacing(path) as b_tmp:
            b_tmp.write_text("writer-b whole")
        assert path.read_text() == "writer-b whole" and a_tmp.is_file()  # a's still its own
        out, err = a.communicate("go\n", timeout=60)
    finally:
        a.kill()
        a.wait()
    assert a.returncode == 0, err
    assert path.read_text() == "writer-a first half;writer-a second half"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]
    # two writers in one process (threads) too
    with rundir.replacing(path) as one, rundir.replacing(path) as two:
        assert one != two and one.parent == two.parent == tmp_path
        assert one.suffix == two.suffix == ".md" and one.name.startswith(".report.tmp-")
        one.write_text("one")
        two.write_text("two")
    assert path.read_text() == "one"  # the outer block ended last


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(tmp_path):
    """A writer killed with SIGKILL mid-write leaves its temporary file; the next `replacing`
    of the same file on this host removes it (one hidden file more per killed report, never
    removed). A live writer's, another host's and a name of another pattern stay."""
    path = tmp_path / "report.json"
    dead = _writer(path)
    dead_tmp = Path(dead.stdout.readline().strip())
    dead.communicate("kill\n", timeout=60)
    assert dead.returncode == -9 and dead_tmp.is_file()
    live = _writer(path)
    try:
        live_tmp = Path(live.stdout.readline().strip())
        elsewhere = tmp_path / f".report.tmp-otherhost-{dead.pid}-0123abcd.json"
        other_name = tmp_path / ".report.tmp.json"  # not this pattern: left alone
        for p in (elsewhere, other_name):
            p.write_text("x")
        with rundir.replacing(path) as tmp:
            tmp.write_text("{}")
        assert not dead_tmp.exists() and live_tmp.is_file()
        assert elsewhere.is_file() and other_name.is_file() and path.read_text() == "{}"
    finally:
        live.kill()
        live.wait()
