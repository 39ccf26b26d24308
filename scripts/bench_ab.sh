#!/usr/bin/env bash
# The training step of two pinfeed builds side by side, interleaved A B A B in one run (a change that must not
# cost speed: "before" against "after"). Each row: bench --modes gpu_resident, data on the GPU, as bench_step.sh's.
#   scripts/bench_ab.sh BIN_A BIN_B OUT [overrides...]   (PRECISION, BATCH, SIZE, ROUNDS, REPEATS, STEPS)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
a=${1:?usage: scripts/bench_ab.sh BIN_A BIN_B OUT [overrides...]} b=${2:?} out=${3:?}; shift 3
mkdir -p "$out"
cache=${PINFEED_CACHE:-$HOME/.cache/pinfeed}
data=${PINFEED_STEP_DATA:-$cache/datasets/step-photo-v1}
precision=${PRECISION:-fp16} batch=${BATCH:-256} size=${SIZE:-224} rounds=${ROUNDS:-2}
repeats=${REPEATS:-3} steps=${STEPS:-40} warmup=${WARMUP:-15}
if [ ! -f "$data/.complete" ]; then
  rm -rf "$data"
  "$b" gen-data --out "$data" --classes 10 --train-per-class 64 --val-per-class 0 --size 500x375 --photo >/dev/null
  touch "$data/.complete"
fi
cd "$repo"
for r in $(seq 1 "$rounds"); do
  for side in a b; do
    bin=$a; [ $side = b ] && bin=$b
    "$bin" bench --config configs/bench_resnet50.toml --modes gpu_resident --repeats "$repeats" --warmup "$warmup" \
      --steps "$steps" --out "$out/$side-$r" "data.root=\"$data\"" "train.batch_size=$batch" "data.image_size=$size" \
      train.channels_last=true pipeline.transfer_dtype=uint8 train.cuda_graph=true "train.precision=$precision" \
      model.fused_bn=on model.max_pool=pinfeed "$@" > "$out/$side-$r.log" 2>&1
  done
done
python3 - "$out" "$rounds" <<'PY'
import json, sys, statistics
out, rounds = sys.argv[1], int(sys.argv[2])
for side in "ab":
    rates = []
    for r in range(1, rounds + 1):
        doc = json.load(open(f"{out}/{side}-{r}/bench.json"))
        rates += [v for row in doc["rows"] for v in row["samples_per_s"]]
    print(f"{side}: median {statistics.median(rates):,.0f} samples/s  [{min(rates):,.0f} - {max(rates):,.0f}]  n={len(rates)}")
PY
