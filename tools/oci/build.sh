#!/usr/bin/env bash
# Builds the OCI tools the tests use from the Go module proxy into a version-keyed cache outside
# the clone: the distribution registry (the reference implementation; crane's in-memory registry
# answers a finished blob upload without the Location header the spec requires and oci-client
# needs), which the harness starts on loopback, and oras, the independent client that checks
# what reconhost pushes and pulls. A binary already in the cache is not rebuilt.
#
# Prints the cache directory as its last line.
set -euo pipefail

DISTRIBUTION_VERSION=v3.1.2
ORAS_VERSION=v1.3.6

cache=${RECONHOST_CACHE:-$HOME/.cache/reconhost}
out="$cache/oci/registry-$DISTRIBUTION_VERSION-oras-$ORAS_VERSION"
mkdir -p "$out"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false

install() { # name package@version
  local name=$1 pkg=$2
  if [ -x "$out/$name" ]; then return; fi
  local start=$SECONDS tmp="$out/.$name-bin"
  echo "building $name ($pkg)" >&2
  GOBIN="$tmp" go install -trimpath -ldflags "-s -w" "$pkg"
  mv "$tmp/$name" "$out/$name" && rmdir "$tmp"   # rename last: an interrupted build never looks finished
  echo "built $name in $((SECONDS - start))s" >&2
}

install registry "github.com/distribution/distribution/v3/cmd/registry@$DISTRIBUTION_VERSION"
install oras "oras.land/oras/cmd/oras@$ORAS_VERSION"

echo "$out"
