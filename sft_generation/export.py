"""Exports of an SFT set: chat-format data for TRL's ``SFTTrainer``, and the Hub.

Two layouts of the reasoning (``--reasoning``):

* ``inline`` (default): the assistant turn holds ``<think>\\n{reasoning}\\n</think>\\n\\n{answer}``,
  which is what an R1-style model is trained to emit;
* ``split``: the assistant turn holds the answer only and the thinking goes to a ``reasoning``
  column (and to the message's ``reasoning_content`` key, which reasoning-aware chat templates
  render), for trainers that add it themselves.

The export is a Parquet file of ``messages`` (plus provenance columns) that ``datasets`` loads
and TRL's ``SFTTrainer`` accepts as a conversational dataset.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from curation.errors import ConfigError, InputError

LAYOUTS = ("inline", "split")


def assistant_text(reasoning: str | None, answer: str | None) -> str:
    think = (reasoning or "").strip()
    ans = (answer or "").strip()
    return f"<think>\n{think}\n</think>\n\n{ans}" if think else ans


def to_chat(table: pa.Table, *, reasoning: str = "inline", source: str = "") -> pa.Table:
    """The SFT set ``table`` (``prompt``, ``reasoning``, ``final_answer``...) as chat rows."""
    if reasoning not in LAYOUTS:
        raise ConfigError(f"unknown reasoning layout {reasoning!r}", hint="use inline or split")
    need = [
        c for c in ("uid", "prompt", "reasoning", "final_answer") if c not in table.column_names
    ]
    if need:
        raise InputError(
            f"{source or 'the input'} is not an SFT set: no {need[0]!r} column",
            field=need[0],
            hint="export a NAME.sft.* version (sluice sft build)",
        )
    rows = []
    for r in table.to_pylist():
        if reasoning == "inline":
            asst = {
                "role": "assistant",
                "content": assistant_text(r["reasoning"], r["final_answer"]),
            }
        else:
            asst = {
                "role": "assistant",
                "content": (r["final_answer"] or "").strip(),
                "reasoning_content": (r["reasoning"] or "").strip(),
            }
        rows.append(
            {
                "messages": [{"role": "user", "content": r["prompt"]}, asst],
                **({"reasoning": (r["reasoning"] or "").strip()} if reasoning == "split" else {}),
                "uid": r["uid"],
                "problem_uid": r.get("problem_uid"),
                "generator_model": r.get("generator_model"),
                "verification": r.get("verification"),
            }
        )
    return pa.Table.from_pylist(rows)


def export_trl(
    table: pa.Table, out: str | Path, *, reasoning: str = "inline", source: str = ""
) -> Path:
    """Write the chat export to ``out`` (a ``.parquet`` file, or a folder for ``train.parquet``)."""
    p = Path(out)
    if p.suffix == ".parquet" and p.is_dir():
        raise ConfigError(
            f"--out {p} is a folder; a .parquet --out is the export file itself",
            hint=f"give a file path that is not a folder, or --out {p.with_suffix('')} for "
            f"{p.with_suffix('') / 'train.parquet'}; nothing was written",
        )
    chat = to_chat(table, reasoning=reasoning, source=source)
    if p.suffix != ".parquet":
        p.mkdir(parents=True, exist_ok=True)
        p = p / "train.parquet"
    else:
        p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    try:
        pq.write_table(chat, tmp)
        tmp.replace(p)
    finally:
        tmp.unlink(missing_ok=True)
    return p
