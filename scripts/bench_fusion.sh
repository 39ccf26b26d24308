#!/usr/bin/env bash
# Whether NVIDIA's MLPerf form of the convolution + BatchNorm fusions would pay over pinfeed's fp16 step on this
# GPU (docs/training-step.md#the-cudnn-frontend-fusions): builds benchmarks/bench_conv_bn_fusion.cu against the cuDNN
# frontend's headers and runs it. Writes OUT_DIR/fusion.json (every layer's times), OUT_DIR/fusion.txt (the
# program's table) and OUT_DIR/fusion.md (the page's tables, by scripts/fusion_table.py).
#   usage: scripts/bench_fusion.sh OUT_DIR
#   PINFEED_BUILD_DIR               build folder (default <repo>/build, made by setup.sh if missing)
#   PINFEED_CUDNN_FRONTEND_INCLUDE  the frontend's include/ (default: the one the build found, the
#                                   nvidia-cudnn-frontend wheel's that scripts/setup.sh installs)
#   BATCH PLANS                     batch (default 256) and plans tried per graph (default 8)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/bench_fusion.sh OUT_DIR}
mkdir -p "$out"
build=${PINFEED_BUILD_DIR:-$repo/build}
[ -f "$build/build.ninja" ] || "$repo/scripts/setup.sh"
include=${PINFEED_CUDNN_FRONTEND_INCLUDE:-$(sed -n 's/^PINFEED_CUDNN_FRONTEND_INCLUDE:PATH=//p' "$build/CMakeCache.txt")}
[ -f "$include/cudnn_frontend.h" ] || {
  echo "[bench_fusion] no cudnn_frontend.h in '$include': run scripts/setup.sh (it installs nvidia-cudnn-frontend)," \
    "then cmake -S . -B $build -U PINFEED_CUDNN_FRONTEND_INCLUDE, or set PINFEED_CUDNN_FRONTEND_INCLUDE" >&2
  exit 1
}
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
cmake -S "$repo" -B "$build" -DPINFEED_CUDNN_FRONTEND_INCLUDE="$include" -DPINFEED_BUILD_FUSION_BENCH=ON >/dev/null
cmake --build "$build" --target bench_conv_bn_fusion
# The folder's later builds leave the benchmark out again (a minute or two to compile); its executable stays.
cmake -S "$repo" -B "$build" -DPINFEED_BUILD_FUSION_BENCH=OFF >/dev/null
"$build/benchmarks/bench_conv_bn_fusion" --batch "${BATCH:-256}" --plans "${PLANS:-8}" --json "$out/fusion.json" |
  tee "$out/fusion.txt"
python3 "$repo/scripts/fusion_table.py" "$out/fusion.json" | tee "$out/fusion.md"
