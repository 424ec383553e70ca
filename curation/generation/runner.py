"""Run a prompt set through a backend into a sample store: only what is missing is generated."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from curation.errors import ConfigError
from curation.generation.backends import Backend, Prompt, Request, _with_system
from curation.generation.config import SamplingParams
from curation.generation.progress import Progress
from curation.generation.store import Sample, SampleStore, prompt_hash, sample_key, samples_table
from curation.shutdown import stop_note


@dataclass
class GenerationResult:
    """``samples[p][i]``: sample ``i`` of prompt ``p`` (failed ones have ``text=None``)."""

    prompt_hashes: list[str]
    samples: list[list[Sample]]
    generated: int = 0  # samples produced by this call (failures included)
    reused: int = 0  # samples found in the store
    failed: int = 0  # samples whose request failed (retried by the next run)
    empty: int = 0  # samples whose text is empty
    errors: list[str] = field(default_factory=list)  # first few distinct errors

    def table(self) -> pa.Table:
        return samples_table(s for row in self.samples for s in row)


def prompt_hashes(prompts: Sequence[Prompt], backend: Backend) -> list[str]:
    cfg = backend.config
    out = []
    for p in prompts:
        p = _with_system(p, cfg.system_prompt)
        out.append(prompt_hash(p, cfg.mode, backend.template_id(p)))
    return out


def generate(
    prompts: Sequence[Prompt],
    n: int,
    params: SamplingParams,
    backend: Backend,
    store: SampleStore,
    *,
    progress: Progress | bool | None = None,
    say_kept: bool = True,
) -> GenerationResult:
    """Make sure ``store`` holds samples ``0..n-1`` of every prompt; generate only the missing.

    ``prompts`` are chat message lists or plain strings. A sample whose request failed is kept
    in the store as a failure and asked again by the next call. Returns every prompt's samples.
    ``say_kept``: a stop while generating names the samples this call kept (the command's
    last line, :func:`curation.shutdown.stop_note`); a caller that calls it chunk by chunk
    says it for the whole run instead (this call's counts are one chunk's).
    """
    if n < 1:
        raise ConfigError(f"samples per prompt must be >= 1, got {n}", hint="pass --k 1 or more")
    cfg = backend.config
    pk = params.key()
    hashes = prompt_hashes(prompts, backend)
    requests: list[Request] = []
    seen: set[str] = set()
    reused = 0
    for p, h in zip(prompts, hashes, strict=True):
        if h in seen:
            continue  # the same prompt twice: its samples are shared
        seen.add(h)
        missing = [i for i in range(n) if not store.done(sample_key(backend.model_id, pk, h, i))]
        reused += n - len(missing)
        if missing:
            requests.append(Request(_with_system(p, cfg.system_prompt), h, missing))
    todo = sum(len(r.indices) for r in requests)
    generated = 0
    if isinstance(progress, Progress):  # a caller's bar over all samples: reused ones are done
        progress.reuse(reused)
    if todo:
        backend.check()
        own = progress is True or progress is None
        bar = Progress(todo, f"generate {backend.model_id}") if own else progress
        if progress is False:
            bar = None

        def sink(samples: list[Sample]) -> None:
            nonlocal generated
            store.append(samples)
            generated += len(samples)
            if bar is not None:
                bar.update(len(samples), tokens=sum(x.completion_tokens or 0 for x in samples))

        def kept() -> str | None:  # read only if a stop comes (curation.shutdown.stop_note)
            if not say_kept:
                return None
            are = "is" if generated == 1 else "are"
            return (
                f"{generated} of the {todo} samples asked for {are} kept in the sample store "
                f"({store.root}): run the same command again to generate only the missing ones"
            )

        try:
            with stop_note(kept):
                backend.run(requests, params, sink)
        except BaseException:
            if bar is not None and own:
                bar.close("stopped")
            raise
        if bar is not None and own:
            bar.close()
    out: list[list[Sample]] = []
    failed = empty = 0
    errors: list[str] = []
    for h in hashes:
        row = []
        for i in range(n):
            s = store.get(sample_key(backend.model_id, pk, h, i))
            if s is None:  # pragma: no cover - a backend that skipped a request
                raise ConfigError(f"backend {backend.name} returned no sample {i} for {h[:12]}")
            row.append(s)
            if s.failed:
                failed += 1
            elif s.error:
                empty += 1
            if s.error and s.error not in errors and len(errors) < 5:
                errors.append(s.error)
        out.append(row)
    return GenerationResult(hashes, out, generated, reused, failed, empty, errors)
