#!/usr/bin/env bash
# Builds every Go-built tool from one Go module (go.mod here) into a cache outside the clone, keyed
# by the Kubernetes release: the local control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl) and kwok, which `reconhost-cluster up` runs
# for `make run` and the tests; helm (the chart's tests); the distribution registry (the harness
# starts it on loopback) and oras, the independent client that checks what reconhost pushes and
# pulls; toxiproxy's server (the fault suite); cosign (the tests sign plugins with the real tool).
# A binary already in the cache is not rebuilt, so a warm machine pays nothing; a cold one pays the
# full compile once.
#
#   tools/k8s/build.sh [TOOL...]   # the named tools only (`helm` for `make manifests`); default all
#
# Prints the cache directory as its last line.
set -euo pipefail

# Kubernetes release; also in go.mod (with a replace per staging module), in
# tests/src/binaries.rs and in the k8s-openapi feature of the root Cargo.toml. etcd comes at the
# version this release pins (go.mod: go.etcd.io/etcd/server/v3 v3.7.0).
K8S_VERSION=v1.37.2
# The other tools are `tool` directives of go.mod, built with the control plane in one
# `go build`: one module resolves one version of every library they share (the Kubernetes client
# libraries, gRPC, OpenTelemetry, the OCI libraries) and each is compiled once. Built apart
# (`go install tool@version`), each compiled its own versions in full: four of k8s.io/api,
# apimachinery and client-go. Each version is also in go.mod; the build stops if they differ.
# kwok provides fake nodes (pods on them report Running and Ready), so Deployments progress in
# `make run` without a kubelet.
KWOK_VERSION=v0.8.0
HELM_VERSION=v4.3.2
DISTRIBUTION_VERSION=v3.1.2
ORAS_VERSION=v1.3.6
TOXIPROXY_VERSION=v2.5.0
COSIGN_VERSION=v2.6.5

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
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor \
 -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION \
 -X github.com/Shopify/toxiproxy/v2.Version=$TOXIPROXY_VERSION"

# What is missing is built by one `go build`, so packages compile once for all of them and one
# binary links while another still compiles.
want=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm registry oras
  toxiproxy-server cosign)
declare -A package=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
  [kwok]=sigs.k8s.io/kwok/cmd/kwok
  [helm]=helm.sh/helm/v4/cmd/helm
  [registry]=github.com/distribution/distribution/v3/cmd/registry
  [oras]=oras.land/oras/cmd/oras
  [toxiproxy-server]=github.com/Shopify/toxiproxy/v2/cmd/server
  [cosign]=github.com/sigstore/cosign/v2/cmd/cosign
)
if (($#)); then
  for name in "$@"; do
    [ -n "${package[$name]:-}" ] || { echo "no tool $name here; there are: ${want[*]}" >&2; exit 2; }
  done
  want=("$@")
fi
# The directory is keyed by the Kubernetes release alone; a stamp of go.mod catches a change to
# another tool's version (or any other pin): every tool built from an older go.mod is removed,
# and built again when asked for.
stamp=$(sha256sum "$here/go.mod" | cut -c1-16)
if [ "$(cat "$out/.go.mod.sha256" 2>/dev/null)" != "$stamp" ]; then
  for name in "${!package[@]}" kwok-stages.yaml; do rm -f "$out/$name"; done
fi
missing=()
for name in "${want[@]}"; do [ -x "$out/$name" ] || missing+=("$name"); done
if ((${#missing[@]})); then
  for pin in "sigs.k8s.io/kwok $KWOK_VERSION" "helm.sh/helm/v4 $HELM_VERSION" \
             "github.com/distribution/distribution/v3 $DISTRIBUTION_VERSION" \
             "oras.land/oras $ORAS_VERSION" "github.com/Shopify/toxiproxy/v2 $TOXIPROXY_VERSION" \
             "github.com/sigstore/cosign/v2 $COSIGN_VERSION"; do
    read -r module version <<<"$pin"
    pinned=$(cd "$here" && go list -m -f '{{.Version}}' "$module")
    if [ "$pinned" != "$version" ]; then
      echo "tools/k8s/go.mod has $module $pinned, build.sh says $version: change both" >&2
      exit 1
    fi
  done
  start=$SECONDS
  echo "building ${missing[*]}" >&2
  staging="$out/.staging"
  rm -rf "$staging" && mkdir -p "$staging"
  # The -X flags name Kubernetes' version variables, helm's (without it `helm version` prints only
  # the minor version) and toxiproxy's; a binary without the variable ignores its flag.
  flags=(-trimpath -tags selinux,notest,grpcnotrace -ldflags "$ldflags")
  # go build names a binary after its package path's last element, without a major-version
  # suffix: etcd's is "server", and so is toxiproxy's, which one `go build -o dir/` would write
  # over etcd's without a word. toxiproxy's server gets a `go build` of its own after the others,
  # where every package it shares with them is already compiled.
  together=()
  for name in "${missing[@]}"; do
    [ "$name" = toxiproxy-server ] || together+=("${package[$name]}")
  done
  (
    cd "$here"
    if ((${#together[@]})); then go build "${flags[@]}" -o "$staging/" "${together[@]}"; fi
    if [[ " ${missing[*]} " == *" toxiproxy-server "* ]]; then
      go build "${flags[@]}" -o "$staging/toxiproxy-server" "${package[toxiproxy-server]}"
    fi
  )
  if [ -x "$staging/server" ]; then mv "$staging/server" "$staging/etcd"; fi
  for name in "${missing[@]}"; do
    mv "$staging/$name" "$out/$name"   # rename last so an interrupted build never looks finished
  done
  rm -rf "$staging"
  echo "$stamp" >"$out/.go.mod.sha256"
  echo "built ${missing[*]} in $((SECONDS - start))s" >&2
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
