#!/usr/bin/env bash
# Multi-GPU scaling on one machine, in one run (docs/multi-gpu.md): `pinfeed bench` on 1 rank, on N
# ranks under torchrun (gradient all-reduce overlapped with backward), and on N ranks with the overlap off
# (the all-reduce after backward), ROUNDS times in that order, interleaved, same files.
#   usage: scripts/bench_multi_gpu.sh CONFIG OUT_DIR N [section.key=value ...]
#   PINFEED_BIN (default build/app/pinfeed), TORCHRUN (default: torchrun on PATH, else the setup.sh venv's)
#   MODES (default dual_stream,gpu_resident), ROUNDS (2), REPEATS (2), WARMUP (15), STEPS (50)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
config=${1:?usage: scripts/bench_multi_gpu.sh CONFIG OUT_DIR N [overrides]} out=${2:?OUT_DIR} n=${3:?N}
shift 3
bin=${PINFEED_BIN:-$repo/build/app/pinfeed}
torchrun=${TORCHRUN:-$(command -v torchrun || echo "$(cat "$repo/build/.venv_path")/bin/torchrun")}
common=(--repeats "${REPEATS:-2}" --warmup "${WARMUP:-15}" --steps "${STEPS:-50}")
launch() { "$torchrun" --standalone --nproc-per-node="$n" --no-python "$bin" "$@"; }
mkdir -p "$out"
for r in $(seq 1 "${ROUNDS:-2}"); do
  echo "[bench_multi_gpu] round $r: 1 rank" >&2
  "$bin" bench -c "$config" --modes "${MODES:-dual_stream,gpu_resident}" "${common[@]}" --out "$out/r$r-1rank" "$@"
  echo "[bench_multi_gpu] round $r: $n ranks" >&2
  launch bench -c "$config" --modes "${MODES:-dual_stream,gpu_resident}" "${common[@]}" --out "$out/r$r-${n}ranks" "$@"
  echo "[bench_multi_gpu] round $r: $n ranks, all-reduce after backward" >&2
  launch bench -c "$config" --modes gpu_resident "${common[@]}" --out "$out/r$r-${n}ranks-no-overlap" "$@" \
    dist.overlap=false
done
