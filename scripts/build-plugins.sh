#!/usr/bin/env bash
# Builds every plugin in plugins/ and puts each component at <target dir>/plugins/<name>.wasm,
# where host tests and `make run` load them from: the Rust SDK examples and test plugins (for
# wasm32-wasip2), then the Python and TypeScript ones (plugins/python/build.sh,
# plugins/js/build.sh: pinned toolchains, outputs cached by their inputs).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
out="$target/plugins"
mkdir -p "$out"
cd "$root/plugins"
CARGO_TARGET_DIR="$target" cargo build --release --target wasm32-wasip2 --workspace --lib "$@"
# Cargo runs LTO only for a crate whose every crate type can take it: a plugin that is also an
# rlib (webapp, which the host's benchmarks link natively) gets none, and a component a quarter
# larger. Those are built once more as cdylibs alone, in a target directory of their own (the
# same output name would make the two builds undo each other).
for manifest in examples/*/Cargo.toml test-plugins/*/Cargo.toml; do
  grep -q '"rlib"' "$manifest" || continue
  name=$(sed -n 's/^name = "\(.*\)"/\1/p' "$manifest" | head -1)
  cargo rustc --quiet --release --target wasm32-wasip2 -p "$name" --lib --crate-type cdylib \
    --target-dir "$target/plugins-lto" "$@"
done
for manifest in examples/*/Cargo.toml test-plugins/*/Cargo.toml; do
  name=$(sed -n 's/^name = "\(.*\)"/\1/p' "$manifest" | head -1)
  file="$target/wasm32-wasip2/release/${name//-/_}.wasm"
  if grep -q '"rlib"' "$manifest"; then
    file="$target/plugins-lto/wasm32-wasip2/release/${name//-/_}.wasm"
  fi
  [ -f "$file" ] || { echo "no component for $name at $file" >&2; exit 1; }
  cp "$file" "$out/$name.wasm"
done
bash "$root/plugins/python/build.sh" "$out"
bash "$root/plugins/js/build.sh" "$out"
echo "built $(ls "$out" | wc -l) plugins into $out" >&2
