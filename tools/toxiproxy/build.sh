#!/usr/bin/env bash
# Builds toxiproxy's server, the fault proxy the fault-injection suite puts between a host and
# the API server, from the Go module proxy into a version-keyed cache outside the clone; a
# binary already there is not rebuilt.
#
# Prints the cache directory as its last line.
set -euo pipefail

TOXIPROXY_VERSION=v2.5.0

cache=${RECONHOST_CACHE:-$HOME/.cache/reconhost}
out="$cache/toxiproxy/$TOXIPROXY_VERSION"
mkdir -p "$out"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
if [ ! -x "$out/toxiproxy-server" ]; then
  start=$SECONDS
  echo "building toxiproxy $TOXIPROXY_VERSION" >&2
  GOBIN="$out/.bin" go install -trimpath -ldflags "-s -w" \
    "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION"
  mv "$out/.bin/server" "$out/toxiproxy-server" && rmdir "$out/.bin"   # rename last: never a half-built binary
  echo "built toxiproxy in $((SECONDS - start))s" >&2
fi
echo "$out"
