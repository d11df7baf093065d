# The README's commands. Everything runs from one virtualenv, created and reused here.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test unit lint models serve bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[server,test]'
	@touch $@

models: $(STAMP)
	$(PY) model_repository/generate_models.py
	@mkdir -p examples/model
	@cp -p model_repository/mobilenetv2/1/model.onnx examples/model/mobilenetv2.onnx
	@cp -p model_repository/mobilenetv2/input.bin examples/model/input.bin

## The main job: embedded server + MobileNetV2 at 3 workers + seed 001's 5 threads x 2 tasks.
demo: models
	cd examples && ../$(PY) quick_start_parallel_python.py

## Lint, type-check, unit and integration tests (real embedded tritonserver on free loopback ports).
test: models
	@sh scripts/check_system.sh
	$(PY) -m ruff check .
	$(PY) -m mypy client/mslite_triton backend/mslite/mslite_backend
	$(PY) -m pytest -q -p no:cacheprovider tests

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

serve: models
	$(VENV)/bin/mslite-triton serve --model-repository model_repository

## Issue 4's benchmark (not part of `make test`; ~10 min, BENCH_ARGS=--quick ~2 min): benchmarks/results/.
bench: models
	$(PY) -m benchmarks.run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) examples/model model_repository/*/[0-9]* model_repository/*/input.bin
