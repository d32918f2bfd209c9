#!/usr/bin/env bash
# Builds every plugin in plugins/ (SDK examples and test plugins) for wasm32-wasip2 and copies
# each component to <target dir>/plugins/<crate name>.wasm, where host tests and `make run` load
# them from.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
out="$target/plugins"
mkdir -p "$out"
cd "$root/plugins"
CARGO_TARGET_DIR="$target" cargo build --release --target wasm32-wasip2 --workspace --lib "$@"
for manifest in examples/*/Cargo.toml test-plugins/*/Cargo.toml; do
  name=$(sed -n 's/^name = "\(.*\)"/\1/p' "$manifest" | head -1)
  file="$target/wasm32-wasip2/release/${name//-/_}.wasm"
  [ -f "$file" ] || { echo "no component for $name at $file" >&2; exit 1; }
  cp "$file" "$out/$name.wasm"
done
echo "built $(ls "$out" | wc -l) plugins into $out" >&2
