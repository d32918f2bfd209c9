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
# The checkout the harness installs CRDs from (a target directory may be shared by several).
export RECONHOST_ROOT := $(CURDIR)
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
# The image: a static release build (glibc, crt-static) and an OCI layout written by a script.
# `make test` builds and runs the tests with exactly these settings, so the image's binary and
# every dependency are compiled once for both (a debug build beside it would compile them again).
STATIC_TARGET := x86_64-unknown-linux-gnu
STATIC_CARGO_ENV := RUSTFLAGS="-C target-feature=+crt-static"
STATIC_CARGO := $(STATIC_CARGO_ENV) $(CARGO)
STATIC_FLAGS := --release --locked --target $(STATIC_TARGET)
STATIC_DIR := $(TARGET_DIR)/$(STATIC_TARGET)/release
STATIC := $(STATIC_DIR)/reconhost
export RECONHOST_IMAGE_DIR := $(TARGET_DIR)/image
# One test thread more than the machine has cores: the integration tests wait on the API server
# and on each other (cluster-wide suites take a lock) a third of the time, so with one per core
# the cores sat idle: 598 s at 1.26 cores busy against 480 s with three threads on two cores
# (README, *CI, cold and warm*). `make test TEST_THREADS=2` runs them as before.
TEST_THREADS ?= $(shell echo $$(( $$(nproc) + 1 )))
EXAMPLE_CRATES := -p reconhost-sdk -p webapp -p configmap-generator -p merged-config -p archiver -p namespace-defaults

.PHONY: run test test-faults build kubectl-plugin test-build plugins bench bench-converge bench-fleet bench-scale bench-heap bench-install bench-rollout bench-languages bench-shard bench-shard-heap image tools k8s crds manifests lint cluster-up cluster-down cluster-status check fmt clean


## run: the demo: control plane and registry up (built on first use), the example plugins installed through ReconcilePlugins, demo parents, the host reconciling them
run: tools build
	@RECONHOST=$(RECONHOST) CLUSTER=$(CLUSTER) PLUGIN_DIR=$(PLUGIN_DIR) bash scripts/demo.sh

## test: build everything (the image too), start a private control plane, run every test, stop it
test: tools test-build image
	cd plugins && $(CARGO) test $(EXAMPLE_CRATES)
	bash plugins/python/test.sh
	bash plugins/js/test.sh
	$(STATIC_CARGO_ENV) $(STATIC_DIR)/reconhost-cluster exec --name test -- $(CARGO) test $(STATIC_FLAGS) --workspace --no-fail-fast -- --test-threads $(TEST_THREADS)

## build: the plugins, the host, the harness and the test binaries (debug, for `make run` and people)
build: plugins
	$(CARGO) build --workspace --bins --tests
	ln -sf reconhost $(TARGET_DIR)/debug/kubectl-reconhost

## kubectl-plugin: kubectl-reconhost beside the host binary: with that directory on PATH, `kubectl reconhost trace ...`
kubectl-plugin:
	$(CARGO) build -p reconhost --bin reconhost
	ln -sf reconhost $(TARGET_DIR)/debug/kubectl-reconhost
	@echo "export PATH=$(TARGET_DIR)/debug:\$$PATH   # then: kubectl reconhost status"

## test-build: the plugins and, in the image's static release build, the host, the harness and the test binaries
test-build: plugins
	$(STATIC_CARGO) build $(STATIC_FLAGS) --workspace --bins --tests

## plugins: every example and test plugin (Rust, Python, TypeScript), as <target>/plugins/<name>.wasm
plugins:
	@bash scripts/build-plugins.sh

## bench: one reconcile through the runtime vs native vs HTTP, and compile/load times
bench: plugins
	$(CARGO) bench -p reconhost --bench reconcile

## bench-converge: 1000 webapp parents on a private control plane: time, API writes, host memory
bench-converge: tools plugins
	$(CARGO) build --release -p reconhost-tests --bin reconhost-cluster
	$(TARGET_DIR)/release/reconhost-cluster exec --name bench -- $(CARGO) bench -p reconhost --bench converge

## tools: the Go-built tools, once, from one Go module into a cache keyed by the Kubernetes release: the control plane, kwok (`reconhost-cluster up` runs kube-scheduler and kwok), helm, the registry and oras, toxiproxy, cosign
tools:
	@bash tools/k8s/build.sh >/dev/null

