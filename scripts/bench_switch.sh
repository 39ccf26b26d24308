#!/usr/bin/env bash
# What a first switch of the training side costs (docs/resolution-schedule.md#the-cost-of-a-first-switch): each
# VARIANT (a key=value, or "default") trains configs/resnet50_ffcv16.toml for 4 epochs at 160, 192, 160, 192 px
# without evaluation, one process after the other in the order given; prints each epoch's samples/s and graph
# capture time and keeps every run's metrics.jsonl in OUT_DIR/switch.json.
#   usage: scripts/bench_switch.sh OUT_DIR VARIANT...      e.g. default train.cudnn_benchmark=false default ...
#   PINFEED_BIN   pinfeed executable (default: build/app/pinfeed);  DATA  ImageFolder of JPEGs (required)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/bench_switch.sh OUT_DIR VARIANT...}
shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=${PINFEED_BIN:-$repo/build/app/pinfeed}
data=${DATA:?set DATA to an ImageFolder of JPEGs}
cd "$repo"
i=0
for v in "$@"; do
  i=$((i + 1))
  extra=()
  [ "$v" != default ] && extra=("$v")
  "$bin" train -c configs/resnet50_ffcv16.toml "data.root=\"$data\"" data.image_size_min=0 data.image_size_max=0 \
    'data.image_size_by_epoch="160,192,160,192"' train.epochs=4 train.eval=false "${extra[@]}" \
    "run.dir=\"$out/run$i\"" > "$out/run$i.log" 2>&1 || { echo "[bench_switch] $v failed: see $out/run$i.log" >&2; exit 1; }
done
python3 - "$out" "$@" <<'PY'
import glob, json, sys
out, variants, runs = sys.argv[1], sys.argv[2:], []
for i, v in enumerate(variants, 1):
    rows = [json.loads(line) for line in open(sorted(glob.glob(f"{out}/run{i}/*/metrics.jsonl"))[-1])]
    runs.append({"order": i, "variant": v, "epochs": rows})
    print(f"{i} {v:30s}", " | ".join(f"{r['image_size']} px {r['samples_per_s']:,.0f}/s capture {r['capture_s']:.2f} s"
                                     for r in rows))
json.dump(runs, open(f"{out}/switch.json", "w"), indent=1)
PY
