#!/usr/bin/env bash
# Builds build/{{name}}.wasm with componentize-py (pinned in requirements.txt, installed once into
# a venv under ~/.cache/reconhost).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
version=$(sed -n 's/^componentize-py==//p' requirements.txt)
venv="${RECONHOST_CACHE:-$HOME/.cache/reconhost}/python/componentize-py-$version"
if [ ! -x "$venv/bin/componentize-py" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r requirements.txt
fi
mkdir -p build
"$venv/bin/componentize-py" -d wit/reconhost-plugin@0.2.0 -w reconciler componentize app -p . -o build/{{name}}.wasm
