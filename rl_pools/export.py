"""Exports of an RL pool for the trainers that consume it.

* **TRL GRPO** (:func:`to_trl`, :func:`write_trl`): ``prompt`` in conversational form (a list
  of ``{role, content}``; TRL applies the chat template) plus the columns reward functions read
  (``answer``, ``tests`` as a JSON string, ``test_preamble`` (code: the import header the tests
  run after), ``domain``, ``uid``, ``pass_rate``, ``tier``): GRPOTrainer
  passes every extra column to the reward functions as keyword arguments.
* **verl** (:func:`to_verl`, :func:`write_verl`): the parquet layout of verl's ``RLHFDataset``
  (``data_source, prompt, ability, reward_model{style, ground_truth}, extra_info``). Math
  ground_truth is the answer string; code ground_truth is JSON: ``{"inputs": [...], "outputs":
  [...]}`` (verl's prime/TACO code reward) when every test is stdin, else Sluice's tests list.
* **Hub** (:func:`push_to_hub`): a ``datasets.Dataset`` pushed with ``push_to_hub``; ``dry_run``
  writes what would be uploaded (parquet + dataset card) to a local folder, offline.

The prompt is built by :mod:`rl_pools.prompts` with the same template as the rollouts, so the
exported pass rate belongs to the exported prompt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from curation.errors import DatasetRef, InputError
from rl_pools import prompts as prompt_templates

MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])

VERL_SCHEMA = pa.schema(
    [
        pa.field("data_source", pa.string()),
        pa.field("prompt", pa.list_(MESSAGE)),
        pa.field("ability", pa.string()),
        pa.field(
            "reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])
        ),
        pa.field(
            "extra_info",
            pa.struct(
                [
                    ("index", pa.int64()),
                    ("split", pa.string()),
                    ("uid", pa.string()),
                    ("source", pa.string()),
                    ("pass_rate", pa.float64()),
                    ("tier", pa.string()),
                    ("stage", pa.int32()),
                    ("answer", pa.string()),
                    ("tests", pa.string()),
                    ("test_preamble", pa.string()),
                ]
            ),
        ),
    ]
)

TRL_SCHEMA = pa.schema(
    [
        pa.field("prompt", pa.list_(MESSAGE)),
        pa.field("answer", pa.string()),
        pa.field("tests", pa.string()),
        pa.field("test_preamble", pa.string()),  # code: what the tests run after (imports)
        pa.field("domain", pa.string()),
        pa.field("uid", pa.string()),
        pa.field("source", pa.string()),
        pa.field("pass_rate", pa.float64()),
        pa.field("tier", pa.string()),
        pa.field("stage", pa.int32()),
    ]
)


def _rows(table: pa.Table, source: str | None = None) -> list[dict[str, Any]]:
    """The pool's rows, each checked to be rewardable: a math row needs its answer and a code
    row its tests, in every format (TRL wrote math rows with answer None that verl refused).
    A row that is not is one error naming ``source`` (``name@version``), the row (1-based), its
    uid and the field; nothing is written."""
    where = DatasetRef(source) if source else None
    for col in ("uid", "domain", "problem"):
        if col not in table.column_names:
            raise InputError(f"the pool has no {col!r} column", file=where, field=col,
                             hint="export an RL pool version (NAME.rl@latest)")  # fmt: skip
    rows = table.to_pylist()
    for i, r in enumerate(rows, 1):
        if r["domain"] == "math" and not (r.get("answer") or "").strip():
            what, field = "a math row has no answer: no reward can grade it", "answer"
        elif r["domain"] == "code" and not r.get("tests"):
            what, field = "a code row has no tests: no reward can grade it", "tests"
        else:
            continue
        raise InputError(f"uid {r['uid']}: {what}", file=where, row=i, field=field,
                         hint="validate the pool first (sluice rl validate drops such rows), "
                         "then select and export again; nothing was written")  # fmt: skip
    return rows


def _preamble(r: dict[str, Any]) -> str | None:
    """A code row's test preamble (LeetCode's import header, in metadata): a reward must run
    the answer after it, as rollouts and validation do."""
    from rl_pools.testcases import test_preamble

    return (test_preamble(r.get("metadata")) or None) if r["domain"] == "code" else None


def _tests_json(tests: list[dict[str, Any]] | None) -> str | None:
    return json.dumps(tests, ensure_ascii=False, sort_keys=True) if tests else None


def _verl_code_truth(tests: list[dict[str, Any]] | None) -> str:
    tests = tests or []
    if tests and all(t.get("kind") == "stdin" for t in tests):
        return json.dumps({"inputs": [t["input"] for t in tests],
                           "outputs": [t["output"] for t in tests]}, ensure_ascii=False)  # fmt: skip
    return json.dumps({"sluice_tests": tests}, ensure_ascii=False, sort_keys=True)


def trl_table(table: pa.Table, *, system: str | None = None,
              templates: dict[str, str] | None = None, source: str | None = None) -> pa.Table:  # fmt: skip
    """The TRL layout (see the module). ``source``: the pool's ``name@version``, for errors."""
    out = []
    for r in _rows(table, source):
        tmpl = (templates or {}).get(r["domain"])
        out.append({"prompt": prompt_templates.messages(r, tmpl, system), "answer": r.get("answer"),
                    "tests": _tests_json(r.get("tests")), "test_preamble": _preamble(r),
                    "domain": r["domain"], "uid": r["uid"],
                    "source": r.get("source"), "pass_rate": r.get("pass_rate"),
                    "tier": r.get("tier"), "stage": r.get("stage")})  # fmt: skip
    return pa.Table.from_pylist(out, schema=TRL_SCHEMA)


