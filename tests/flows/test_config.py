"""Tests for the pipeline file's typed config (flows/config.py)."""

from flows.config import PoolConfig


def test_pool_text_fields_named_twice_are_kept_once_in_order():
    pool = PoolConfig(name="p", source="x.jsonl", text_fields=["messages", "resp", "resp"])
    assert pool.text_fields == ["messages", "resp"]
