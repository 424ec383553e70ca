# Two commands: `make setup` installs everything, `make test` runs the tests.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup test lint bench demo clean

setup:
	bash scripts/setup.sh

test:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench:
	$(BIN)/python tests/benchmarks/bench_ingest.py
	$(BIN)/python tests/benchmarks/bench_ngram.py
	$(BIN)/python tests/benchmarks/bench_minhash.py
	$(BIN)/python tests/benchmarks/bench_catalog.py
	$(BIN)/python tests/benchmarks/bench_verify_sandbox.py
	$(BIN)/python tests/benchmarks/bench_embedding.py
	$(BIN)/python tests/benchmarks/bench_decontam_memory.py
	$(BIN)/python tests/benchmarks/bench_decontam_e2e.py
	$(BIN)/python tests/benchmarks/bench_decontam_catalog_memory.py
	$(BIN)/python tests/benchmarks/bench_decontam_sharded_memory.py
	$(BIN)/python tests/benchmarks/bench_default_set.py
	$(BIN)/python tests/benchmarks/bench_rerun.py
	$(BIN)/python tests/benchmarks/bench_grpo_hooks.py
	$(BIN)/python tests/benchmarks/bench_rollouts.py
	$(BIN)/python tests/benchmarks/bench_sft.py

demo:
	$(BIN)/sluice demo

clean:
	rm -rf $(VENV) .sluice .pytest_cache .ruff_cache
