#!/usr/bin/env bash
# A whole run of a resolution schedule from JPEG files, and each of its sides' ceilings, in one call
# (docs/resolution-schedule.md): `pinfeed bench --modes gpu_resident` at every training side of CONFIG (the same
# step on a batch kept on the GPU), then `pinfeed train -c CONFIG` on the same files, then the per-epoch table
# (scripts/schedule_table.py) into OUT_DIR/schedule.md.
#   usage: scripts/bench_schedule.sh OUT_DIR [key=value ...]    (overrides go to both bench and train)
#   CONFIG             default configs/resnet50_ffcv16.toml
#   PINFEED_BIN        pinfeed executable (default: build/app/pinfeed, built by setup.sh if missing)
#   PINFEED_SCHED_DATA ImageFolder (default: generated once, 100 classes x 384 photo-like JPEGs of 500x375 + 20 val)
#   SIDES              the training sides CONFIG's schedule gives (default "160 192"); the table refuses an epoch
#                      whose side has no ceiling
#   PYTHON             default python3
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/bench_schedule.sh OUT_DIR [key=value ...]}
shift
mkdir -p "$out"
bin=${PINFEED_BIN:-$repo/build/app/pinfeed}
[ -x "$bin" ] || "$repo/scripts/setup.sh"
config=${CONFIG:-$repo/configs/resnet50_ffcv16.toml}
cache=${PINFEED_CACHE:-$HOME/.cache/pinfeed}
data=${PINFEED_SCHED_DATA:-$cache/datasets/schedule-photo-v1}
python=${PYTHON:-python3}
if [ ! -f "$data/.complete" ] && [ -z "${PINFEED_SCHED_DATA:-}" ]; then
  rm -rf "$data"
  "$bin" gen-data --out "$data" --classes 100 --train-per-class 384 --val-per-class 20 --size 500x375 --photo \
    --quality 92 >/dev/null
  touch "$data/.complete"
fi
cd "$repo"
overrides=("data.root=\"$data\"" "$@")
for side in ${SIDES:-160 192}; do
  "$bin" bench -c "$config" --modes gpu_resident --repeats 2 --warmup 10 --steps 40 --out "$out/ceiling-$side" \
    "${overrides[@]}" "data.image_size=$side" > "$out/ceiling-$side.log" 2>&1 ||
    { echo "[bench_schedule] ceiling at $side px failed: see $out/ceiling-$side.log" >&2; exit 1; }
  echo "[bench_schedule] ceiling at $side px: $(grep -E 'gpu_resident' "$out/ceiling-$side.log" | tail -1)"
done
start=$(date +%s.%N)
"$bin" train -c "$config" "${overrides[@]}" "run.dir=\"$out/runs\"" > "$out/train.log" 2>&1 ||
  { echo "[bench_schedule] the run failed: see $out/train.log" >&2; tail -5 "$out/train.log" >&2; exit 1; }
wall=$("$python" -c "import time; print(time.time() - $start)")
run=$(ls -d "$out"/runs/*/ | tail -1)
"$python" scripts/schedule_table.py --metrics "$run/metrics.jsonl" --ceilings "$out"/ceiling-*/bench.json \
  --train-images "$(find "$data/train" -type f | wc -l)" \
  --wall-s "$wall" --json "$out/schedule.json" | tee "$out/schedule.md"
