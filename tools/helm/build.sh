#!/usr/bin/env bash
# Builds helm from the Go module proxy into a version-keyed cache outside the clone (it has no
# replace directives, so `go install` works); a binary already there is not rebuilt. The version
# is stamped in, or `helm version` would print only the minor version.
#
# Prints the cache directory as its last line.
set -euo pipefail

HELM_VERSION=v4.3.2

cache=${RECONHOST_CACHE:-$HOME/.cache/reconhost}
out="$cache/helm/$HELM_VERSION"
mkdir -p "$out"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
if [ ! -x "$out/helm" ]; then
  start=$SECONDS
  echo "building helm $HELM_VERSION" >&2
  GOBIN="$out/.bin" go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
  mv "$out/.bin/helm" "$out/helm" && rmdir "$out/.bin"   # rename last: never a half-built helm
  echo "built helm in $((SECONDS - start))s" >&2
fi
echo "$out"
