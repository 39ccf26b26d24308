#!/usr/bin/env bash
# Builds (via setup.sh) and runs every test. GPU tests (label "gpu") skip themselves without CUDA.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
"$repo/scripts/setup.sh"
build=${PINFEED_BUILD_DIR:-$repo/build}
cd "$build"
ctest --output-on-failure -j"$(nproc)" "$@"
