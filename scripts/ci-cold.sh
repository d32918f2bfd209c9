#!/usr/bin/env bash
# Measures a cold CI run honestly: `.ci/run` on a fresh clone of a commit (HEAD by default), with
# every build cache it fills pointed at empty directories — the tools cache ($RECONHOST_CACHE:
# the Go-built tools, the Python and TypeScript toolchains), Cargo's target directory and Go's
# build cache. Downloads stay cached (the crate registry, the Go module cache, npm's cache,
# Debian's packages): the registries are local mirrors here, so fetching them
# again measures nothing of ours.
#
#   scripts/ci-cold.sh [COMMIT]        # prints the phase timings and the total as its last lines
#
# Everything goes to a work directory under $RECONHOST_COLD_ROOT (default /var/tmp/reconhost-cold),
# removed at the end unless RECONHOST_KEEP_COLD=1; the full log is kept beside it as
# <root>/<commit>-<date>.log. Nothing else may run on the machine meanwhile: the figures are
# wall-clock times on two cores.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
commit=$(git -C "$root" rev-parse "${1:-HEAD}")
base=${RECONHOST_COLD_ROOT:-/var/tmp/reconhost-cold}
work="$base/${commit:0:12}"
log="$base/${commit:0:12}-$(date -u +%Y%m%dT%H%M%SZ).log"

rm -rf "$work"
mkdir -p "$work"
cleanup() { [ "${RECONHOST_KEEP_COLD:-}" = 1 ] || rm -rf "$work"; }
trap cleanup EXIT

git clone --quiet --no-checkout "$root" "$work/clone"
git -C "$work/clone" checkout --quiet "$commit"

echo "cold run of ${commit:0:12} in $work; log: $log" >&2
start=$SECONDS
status=0
(
  cd "$work/clone"
  # The same environment CI gives .ci/run, with the caches moved to empty directories.
  env CI=true \
    RECONHOST_CACHE="$work/cache" \
    CARGO_TARGET_DIR="$work/target" \
    GOCACHE="$work/go-build" \
    bash .ci/run </dev/null
) >"$log" 2>&1 || status=$?
total=$((SECONDS - start))

sed -n '/^==> phase timings/,$p' "$log"
printf 'cold run of %s: %s after %dm%02ds\n' "${commit:0:12}" \
  "$([ $status = 0 ] && echo passed || echo "FAILED (exit $status)")" $((total / 60)) $((total % 60))
exit $status
