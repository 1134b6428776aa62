# kvtier — `make demo` runs the main job on a local control plane, `make test` runs every test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
export GOTOOLCHAIN := local
CACHE_DIR := $(or $(KVTIER_CACHE_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kvtier)
# Python keeps the bytecode it compiles (the virtualenv's and the tree's __pycache__): with
# PYTHONDONTWRITEBYTECODE set, as some machines set it, every one of the suite's Python
# processes (pytest's workers, each operator, each CLI run) compiled the client, pydantic
# and kvtier again, about half a CPU-second each.
unexport PYTHONDONTWRITEBYTECODE
# The builds a command needs are independent: they run side by side (one downloads or links
# while another compiles); each build script prefixes its lines with its name. No output
# sync: it would hold pytest's output back until the whole run ends.
MAKEFLAGS += --jobs=$(or $(KVTIER_JOBS),3)
# Each phase's wall and CPU time, when KVTIER_PHASE_LOG names a file (bench/first_hour.py).
PHASE  := hack/phase
# Test modules run side by side on this many workers, each with control planes of its own:
# most of an e2e module's time is waiting on them (tests/conftest.py groups the modules).
TEST_WORKERS ?= $(or $(KVTIER_TEST_WORKERS),6)
PARALLEL := -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

.PHONY: all venv pycache deps cluster-bin cluster-bin-demo validators prometheus upstream-crds stored-crds kserve lws rook epp-oracle lint generate check-generated render-manifests \
	check-manifests unit e2e pytest test demo bench clean

all: test

# uv makes the virtualenv and installs the project and its extras into it: the same packages
# pip would resolve, in about 2 s with its cache full where venv and pip took about 25 s on
# every fresh clone. uv itself (its wheel is one native binary) is installed once per version
# into the cache, so a fresh clone does not wait for venv's own pip to install it.
UV_VERSION := 0.13.8
UV_DIR := $(CACHE_DIR)/uv-$(UV_VERSION)
UV_BIN := $(UV_DIR)/bin/uv
UV := $(UV_BIN) pip install -q --python $(BIN)/python

$(UV_BIN):
	@mkdir -p $(CACHE_DIR)
	$(PHASE) uv -- sh -c 'tmp=$$(mktemp -d $(UV_DIR).XXXXXX) && $(PYTHON) -m venv "$$tmp" \
	  && "$$tmp/bin/pip" install -q --disable-pip-version-check uv==$(UV_VERSION) \
	  && { mv -T "$$tmp" $(UV_DIR) 2>/dev/null || rm -rf "$$tmp"; } && test -x $(UV_BIN)'

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml | $(UV_BIN)
	$(PHASE) venv -- env UV_PYTHON_DOWNLOADS=never $(UV_BIN) venv -q --seed --clear --python $(PYTHON) $(VENV)
	$(PHASE) venv-install -- $(UV) -e '.[dev,plot]'
	touch $@

# System packages the tests run for real (fio for the storage probe).
deps:
	$(PHASE) deps -- hack/install-system-deps

# The demo's control plane, then helm (only the chart's rendering and tests use it).
cluster-bin-demo:
	KVTIER_BUILD_HELM=0 $(PHASE) cluster-bin-demo -- hack/localcluster/build >/dev/null

cluster-bin: cluster-bin-demo
	$(PHASE) cluster-bin -- hack/localcluster/build >/dev/null

# The OLM ecosystem's validators (operator-sdk, its static scorecard tests, opm) from their
# Go modules at pinned versions, into the same cache; tests/e2e/test_packaging.py runs them.
validators:
	$(PHASE) validators -- hack/validators/build >/dev/null

# Prometheus from its Go module at a pinned version (scraper, TSDB and HTTP API; no web UI),
# into the same cache; tests/e2e/test_observed_health.py scrapes vLLM-format metrics with it.
prometheus:
	$(PHASE) prometheus -- hack/prometheus/build >/dev/null

# KServe's oracles and managers (LLMInferenceService and InferenceService) from its Go module
# at a pinned version, into the same cache, in one `go build`; the KServe tests run them.
kserve:
	$(PHASE) kserve -- hack/oracles/kserve/build --all >/dev/null

# Rook's own pool validation, built against its Go module at a pinned version, into the same
# cache; tests/e2e/test_rook_pools.py runs it.
rook:
	$(PHASE) rook -- hack/oracles/rook/build >/dev/null

# The endpoint picker's config loader (gateway-api-inference-extension v1.5.0, and v1.4.0, the
# base of llm-d's inference scheduler v0.7.1) from its Go module, into the same cache;
# tests/e2e/test_epp_oracle.py loads kvtier's scheduler configs with it.
# After KServe's: gateway-api-inference-extension v1.5.0 resolves 76 of the 77 modules it shares
# with KServe's graph at the same versions (Kubernetes' client, controller-runtime, gRPC), so
# built after it the oracle finds those packages compiled (alone: 1 min 50 s of CPU instead of
# 2 min 56 s). Built beside it, the two compiled some of them twice.
epp-oracle: | kserve
	$(PHASE) epp-oracle -- hack/oracles/epp/build --all >/dev/null

# LeaderWorkerSet's own controller manager from its Go module at a pinned version, into the
# same cache; tests/e2e/test_target_lws.py runs it and reads the StatefulSets and pods it builds.
lws:
	$(PHASE) lws -- hack/lws/build >/dev/null

# KServe's and Rook's own CRDs from their Go modules, into the same cache (no stand-ins).
upstream-crds:
	$(PHASE) upstream-crds -- hack/localcluster/upstream-crds >/dev/null

# The full upstream CRDs as an API server stores them, captured once per version of them and
# of Kubernetes (hack/localcluster/stored_crds.py): each test cluster then serves them at
# once instead of spending about 17 CPU-seconds creating them.
stored-crds: venv cluster-bin-demo upstream-crds
	$(PHASE) stored-crds -- $(BIN)/python hack/localcluster/localcluster.py stored-crds >/dev/null

# The bytecode of everything the test modules import and pytest's rewritten test modules,
# written by one collection before the workers start: in a fresh clone (its virtualenv new
# too) the six workers compiled them side by side, 65 CPU-seconds to start against 27 warm.
# Its output is shown only when collection fails.
pycache: venv
	$(PHASE) pycache -- sh -c 'out=$$($(BIN)/python -m pytest --collect-only -qq -p no:cacheprovider 2>&1) \
	  || { printf "%s\n" "$$out"; exit 1; }'

# mypy's cache is kept with the builds, not in the clone: it checks each file's hash, so a
# fresh clone re-checks only what changed (about 1 CPU-s instead of 15 to 20).
lint: venv
	$(PHASE) ruff -- $(BIN)/ruff check .
	$(PHASE) ruff-format -- $(BIN)/ruff format --check .
	$(PHASE) mypy -- $(BIN)/mypy --cache-dir=$(CACHE_DIR)/mypy

generate: venv cluster-bin
	$(BIN)/python -m kvtier.generate --write
	$(BIN)/python hack/render-manifests

check-generated: venv
	$(PHASE) check-generated -- $(BIN)/python -m kvtier.generate --check

# The chart is the one source of deploy/manifests, bundle/ and the Argo CD patch.
render-manifests: venv cluster-bin
	$(BIN)/python hack/render-manifests

check-manifests: venv cluster-bin
	$(PHASE) check-manifests -- $(BIN)/python hack/render-manifests --check

unit: venv
	$(BIN)/pytest -m "not e2e"

e2e: venv cluster-bin validators prometheus upstream-crds stored-crds kserve lws rook epp-oracle
	$(BIN)/pytest -m e2e $(PARALLEL)

# The lint, type and drift checks run beside the tests (they only read the tree), not before
# them: with the builds cached they were the last 20 s before the first test.
test: pytest lint check-generated check-manifests

pytest: venv pycache deps cluster-bin validators prometheus upstream-crds stored-crds kserve lws rook epp-oracle
	$(PHASE) pytest -- $(BIN)/pytest $(PARALLEL)

demo: venv deps cluster-bin-demo upstream-crds
	$(PHASE) demo -- hack/demo

# vLLM's own config, KV-cache-spec and offloading classes, per pinned vLLM release (virtualenvs
# in the cache, ~9 GiB each), against the golden files `make test` pins kvtier to: regenerates
# and diffs them, failing on any difference. CONFORMANCE_WRITE=1 rewrites them. docs/conformance.md.
.PHONY: conformance
conformance:
	hack/conformance/run $(if $(CONFORMANCE_WRITE),--write)

# The golden files of kvtier's rendered writes (tests/golden/rendered), which `make test`
# compares byte for byte (tests/unit/test_golden_writes.py): rewritten only here, after an
# intended change of the writes; review the diff.
.PHONY: golden
golden: venv upstream-crds
	$(BIN)/python -m tests.golden.regenerate

# The full-size benchmark and robustness suites (CI runs them shortened in `make test`).
bench: venv deps cluster-bin upstream-crds stored-crds
	$(UV) -e '.[dev,plot,bench]'
	$(BIN)/python bench/convergence.py --write-docs --profile build/profile --py-spy $(BIN)/py-spy
	$(BIN)/python bench/startup.py --runs 31
	KVTIER_FULL=1 $(BIN)/pytest -s tests/e2e/test_faults.py tests/e2e/test_bad_input_corpus.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build dist
