# reconhost — the two commands that matter: `make run` and `make test`.
# Everything is built on first use; the Kubernetes binaries go to a version-keyed cache in
# $HOME/.cache/reconhost and are never rebuilt while they are there.

SHELL := bash
CARGO ?= cargo
TARGET_DIR := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)
CLUSTER := $(TARGET_DIR)/debug/reconhost-cluster
RECONHOST := $(TARGET_DIR)/debug/reconhost

PLUGIN_DIR := $(TARGET_DIR)/plugins
export RECONHOST_PLUGIN_DIR := $(PLUGIN_DIR)
EXAMPLE_CRATES := -p reconhost-sdk -p webapp -p configmap-generator -p merged-config -p archiver

.PHONY: run test build plugins bench bench-converge k8s cluster-up cluster-down cluster-status check fmt clean

EXAMPLES := webapp configmap-generator merged-config archiver

## run: the demo: control plane up (built on first use), example CRDs and parents, the host reconciling them
run: k8s build
	@bin=$$(bash tools/k8s/build.sh); \
	kubeconfig=$$($(CLUSTER) up | sed -n 's/^KUBECONFIG=//p'); \
	kubectl() { "$$bin/kubectl" --kubeconfig "$$kubeconfig" "$$@"; }; \
	for crd in plugins/examples/*/crd.yaml; do kubectl apply --server-side -f "$$crd" >/dev/null; done; \
	kubectl wait --for=condition=Established crd --all --timeout=60s >/dev/null; \
	kubectl apply --server-side -f deploy/examples/demo.yaml; \
	echo "control plane: export KUBECONFIG=$$kubeconfig; kubectl is $$bin/kubectl (make cluster-down stops it)" >&2; \
	exec $(RECONHOST) run --kubeconfig "$$kubeconfig" $(foreach p,$(EXAMPLES),--plugin $(PLUGIN_DIR)/$(p).wasm)

## test: build everything, start a private control plane, run every test, stop it
test: k8s build
	cd plugins && $(CARGO) test $(EXAMPLE_CRATES)
	$(CLUSTER) exec --name test -- $(CARGO) test --workspace --no-fail-fast

## build: the plugins, the host, the harness and the test binaries
build: plugins
	$(CARGO) build --workspace --bins --tests

## plugins: every example and test plugin, as <target>/plugins/<name>.wasm
plugins:
	@bash scripts/build-plugins.sh

## bench: one reconcile through the runtime vs native vs HTTP, and compile/load times
bench: plugins
	$(CARGO) bench -p reconhost --bench reconcile

## bench-converge: 1000 webapp parents on a private control plane: time, API writes, host memory
bench-converge: k8s plugins
	$(CARGO) build --release -p reconhost-tests --bin reconhost-cluster
	$(TARGET_DIR)/release/reconhost-cluster exec --name bench -- $(CARGO) bench -p reconhost --bench converge

## k8s: build etcd, kube-apiserver, kube-controller-manager, kubectl and kwok if missing
k8s:
	@bash tools/k8s/build.sh >/dev/null

## cluster-up: start the control plane in the background; the last line is KUBECONFIG=<path>
cluster-up: k8s
	@$(CARGO) build -q -p reconhost-tests --bin reconhost-cluster
	@$(CLUSTER) up

## cluster-down: stop it
cluster-down:
	@$(CARGO) build -q -p reconhost-tests --bin reconhost-cluster
	@$(CLUSTER) down

cluster-status:
	@$(CLUSTER) status

## check: fast feedback while editing
check:
	$(CARGO) check --workspace --all-targets
	$(CARGO) fmt --all --check

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