def to_trl(table: pa.Table, **kw: Any):
    """A ``datasets.Dataset`` ready for ``trl.GRPOTrainer(train_dataset=...)``."""
    import datasets

    return datasets.Dataset(trl_table(table, **kw))


def write_trl(table: pa.Table, out_dir: str | Path, **kw: Any) -> Path:
    t = trl_table(table, **kw)  # checked before the folder is made: a refusal leaves nothing
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "train.parquet"
    _atomic_parquet(t, path)
    return path


def to_verl(table: pa.Table, *, split: str = "train", system: str | None = None,
            templates: dict[str, str] | None = None, source: str | None = None) -> pa.Table:  # fmt: skip
    """The verl layout (see the module). ``source``: the pool's ``name@version``, for errors."""
    out = []
    for i, r in enumerate(_rows(table, source)):
        tmpl = (templates or {}).get(r["domain"])
        truth = r.get("answer") if r["domain"] == "math" else _verl_code_truth(r.get("tests"))
        out.append({
            "data_source": r.get("source") or "sluice",
            "prompt": prompt_templates.messages(r, tmpl, system),
            "ability": r["domain"],
            "reward_model": {"style": "rule", "ground_truth": truth},
            "extra_info": {"index": i, "split": split, "uid": r["uid"], "source": r.get("source"),
                           "pass_rate": r.get("pass_rate"), "tier": r.get("tier"),
                           "stage": r.get("stage"), "answer": r.get("answer"),
                           "tests": _tests_json(r.get("tests")), "test_preamble": _preamble(r)},
        })  # fmt: skip
    return pa.Table.from_pylist(out, schema=VERL_SCHEMA)


def write_verl(table: pa.Table, path: str | Path, **kw: Any) -> Path:
    t = to_verl(table, **kw)  # checked before the folder is made: a refusal leaves nothing
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_parquet(t, path)
    return path


def _atomic_parquet(t: pa.Table, path: Path) -> None:
    import os

    tmp = path.with_name(f".{path.name}.tmp")
    try:
        pq.write_table(t, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


CARD = """---
license: other
task_categories: [reinforcement-learning]
tags: [sluice, rl-pool, {fmt}]
---
# {repo_id}

RL pool exported by Sluice ({fmt} layout), {rows} rows.

- Sluice version: `{ref}`
- Keep rule / config: `{config}`
"""


def push_to_hub(table: pa.Table, repo_id: str, *, fmt: str = "trl", dry_run: bool = True,
                out_dir: str | Path | None = None, ref: str = "", config: dict | None = None,
                private: bool = True, token: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Push the exported pool to the Hub as a dataset. ``dry_run`` (the default) touches no
    network: it writes ``data/train-00000-of-00001.parquet`` and ``README.md`` under
    ``out_dir/OWNER__NAME`` (``out_dir`` None: a new temporary folder, never the working folder)
    exactly as they would be uploaded, and returns the plan (``folder``: where they are). A
    real push (``dry_run=False``) stages them under ``out_dir`` too when it is given, then
    uploads; without ``out_dir`` it writes nothing locally."""
    from curation.hub import push_to_hub as hub_push

    if fmt not in ("trl", "verl"):
        raise InputError(f"unknown export format {fmt!r}", hint="use trl or verl")
    if "/" not in repo_id:
        raise InputError(f"repo id {repo_id!r} must be 'owner/name'")
    t = trl_table(table, source=ref or None) if fmt == "trl" else to_verl(table, source=ref or None)
    card = CARD.format(repo_id=repo_id, fmt=fmt, rows=t.num_rows, ref=ref,
                       config=json.dumps(config or {}, sort_keys=True))  # fmt: skip
    plan = {"repo_id": repo_id, "format": fmt, "rows": t.num_rows, "private": private,
            "columns": t.column_names, "dry_run": dry_run}  # fmt: skip
    if out_dir is None and dry_run:
        import tempfile

        out_dir = tempfile.mkdtemp(prefix="sluice-hub-dry-run-")
    # a real push stages in out_dir too when one is given (a local copy of what is sent)
    out = Path(out_dir).resolve() / repo_id.replace("/", "__") if out_dir is not None else None
    # the one Hub publisher (curation.hub): shards, card, and a dry run that stages them
    res = hub_push({"train": t}, repo_id, card=card, dry_run=dry_run, staging_dir=out,
                   private=private, token=token)  # fmt: skip
    if out is not None:
        plan["files"] = sorted(f for f in res.files if f != "push_plan.json")
        plan["folder"] = str(out)
    return plan
