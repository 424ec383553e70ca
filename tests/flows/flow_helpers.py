"""Helpers for the flow tests: slices of real pools and pipeline configs in tmp folders."""

from __future__ import annotations

import json
from pathlib import Path


def write_slice(src: Path, dst: Path, n: int | None = None, skip: int = 0) -> Path:
    """Copy rows [skip, skip+n) of a JSONL pool into ``dst`` (a test's tmp folder)."""
    lines = [ln for ln in src.read_text(encoding="utf-8").splitlines() if ln.strip()]
    rows = lines[skip : skip + n if n is not None else None]
    dst.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    return dst


def write_config(
    path: Path,
    pools: list[dict],
    *,
    data_root: Path,
    shards: int = 1,
    benchmarks: tuple[str, ...] = ("aime24", "aime25"),
    detectors: tuple[str, ...] = ("ngram",),
) -> Path:
    """A pipeline TOML config for ``pools`` (dicts with name, source, map, text_fields)."""
    lines = [
        f'data_root = "{data_root}"',
        "",
        "[benchmarks]",
        f"names = {json.dumps(list(benchmarks))}",
        "",
        "[detectors]",
        f"names = {json.dumps(list(detectors))}",
        "",
        "[scale]",
        f"shards = {shards}",
        "",
    ]
    for p in pools:
        lines += [
            "[[pools]]",
            f'name = "{p["name"]}"',
            f'source = "{p["source"]}"',
            f'map = "{p["map"]}"',
            f"text_fields = {json.dumps(p.get('text_fields', ['problem']))}",
            "",
        ]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def run_log(state) -> list[str]:
    """The messages a flow run logged, as Prefect's API stores them (the UI's run log)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()  # send what is queued, and wait
    run_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        logs = client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])),
            sort=LogSort.TIMESTAMP_ASC,
        )
    return [x.message for x in logs]


def server_children(pid: int) -> list:
    """The temporary Prefect servers (uvicorn with Prefect's app) under process ``pid``."""
    import psutil

    out = []
    for c in psutil.Process(pid).children(recursive=True):
        try:
            if "prefect.server.api.server:create_app" in " ".join(c.cmdline()):
                out.append(c)
        except psutil.NoSuchProcess:
            pass
    return out


def kill_all(proc, servers: list) -> None:
    """Never leave a command or its servers behind, even when a test fails."""
    import contextlib

    import psutil

    if proc.poll() is None:
        servers = servers or server_children(proc.pid)
        proc.kill()
        proc.wait()
    for s in servers:
        with contextlib.suppress(psutil.NoSuchProcess):
            s.kill()


def amc_teacher(pools_dir: Path, root: Path):
    """(the ref of 5 AMC prompts ingested under ``root``, a stand-in teacher's reply function
    that thinks briefly and boxes each prompt's reference answer) for the SFT flow tests."""
    from curation.catalog import Catalog
    from curation.ingest import ingest

    cat = Catalog(root)
    res = ingest(str(pools_dir / "math_ttrl_amc23_as_train.jsonl"), field_map="ttrl", name="amc",
                 catalog=cat, limit=5)  # fmt: skip
    answers = {r["problem"]: r["answer"] for r in cat.load(res.ref).to_pylist()}

    def reply(text, body):
        ans = next((a for p, a in answers.items() if p in text), "0")
        return f"Thinking.</think>\n\nThe answer is \\boxed{{{ans}}}."

    return res.ref, reply


def write_sft_config(path: Path, ref: str, base_url: str, out: Path, data_root=None) -> Path:
    """An ``[sft]`` config: 2 responses per prompt from the stand-in at ``base_url``, responses
    decontaminated against aime24, a 2 x 2 grid (prompts 2 and 5, responses 1 and 2)."""
    root = f'data_root = "{data_root}"\n' if data_root is not None else ""
    path.write_text(
        f'[sft]\npool = "{ref}"\nresponses_per_prompt = 2\nout = "{out}"\n{root}'
        f'[sft.teacher]\nmodel = "stand-in"\n'
        f'[sft.generation]\nbackend = "openai"\nbase_url = "{base_url}"\n'
        f'[sft.filters]\ndecontam_benchmarks = ["aime24"]\n'
        f"[sft.grid]\nprompts = [2, 5]\nresponses = [1, 2]\n"
    )
    return path
