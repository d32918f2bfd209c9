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

.PHONY: run test build plugins bench k8s cluster-up cluster-down cluster-status check fmt clean

## run: start the local control plane (building it on first use) and run the host against it
run: k8s build
	@kubeconfig=$$($(CLUSTER) up | sed -n 's/^KUBECONFIG=//p'); \
	echo "control plane: KUBECONFIG=$$kubeconfig (make cluster-down stops it)" >&2; \
	exec $(RECONHOST) run --kubeconfig "$$kubeconfig"

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
