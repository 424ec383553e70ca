"""Canonical record schemas (Arrow), each carrying a schema version in its metadata.

Every pool, whatever its source format, becomes a table of :data:`PROBLEM_SCHEMA`.
Generated SFT data becomes :data:`SFT_SAMPLE_SCHEMA`. Nested, source-specific data goes to
``metadata`` as a JSON string so that the schema stays fixed across pools.
"""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa

PROBLEM_SCHEMA_VERSION = "problem/1"
SFT_SAMPLE_SCHEMA_VERSION = "sft_sample/1"

DOMAINS = ("math", "code")

# A test case: stdin/stdout pair, or a functional test (LeetCode-style) with an entry point.
TEST_TYPE = pa.struct(
    [
        ("kind", pa.string()),  # "stdin" | "functional"
        ("input", pa.string()),  # stdin text, or call arguments / test code for functional
        ("output", pa.string()),  # expected stdout, or expected return value (may be null)
        ("entry_point", pa.string()),  # functional tests only
    ]
)

PROBLEM_SCHEMA = pa.schema(
    [
        pa.field("uid", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("source_id", pa.string()),
        pa.field("domain", pa.string(), nullable=False),
        pa.field("problem", pa.string(), nullable=False),
        pa.field("answer", pa.string()),
        pa.field("solutions", pa.list_(pa.string())),
        pa.field("tests", pa.list_(TEST_TYPE)),
        pa.field("starter_code", pa.string()),
        pa.field("platform", pa.string()),
        pa.field("contest_id", pa.string()),
        pa.field("problem_id", pa.string()),
        pa.field("contest_date", pa.string()),  # ISO-8601 date or datetime, as in the source
        pa.field("metadata", pa.string()),  # JSON object
    ],
    metadata={b"sluice.schema": PROBLEM_SCHEMA_VERSION.encode()},
)

SFT_SAMPLE_SCHEMA = pa.schema(
    [
        pa.field("uid", pa.string(), nullable=False),
        pa.field("problem_uid", pa.string()),
        pa.field("prompt", pa.string()),
        pa.field(
            "messages",
            pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])),
        ),
        pa.field("response", pa.string()),
        pa.field("reasoning", pa.string()),
        pa.field("final_answer", pa.string()),
        pa.field("generator_model", pa.string()),
        pa.field("sampling_params", pa.string()),  # JSON object
        pa.field("verification", pa.string()),  # correct|incorrect|no_answer|timeout|error
        pa.field("verification_reason", pa.string()),
        pa.field("prompt_tokens", pa.int64()),
        pa.field("response_tokens", pa.int64()),
        pa.field("metadata", pa.string()),  # JSON object
    ],
    metadata={b"sluice.schema": SFT_SAMPLE_SCHEMA_VERSION.encode()},
)

REQUIRED_PROBLEM_FIELDS = ("source", "domain", "problem")


def content_uid(domain: str, normalized_problem: str, prefix: str = "p") -> str:
    """Stable id from normalized content: same text -> same uid on every run and machine.

    The uid depends only on the domain and the *normalized* problem text (not on the source,
    row order or machine), so the same problem in two pools gets the same uid; that is what
    exact dedup keys on.
    """
    h = hashlib.sha256(f"{domain}\x1f{normalized_problem}".encode()).hexdigest()
    return f"{prefix}_{h[:24]}"


def schema_version(schema: pa.Schema) -> str | None:
    md = schema.metadata or {}
    v = md.get(b"sluice.schema")
    return v.decode() if v else None


def dumps_metadata(obj: dict | None) -> str | None:
    """JSON-encode metadata deterministically (sorted keys, UTF-8 kept)."""
    if obj is None:
        return None
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str)
