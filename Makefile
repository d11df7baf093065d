# The README's commands. Everything runs from one virtualenv, created and reused here.
VENV ?= .venv
PY := $(VENV)/bin/python
# Each command installs what it needs into the one venv: the demo the server, the tests everything ([mindir] is
# MindSpore, for tests/integration/test_mindir.py; [tune] is Model Analyzer, for tests/integration/test_tune.py;
# neither changes the others' pins). Their sizes: docs/sizes-and-times.md.
# A stamp names its extras, so adding one reinstalls an existing venv.
DEMO_EXTRAS := server
EXTRAS := server,test,mindir,tune
comma := ,
DEMO_STAMP := $(VENV)/.installed-$(subst $(comma),-,$(DEMO_EXTRAS))
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: demo test unit lint models serve bench clean system-packages

## Debian packages for the tests and the other-language clients (installed as root, else the apt line is printed).
system-packages:
	@sh scripts/check_system.sh

$(VENV)/.installed-%: pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(subst -,$(comma),$*)]'
	@touch $@

models: $(DEMO_STAMP)
	$(PY) model_repository/generate_models.py
	@mkdir -p examples/model
	@cp -p model_repository/mobilenetv2/1/model.onnx examples/model/mobilenetv2.onnx
	@cp -p model_repository/mobilenetv2/input.bin examples/model/input.bin

## The main job: a local server + MobileNetV2 at 3 workers + the Python concurrent-inference sample's 5 threads x 2 tasks
## (unedited; whole_lines.py keeps its threads' prints from interleaving mid-line).
demo: models
	cd examples && MSLITE_TRITON_LOG=info ../$(PY) ../scripts/whole_lines.py quick_start_parallel_python.py

# The project's own folders: a script of the user's saved in the checkout (a quick start) is not linted.
LINT_PATHS := backend benchmarks client contract model_repository scripts server tests typings README.md docs
## Lint (ruff's rules and its formatting, Markdown's Python blocks included) and type-check, in seconds.
lint: $(STAMP)
	$(PY) -m ruff check $(LINT_PATHS)
	$(PY) -m ruff format --check $(LINT_PATHS)
	$(PY) -m mypy client/mslite_triton server/mslite_server server/mslite_gateway contract/mslite_contract backend/mslite/mslite_backend
	@# model.py imports the package beside it by the name Triton's stub gives it, from backend/mslite
	cd backend/mslite && $(abspath $(PY)) -m mypy --config-file ../../pyproject.toml --cache-dir ../../.mypy_cache model.py

## Lint, type-check, unit and integration tests (real tritonserver on free loopback ports).
test: system-packages $(STAMP) models lint
	$(PY) -m pytest -q -p no:cacheprovider --durations=15 tests benchmarks/tests

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

## The server on Triton's usual ports (8000 HTTP, 8001 gRPC, 8002 metrics); e.g. `make serve HTTP_PORT=9000 GRPC_PORT=9001 METRICS_PORT=9002`,
## SERVE_ARGS for any other `mslite-triton serve` option (`--help` lists them).
HTTP_PORT ?= 8000
GRPC_PORT ?= 8001
METRICS_PORT ?= 8002
serve: models
	$(VENV)/bin/mslite-triton serve --model-repository model_repository --http-port $(HTTP_PORT) \
		--grpc-port $(GRPC_PORT) --metrics-port $(METRICS_PORT) $(SERVE_ARGS)

## The serving benchmark (not part of `make test`; ~30 min with the C++ backend, BENCH_ARGS=--quick ~2.5 min; make exits 2 when a bar falls short (the benchmark's own exit status is 3)): benchmarks/results/.
# It needs the server's packages only (the [server] extra, ~490 MiB, as `make demo`), not MindSpore or Model Analyzer;
# perf_analyzer and matplotlib go into .tools-venv/ (~250 MiB).
bench: models
	@echo "make bench: the [server] extra in .venv/ (~490 MiB, as make demo), perf_analyzer in .tools-venv/ (~250 MiB)"
	$(PY) -m benchmarks.run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) examples/model model_repository/*/[0-9]* model_repository/*/input.bin

## Clients in other languages and the container files (README "Clients in other languages", "Deployment").
.PHONY: java-client cpp-client cpp-example compose-config
java-client: system-packages
	javac -Xlint:all --release 17 -d client/java/build client/java/src/mslite/triton/*.java client/java/examples/Main.java

## The C++ client: client/cpp/build/libmslite_triton.a (link with -lcurl -pthread; client/cpp/CMakeLists.txt too).
CPP_BUILD := client/cpp/build
CPP_OBJECTS := $(patsubst client/cpp/src/%.cc,$(CPP_BUILD)/%.o,$(wildcard client/cpp/src/*.cc))
CPP_HEADERS := $(wildcard client/cpp/include/mslite_triton/*.h client/cpp/src/*.h)
CPP_FLAGS := -O2 -std=c++17 -Wall -Wextra -fPIC -Iclient/cpp/include
$(CPP_BUILD)/%.o: client/cpp/src/%.cc $(CPP_HEADERS)
	@mkdir -p $(CPP_BUILD)
	$(CXX) $(CPP_FLAGS) -c $< -o $@
$(CPP_BUILD)/libmslite_triton.a: $(CPP_OBJECTS)
	$(AR) rcs $@ $^
cpp-client: system-packages $(CPP_BUILD)/libmslite_triton.a

## MindSpore Lite's C++ concurrent sample on MobileNetV2 (5 threads x 2 predicts), against MSLITE_TRITON_URL
## or the `mslite-triton serve` the client starts for the run.
cpp-example: cpp-client models
	@mkdir -p examples/cpp/build
	$(CXX) $(CPP_FLAGS) -o examples/cpp/build/main examples/cpp/main.cc $(CPP_BUILD)/libmslite_triton.a -lcurl -pthread
	sh examples/cpp/run.sh

compose-config:
	MSLITE_TRITON_KEY=$${MSLITE_TRITON_KEY:-check-only} docker-compose config -q
	MSLITE_TRITON_KEY=$${MSLITE_TRITON_KEY:-check-only} docker-compose -f docker-compose.yml -f deploy/compose.gpu.yml config -q

## Healing under predicting clients (not part of `make test`; CHAOS_ARGS=--quick for a shorter faults run):
## process faults and client attacks under `serve` (faults), and requests that cost everyone else (costs).
.PHONY: chaos
chaos: $(STAMP) models
	$(PY) -m benchmarks.chaos faults $(CHAOS_ARGS)
	$(PY) -m benchmarks.chaos costs
