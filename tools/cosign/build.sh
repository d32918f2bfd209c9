#!/usr/bin/env bash
# Builds cosign from the Go module proxy into a version-keyed cache outside the clone; a binary
# already there is not rebuilt. The tests sign plugin artifacts with it (`cosign sign --key`,
# no transparency log: nothing here reaches the internet) to check that the host verifies what
# the real tool writes.
#
# Prints the cache directory as its last line.
set -euo pipefail

COSIGN_VERSION=v2.6.5

cache=${RECONHOST_CACHE:-$HOME/.cache/reconhost}
out="$cache/cosign/$COSIGN_VERSION"
mkdir -p "$out"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
if [ ! -x "$out/cosign" ]; then
  start=$SECONDS
  echo "building cosign $COSIGN_VERSION" >&2
  GOBIN="$out/.bin" go install -trimpath -ldflags "-s -w" \
    "github.com/sigstore/cosign/v2/cmd/cosign@$COSIGN_VERSION"
  mv "$out/.bin/cosign" "$out/cosign" && rmdir "$out/.bin"   # rename last: never a half-built cosign
  echo "built cosign in $((SECONDS - start))s" >&2
fi
echo "$out"
