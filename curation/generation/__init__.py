"""The one model-generation layer of Sluice, shared by RL rollouts (rl_pools), the SFT teacher
(sft_generation) and the decontamination judge: typed sampling config, backends (any
OpenAI-compatible endpoint; transformers in process) and a content-keyed, resumable sample store.

It lives in ``curation`` (the bottom package) so that every stage can import it without a cycle.
Heavy libraries (httpx, torch, transformers) load inside the backends that use them.
"""

from curation.generation.backends import (
    Backend,
    EndpointUnavailable,
    GenerationError,
    HFBackend,
    OpenAIBackend,
    Request,
    make_backend,
    render_chat,
)
from curation.generation.config import GenerationConfig, SamplingParams
from curation.generation.progress import Progress
from curation.generation.runner import GenerationResult, generate, prompt_hashes
from curation.generation.store import (
    SAMPLE_SCHEMA,
    Sample,
    SampleStore,
    StoreLocked,
    prompt_hash,
    sample_key,
)

__all__ = [
    "SAMPLE_SCHEMA",
    "Backend",
    "EndpointUnavailable",
    "GenerationConfig",
    "GenerationError",
    "GenerationResult",
    "HFBackend",
    "OpenAIBackend",
    "Progress",
    "Request",
    "Sample",
    "SampleStore",
    "SamplingParams",
    "StoreLocked",
    "generate",
    "make_backend",
    "prompt_hash",
    "prompt_hashes",
    "render_chat",
    "sample_key",
]
