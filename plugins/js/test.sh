#!/usr/bin/env bash
# Type-checks the TypeScript SDK and plugins (strict) and runs their unit tests natively with
# node's test runner: tsc compiles to dist/, node --test runs the compiled *.test.js.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
stamp=node_modules/.reconhost-lock
if ! { [ -f "$stamp" ] && cmp -s "$stamp" package-lock.json; }; then
  npm ci --no-audit --no-fund --loglevel=error >&2
  cp package-lock.json "$stamp"
fi
rm -rf dist
node_modules/.bin/tsc -p .
node --test $(find dist -name '*.test.js' | sort) "$@"
