# The two set-up commands of the README. Both bootstrap .venv/ first.
.PHONY: setup demo test models clean

setup:
	@bash scripts/bootstrap.sh

demo: setup
	.venv/bin/validate --profile profiles/tiny-cpu.yaml

test:
	@bash scripts/bootstrap.sh test
	.venv/bin/python -m pytest -q -ra

models: setup
	.venv/bin/python -m validator.tinymodels --dir models

clean:
	rm -rf .venv models runs .pytest_cache
