#!/usr/bin/env bash
# Builds the Python plugins into components with componentize-py (pinned in requirements.txt,
# installed once into a version-keyed venv under $RECONHOST_CACHE) and writes them to
# <out-dir>/<name>.wasm. Each component is cached by a hash of everything it is built from (its
# sources, the SDK, the WIT contract, the toolchain version, this script): an unchanged plugin is
# copied, not rebuilt.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: build.sh <out-dir>}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cache=${RECONHOST_CACHE:-$HOME/.cache/reconhost}
version=$(sed -n 's/^componentize-py==//p' "$here/requirements.txt")
venv="$cache/python/componentize-py-$version"
wit=wit/reconhost-plugin@0.2.0

if [ ! -x "$venv/bin/componentize-py" ]; then
  echo "installing componentize-py $version into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt"
fi
mkdir -p "$cache/plugins"

# place <component> <name>: writes it to <out-dir>/<name>.wasm by a rename, so that a host or a
# test reading the file meanwhile sees the old component or the new one, never half of one.
place() {
  cp "$1" "$out/.$2.wasm.$$"
  mv -f "$out/.$2.wasm.$$" "$out/$2.wasm"
}

# build <name> <directory of app.py, relative to the repository>
build() {
  local name=$1 dir=$2 hash cached start
  hash=$(
    cd "$root"
    find "$dir" plugins/python/reconhost "$wit" -type f \
      -not -name 'test_*.py' -not -name '*.pyc' -not -path '*/__pycache__/*' -not -path '*/.pytest_cache/*' |
      LC_ALL=C sort | xargs sha256sum
    echo "componentize-py $version"
    sha256sum plugins/python/build.sh
  )
  hash=$(sha256sum <<<"$hash" | cut -c1-16)
  cached="$cache/plugins/$name-$hash.wasm"
  if [ -f "$cached" ]; then
    place "$cached" "$name"
    echo "$name: cached ($(($(stat -c %s "$cached") / 1024)) KiB)" >&2
    return
  fi
  start=$SECONDS
  if ! "$venv/bin/componentize-py" -d "$root/$wit" -w reconciler componentize app \
    -p "$root/$dir" -p "$here" -o "$cached.tmp.$$" >"$cached.log.$$" 2>&1; then
    cat "$cached.log.$$" >&2
    rm -f "$cached.tmp.$$" "$cached.log.$$"
    echo "building $name from $dir failed" >&2
    exit 1
  fi
  # Two builds at once (another checkout sharing the cache) each write their own temporary file.
  mv -f "$cached.tmp.$$" "$cached"
  mv -f "$cached.log.$$" "$cached.log"
  place "$cached" "$name"
  echo "$name: built in $((SECONDS - start)) s ($(($(stat -c %s "$cached") / 1024)) KiB)" >&2
}

build webapp-python plugins/python/examples/webapp
build py-misbehave plugins/python/test-plugins/misbehave
build py-noop plugins/python/test-plugins/noop