## image: the container image as an OCI layout in target/image/oci (reconhost:<version>), and the Containerfile's build context
# The binary is the one the tests ran and the benchmarks measured: `make test-build`'s, whose
# features the test binaries' dev-dependencies join (tokio's `test-util`). Built alone, the host
# would differ in those and compile about 40 crates a second time.
image:
	$(STATIC_CARGO) build $(STATIC_FLAGS) --workspace --bins --tests
	rm -rf $(RECONHOST_IMAGE_DIR)
	mkdir -p $(RECONHOST_IMAGE_DIR)
	# Stripped here rather than by the compiler, so the tests' binaries (same build) keep symbols.
	strip --strip-all -o $(RECONHOST_IMAGE_DIR)/reconhost $(STATIC)
	RECONHOST_VERSION=$(VERSION) python3 scripts/mkimage.py $(RECONHOST_IMAGE_DIR)/reconhost /etc/ssl/certs/ca-certificates.crt $(RECONHOST_IMAGE_DIR)/oci reconhost:$(VERSION) $(RECONHOST_IMAGE_DIR)/context

## bench-fleet: 50 plugins in one host beside 50 kube-runtime operators: memory, connections, idle CPU, convergence
bench-fleet: tools plugins
	$(CARGO) build --release -p reconhost-tests --bin reconhost-cluster
	$(TARGET_DIR)/release/reconhost-cluster exec --name bench -- $(CARGO) bench -p reconhost --bench fleet

## bench-scale: 10,000 webapp parents, one host (the image's static build): convergence, CPU per 1,000 reconciles, memory per cached object, resync, latency
bench-scale: tools plugins
	$(STATIC_CARGO) build $(STATIC_FLAGS) -p reconhost-tests --bin reconhost-cluster
	$(STATIC_CARGO_ENV) $(STATIC_DIR)/reconhost-cluster exec --name bench -- $(CARGO) bench --target $(STATIC_TARGET) -p reconhost --bench scale

## bench-heap: bench-scale, then the restart once more with a heap-profiled host (dhat): where each cached object's bytes are
bench-heap: tools plugins
	$(STATIC_CARGO) build $(STATIC_FLAGS) -p reconhost --bin reconhost --features heap-profile \
	  --config 'profile.release.package.reconhost.debug="line-tables-only"'
	cp $(STATIC_DIR)/reconhost $(STATIC_DIR)/reconhost-heap
	$(STATIC_CARGO) build $(STATIC_FLAGS) -p reconhost-tests --bin reconhost-cluster
	SCALE_HEAP_HOST=$(STATIC_DIR)/reconhost-heap $(STATIC_CARGO_ENV) $(STATIC_DIR)/reconhost-cluster exec --name bench -- $(CARGO) bench --target $(STATIC_TARGET) -p reconhost --bench scale

## bench-install: time from a ReconcilePlugin to the first reconcile (cold, cached) and an upgrade under load
bench-install: tools plugins
	$(CARGO) build --release -p reconhost-tests --bin reconhost-cluster
	$(TARGET_DIR)/release/reconhost-cluster exec --name bench -- $(CARGO) bench -p reconhost --bench install

## bench-rollout: host CPU per reconcile with and without a shadow revision; a bad candidate's time to rollback
bench-rollout: tools plugins
	$(CARGO) build --release -p reconhost-tests --bin reconhost-cluster
	$(TARGET_DIR)/release/reconhost-cluster exec --name bench -- $(CARGO) bench -p reconhost --bench rollout

## bench-shard: 3,000 webapp parents under 1, 2 and 3 sharded replicas, each held to one CPU quota: throughput, CPU per 1,000 reconciles, memory per replica, the pause of moved parents when one is killed and when one joins (SHARD_BESIDE=1: one replica and three side by side, for the throughput ratio)
bench-shard: tools plugins
	$(CARGO) build --release -p reconhost-tests --bin reconhost-cluster
	$(TARGET_DIR)/release/reconhost-cluster exec --name benchshard -- $(CARGO) bench -p reconhost --bench shard

## bench-shard-heap: bench-shard's throughput runs with a heap-profiled host (dhat) at 200 millicores (dhat slows it several times): each replica's live heap at rest, by where the host allocated it
bench-shard-heap: tools plugins
	$(STATIC_CARGO) build $(STATIC_FLAGS) -p reconhost --bin reconhost --features heap-profile \
	  --config 'profile.release.package.reconhost.debug="line-tables-only"'
	cp $(STATIC_DIR)/reconhost $(STATIC_DIR)/reconhost-heap
	$(STATIC_CARGO) build $(STATIC_FLAGS) -p reconhost-tests --bin reconhost-cluster
	SHARD_HEAP_HOST=$(STATIC_DIR)/reconhost-heap SHARD_HANDOVER=0 SHARD_ROUNDS=1 \
	  SHARD_MILLICORES=$${SHARD_MILLICORES:-200} $(STATIC_CARGO_ENV) \
	  $(STATIC_DIR)/reconhost-cluster exec --name benchshardheap -- \
	  $(CARGO) bench --target $(STATIC_TARGET) -p reconhost --bench shard

