#!/usr/bin/env bash
# Runs the Python SDK's and plugins' unit tests natively (no wasm), with pytest and PyYAML pinned
# in requirements-test.txt and installed once into a venv under $RECONHOST_CACHE. The SDK's
# conversions to the contract are tested against the very types componentize-py generates for
# it (pinned in requirements.txt, installed as build.sh installs it), written once per contract
# and toolchain version.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${RECONHOST_CACHE:-$HOME/.cache/reconhost}
wit=wit/reconhost-plugin@0.2.0
venv="$cache/python/test-$(sha256sum "$here/requirements-test.txt" | cut -c1-12)"
if [ ! -x "$venv/bin/pytest" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements-test.txt"
fi
version=$(sed -n 's/^componentize-py==//p' "$here/requirements.txt")
toolchain="$cache/python/componentize-py-$version"
if [ ! -x "$toolchain/bin/componentize-py" ]; then
  echo "installing componentize-py $version into $toolchain" >&2
  rm -rf "$toolchain"
  python3 -m venv "$toolchain"
  "$toolchain/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt"
fi
bindings="$cache/python/bindings-$version-$(cat "$root/$wit"/*.wit | sha256sum | cut -c1-12)"
if [ ! -f "$bindings/componentize_py_types.py" ]; then
  rm -rf "$bindings.tmp"
  "$toolchain/bin/componentize-py" -d "$root/$wit" -w reconciler bindings "$bindings.tmp" >/dev/null
  rm -rf "$bindings"
  mv "$bindings.tmp" "$bindings"
fi
cd "$here"
# Each directory is its own rootdir-relative package of tests; the SDK is found on the path.
RECONHOST_WIT_BINDINGS="$bindings" PYTHONPATH="$here" PYTHONDONTWRITEBYTECODE=1 \
  "$venv/bin/pytest" -q -p no:cacheprovider tests examples/webapp "$@"
