# The two set-up commands of the README. Both bootstrap .venv/ first.
.PHONY: setup demo test test-fast lint models clean

setup:
	@bash scripts/bootstrap.sh

demo: setup
	.venv/bin/validate --profile profiles/tiny-cpu.yaml

# every test, real vLLM included; one pytest process, vLLM on CPU 0 (scripts/test.sh; KVGATE_TEST_PARALLEL=1: two)
test:
	@bash scripts/bootstrap.sh test
	@$(MAKE) --no-print-directory lint
	@bash scripts/test.sh

# the pure tests (no vLLM, no server, no process of kvgate's): under a minute
test-fast:
	@bash scripts/bootstrap.sh test
	@$(MAKE) --no-print-directory lint
	KVGATE_FUZZ_EXAMPLES=100 .venv/bin/python -m pytest -q -m "not live"

lint:
	.venv/bin/ruff check validator loadgen tests benchmarks
	.venv/bin/ruff format --check validator loadgen tests benchmarks
	.venv/bin/mypy

models: setup
	.venv/bin/python -m validator.tinymodels --dir models

clean:
	rm -rf .venv models runs .pytest_cache
