#!/usr/bin/env bash
# Runs the Python SDK's and plugins' unit tests natively (no wasm), with pytest and PyYAML pinned
# in requirements-test.txt and installed once into a venv under $RECONHOST_CACHE.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${RECONHOST_CACHE:-$HOME/.cache/reconhost}
venv="$cache/python/test-$(sha256sum "$here/requirements-test.txt" | cut -c1-12)"
if [ ! -x "$venv/bin/pytest" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements-test.txt"
fi
cd "$here"
# Each directory is its own rootdir-relative package of tests; the SDK is found on the path.
PYTHONPATH="$here" PYTHONDONTWRITEBYTECODE=1 "$venv/bin/pytest" -q -p no:cacheprovider \
  tests examples/webapp "$@"