## bench-tracing: 300 webapp parents under three hosts, tracing off, at full sampling and sampling nothing: host CPU per reconcile side by side, against the targets (3 %, 0.5 %)
# In `make test`'s static release build: it reuses that build, and measures the binary the image ships.
.PHONY: bench-tracing
bench-tracing: tools plugins
	$(STATIC_CARGO) build $(STATIC_FLAGS) -p reconhost-tests --bin reconhost-cluster
	$(STATIC_CARGO_ENV) $(STATIC_DIR)/reconhost-cluster exec --name benchtracing -- $(CARGO) bench --locked --target $(STATIC_TARGET) -p reconhost --bench tracing

## bench-pace: 2,000 webapp parents converged by the host beside a load generator making exactly its writes, in the same run (the image's static build): parents/s for both, the ratio against the target (>= 80 %)
.PHONY: bench-pace
bench-pace: tools plugins
	$(STATIC_CARGO) build $(STATIC_FLAGS) -p reconhost-tests --bin reconhost-cluster
	$(STATIC_CARGO_ENV) $(STATIC_DIR)/reconhost-cluster exec --name bench -- $(CARGO) bench --target $(STATIC_TARGET) -p reconhost --bench pace

## bench-rest: 3,000 webapp parents served through a ReconcilePlugin, converged and left alone: the host's CPU per minute at rest (REST_BASELINE=<another build's reconhost>: that build too, one host at a time)
.PHONY: bench-rest
bench-rest: tools plugins
	$(STATIC_CARGO) build $(STATIC_FLAGS) -p reconhost-tests --bin reconhost-cluster
	$(STATIC_CARGO_ENV) $(STATIC_DIR)/reconhost-cluster exec --name benchrest -- $(CARGO) bench --locked --target $(STATIC_TARGET) -p reconhost --bench rest

## bench-languages: webapp in Rust, Python and TypeScript side by side: size, compile, cached load, one reconcile
bench-languages: plugins
	$(CARGO) bench -p reconhost --bench languages

## test-faults: the fault-injection suite alone (each scenario starts its own control plane); prints recovery times
test-faults: tools plugins
	$(STATIC_CARGO) test $(STATIC_FLAGS) -p reconhost --test all -- faults:: --nocapture

## k8s: build the control plane alone if missing (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok); `make tools` builds the rest too
k8s:
	@bash tools/k8s/build.sh etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok >/dev/null

## crds: regenerate deploy/crds/ and the chart's crds/ from the Rust types (a test fails when they drift)
crds:
	$(CARGO) run -q -p reconhost --bin reconhost -- crds > deploy/crds/reconcileplugins.reconhost.dev.yaml
	cp deploy/crds/reconcileplugins.reconhost.dev.yaml deploy/charts/reconhost/crds/

## manifests: regenerate deploy/manifests/reconhost.yaml from the chart (a test fails when it drifts)
manifests: crds
	bash scripts/manifests.sh > deploy/manifests/reconhost.yaml

## lint: clippy on both workspaces, rustfmt, and the docs, with warnings as errors
# In the profiles, targets and flags the builds use (`make test-build`, `make plugins`): the
# build scripts' runs (jemalloc's and ring's C, Cranelift's generated code) and the proc-macros
# (wit-bindgen's among them) are then those the builds made, not a second set for dev.
lint:
	$(STATIC_CARGO) clippy $(STATIC_FLAGS) --workspace --all-targets -- -D warnings
	cd plugins && CARGO_TARGET_DIR=$(TARGET_DIR) $(CARGO) clippy --release --workspace --all-targets --target wasm32-wasip2 -- -D warnings
	$(CARGO) fmt --all --check
	cd plugins && $(CARGO) fmt --all --check
	RUSTDOCFLAGS="-D warnings" $(STATIC_CARGO) doc $(STATIC_FLAGS) --workspace --no-deps --document-private-items

## cluster-up: start the control plane in the background; the last line is KUBECONFIG=<path>
cluster-up: tools
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
