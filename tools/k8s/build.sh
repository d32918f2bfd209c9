#!/usr/bin/env bash
# Builds the local control plane from the Kubernetes Go modules into a version-keyed cache outside
# the clone: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok
# (`reconhost-cluster up`, which `make run` and the harness tests use, runs the scheduler and a
# fake node). A binary already in the cache is not rebuilt, so a warm machine pays nothing; a cold
# one pays the full compile once.
#
# Prints the cache directory as its last line.
set -euo pipefail

# Kubernetes release; also in go.mod (with a replace per staging module), in
# tests/src/binaries.rs and in the k8s-openapi feature of the root Cargo.toml. etcd comes at the
# version this release pins (go.mod's tool directive: go.etcd.io/etcd/server/v3 v3.6.5).
K8S_VERSION=v1.35.4
# kwok provides fake nodes (pods on them report Running and Ready), so Deployments progress in
# `make run` without a kubelet; its newest tag that builds with Go 1.26.
KWOK_VERSION=v0.8.0

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${RECONHOST_CACHE:-$HOME/.cache/reconhost}
out="$cache/k8s/$K8S_VERSION"
mkdir -p "$out"

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z \
 -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION \
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"

# What is missing is built by one `go build`, so packages compile once for all of them and one
# binary links while another still compiles.
want=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)
declare -A package=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
)
missing=()
for name in "${want[@]}"; do [ -x "$out/$name" ] || missing+=("$name"); done
if ((${#missing[@]})); then
  start=$SECONDS
  echo "building ${missing[*]}" >&2
  staging="$out/.staging"
  rm -rf "$staging" && mkdir -p "$staging"
  # The -X flags name Kubernetes' version variables; etcd has none of them, so they are inert there.
  (cd "$here" && go build -trimpath -tags selinux,notest,grpcnotrace -ldflags "$ldflags" \
     -o "$staging/" $(for name in "${missing[@]}"; do echo "${package[$name]}"; done))
  # go build names a binary after its package path, without a major-version suffix: etcd's is
  # "server".
  if [ -x "$staging/server" ]; then mv "$staging/server" "$staging/etcd"; fi
  for name in "${missing[@]}"; do
    mv "$staging/$name" "$out/$name"   # rename last so an interrupted build never looks finished
  done
  rm -rf "$staging"
  echo "built ${missing[*]} in $((SECONDS - start))s" >&2
fi

if [ ! -x "$out/kwok" ]; then
  # kwok is its own module with no replace directives; building it inside ours would force our
  # Kubernetes versions on it.
  start=$SECONDS
  echo "building kwok $KWOK_VERSION" >&2
  GOBIN="$out/.kwok-bin" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  mv "$out/.kwok-bin/kwok" "$out/kwok" && rmdir "$out/.kwok-bin"
  echo "built kwok in $((SECONDS - start))s" >&2
fi

if [ ! -f "$out/kwok-stages.yaml" ]; then
  # kwok ships its stage definitions (how a fake node becomes Ready, how a pod on it runs) in
  # its module but embeds none by default; the harness passes these with --config.
  kwok_dir=$(cd "$here" && go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  stages="$kwok_dir/kustomize/stage"
  for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo "---"; cat "$stages/$f"
  done > "$out/kwok-stages.yaml.tmp"
  mv "$out/kwok-stages.yaml.tmp" "$out/kwok-stages.yaml"
fi

echo "$out"
