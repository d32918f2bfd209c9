#!/usr/bin/env bash
# Builds the TypeScript plugins into components (build.mjs: esbuild, then componentize-js, all
# pinned in package-lock.json and installed by `npm ci`) and writes them to <out-dir>/<name>.wasm.
# Each component is cached under $RECONHOST_CACHE by a hash of everything it is built from (the
# sources, the SDK, the WIT contract, the lockfile, the build scripts): an unchanged plugin is
# copied, not rebuilt.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: build.sh <out-dir>}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cache=${RECONHOST_CACHE:-$HOME/.cache/reconhost}
wit=wit/reconhost-plugin@0.2.0
mkdir -p "$cache/plugins"

# The toolchain is installed only when a plugin must actually be built.
toolchain() {
  local stamp="$here/node_modules/.reconhost-lock"
  if [ -f "$stamp" ] && cmp -s "$stamp" "$here/package-lock.json"; then return; fi
  echo "installing the JavaScript toolchain (npm ci)" >&2
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error >&2)
  cp "$here/package-lock.json" "$stamp"
}

# place <component> <name>: writes it to <out-dir>/<name>.wasm by a rename, so that a host or a
# test reading the file meanwhile sees the old component or the new one, never half of one.
place() {
  cp "$1" "$out/.$2.wasm.$$"
  mv -f "$out/.$2.wasm.$$" "$out/$2.wasm"
}

# build <name> <plugin .ts, relative to the repository>
build() {
  local name=$1 source=$2 hash cached start
  hash=$(
    cd "$root"
    find "$(dirname "$source")" plugins/js/sdk "$wit" -type f -not -name '*.test.ts' | LC_ALL=C sort | xargs sha256sum
    sha256sum plugins/js/package-lock.json plugins/js/build.mjs plugins/js/build.sh
  )
  hash=$(sha256sum <<<"$hash" | cut -c1-16)
  cached="$cache/plugins/$name-$hash.wasm"
  if [ -f "$cached" ]; then
    place "$cached" "$name"
    echo "$name: cached ($(($(stat -c %s "$cached") / 1024)) KiB)" >&2
    return
  fi
  toolchain
  start=$SECONDS
  if ! (cd "$here" && node build.mjs "$root/$source" "$root/$wit" "$cached.tmp.$$") >"$cached.log.$$" 2>&1; then
    cat "$cached.log.$$" >&2
    rm -f "$cached.tmp.$$" "$cached.log.$$"
    echo "building $name from $source failed" >&2
    exit 1
  fi
  # Two builds at once (another checkout sharing the cache) each write their own temporary file.
  mv -f "$cached.tmp.$$" "$cached"
  mv -f "$cached.log.$$" "$cached.log"
  place "$cached" "$name"
  echo "$name: built in $((SECONDS - start)) s ($(($(stat -c %s "$cached") / 1024)) KiB)" >&2
}

build webapp-ts plugins/js/examples/webapp/webapp.ts
build js-misbehave plugins/js/test-plugins/misbehave/misbehave.ts
build js-noop plugins/js/test-plugins/noop/noop.ts
