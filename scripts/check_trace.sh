#!/usr/bin/env bash
# Checks the StepMeter's GPU idle against an independent trace (CUPTI's kernel times, via Kineto) on a GPU:
# runs pinfeed with tracing on in loader-bound, half-fed and compute-bound set-ups, then compares, for the same
# steps, the StepMeter's gpu_idle with the idle computed from the trace's kernels (scripts/trace_idle.py).
#
#   scripts/check_trace.sh PINFEED OUT [DATA_ROOT]
#
# PINFEED: the pinfeed executable; OUT: output folder (made); DATA_ROOT: an ImageFolder (default: OUT/data,
# generated once with `pinfeed gen-data --photo`: 20 classes x 128 photo-like 500x375 JPEGs, 280 MB).
# MAX_DIFF (default 1) is the limit in percentage points; CONFIG (default configs/bench_resnet50.toml: ResNet-50,
# 224 px, batch 64, TF32) the config. About 3-4 minutes on one H200 with 16 cores.
#
# Runs (each traces 20 steps after its warm-up):
#   bench-w1/trace.dual_stream.json     data.workers=1: loader-bound, the GPU idle most of the time
#   bench-w1/trace.gpu_resident.json    the batch already on the GPU: compute-bound
#   bench-w4/trace.dual_stream.json     data.workers=4: about half fed
#   bench-w4/trace.pageable.json        the same, the copy on the compute stream (idle for both measures)
#   train/trace_steps_10-29.json        pinfeed train, default workers, dual_stream
# Exit 0 when every run agrees within MAX_DIFF; 1 otherwise. The kernel idle and the launch-bound figure are
# printed beside it: the StepMeter cannot see gaps between the kernels of a step (see docs/measurement.md,
# "The StepMeter's blind spot").
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=$(realpath "$1")
out=$2
data=${3:-$out/data}
max_diff=${MAX_DIFF:-1}
config=${CONFIG:-$repo/configs/bench_resnet50.toml}
mkdir -p "$out"
out=$(realpath "$out")

if [ ! -d "$data/train" ]; then
  echo "[check_trace] generating $data"
  "$bin" gen-data --out "$data" --photo --size 500x375 --classes 20 --train-per-class 128 --val-per-class 4
fi

common=(data.root="$data")
echo "[check_trace] bench, 1 decode thread: dual_stream (loader-bound), gpu_resident (compute-bound)"
"$bin" bench -c "$config" --modes dual_stream,gpu_resident --repeats 1 --warmup 10 --steps 30 --trace-steps 0-19 \
  --out "$out/bench-w1" "${common[@]}" data.workers=1
echo "[check_trace] bench, 4 decode threads: dual_stream and pageable, about half fed"
"$bin" bench -c "$config" --modes dual_stream,pageable --repeats 1 --warmup 10 --steps 30 --trace-steps 0-19 \
  --out "$out/bench-w4" "${common[@]}" data.workers=4
echo "[check_trace] train, default decode threads, dual_stream"
rm -rf "$out/train-runs"
"$bin" train -c "$config" --mode dual_stream "${common[@]}" train.epochs=1 train.eval=false \
  train.max_steps_per_epoch=35 pipeline.warmup_steps=5 run.trace_steps=10-29 run.dir="$out/train-runs" run.name=check
mkdir -p "$out/train"
cp "$out"/train-runs/*-check/trace_steps_10-29.json "$out/train/"

status=0
results=()
for t in bench-w1/trace.dual_stream bench-w1/trace.gpu_resident bench-w4/trace.dual_stream bench-w4/trace.pageable \
         train/trace_steps_10-29; do
  python3 "$repo/scripts/trace_idle.py" "$out/$t.json" --max-diff "$max_diff" > "$out/$t.idle.json" || status=1
  results+=("$out/$t.idle.json")
done

python3 - "$max_diff" "${results[@]}" <<'EOF'
import json, sys
limit = float(sys.argv[1])
pct = lambda v: "n/a" if v is None else f"{100 * v:6.2f}%"
print(f"\n{'run':34} {'StepMeter idle':>14} {'trace idle':>10} {'diff pts':>8} {'kernel idle':>11} "
      f"{'inside steps':>12} {'kernel busy/step':>16}")
for path in sys.argv[2:]:
    r = json.load(open(path))
    sm = (r.get("stepmeter") or {}).get("gpu_idle")
    d = r.get("stepmeter_minus_trace_points")
    ok = d is not None and abs(d) <= limit
    name = path.split("/")[-2] + "/" + path.split("/")[-1].replace(".idle.json", "")
    print(f"{name:34} {pct(sm):>14} {pct(r.get('idle_between_steps')):>10} "
          f"{'n/a' if d is None else f'{d:+.2f}':>8} {pct(r.get('kernel_idle')):>11} "
          f"{pct(r.get('idle_inside_steps')):>12} {pct(r.get('kernel_busy_in_steps')):>16}  {'ok' if ok else 'DIFFERS'}")
print(f"\ntrace idle: between the traced steps' GPU spans (the StepMeter's definition, from CUPTI's kernel times);"
      f"\nkernel idle: no kernel running on the compute stream; inside steps: gaps between a step's kernels,"
      f"\nwhich the StepMeter cannot see; kernel busy/step: the launch-bound figure. Limit: {limit} points.")
EOF
exit $status
