#!/usr/bin/env bash
# The feed at the step's ceiling against DALI + torch.compile, side by side in one run (docs/gpu-decode.md):
# pinfeed's nvJPEG feed (dual_stream, CUDA graph, fp16, batch 256), each point beside its own gpu_resident row
# (the step's ceiling) and loader_only row (the decode alone: every batch decoded on the GPU, no step),
# then DALI's `mixed` decoder feeding torchvision's ResNet-50 under torch.compile at the same points
# (hw_decoder_load 0.65 and 0.99). Then the table (scripts/feed_table.py) into OUT_DIR/feed.md.
# `loop` times DALI (and pinfeed's Python module) in scripts/bench_python_feed.py's loop instead: torch.compile
# reduce-overhead, the step's stronger mode (docs/python-module.md#in-a-pytorch-loop), after all the sizes.
#   usage: scripts/bench_feed.sh OUT_DIR
#   PINFEED_BIN           pinfeed executable (default: build/app/pinfeed, built by setup.sh if missing)
#   PINFEED_FEED_DATA     ImageFolder (default: generated once, 100 classes x 96 photo-like JPEGs of 500x375)
#   SIZES THREADS         image sizes and CPU threads (default "224 192 160 128", "2 4")
#   PARTS                 any of: pinfeed dali loop trace (default "pinfeed dali"); trace: a Kineto trace of 10
#                         steps of each pinfeed row at 2 threads, summed by scripts/trace_kernels.py (kernel
#                         time) and scripts/trace_gaps.py (where the step's stream waited)
#   REPEATS               per point (default 2); 20 timed steps after 6 warm-up ones at 224 px, 40 after 10 below
#   HW_LOADS              DALI's hw_decoder_load values tried at each point, the better one reported
#                         (default "0.65,0.99")
#   COMPILE_MODE          torch.compile's mode for the `dali` part (default: default; `loop` is reduce-overhead)
#   PYTHON                Python with torch, torchvision and nvidia-dali-cuda130 (default python3)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/bench_feed.sh OUT_DIR}
mkdir -p "$out"
bin=${PINFEED_BIN:-$repo/build/app/pinfeed}
[ -x "$bin" ] || "$repo/scripts/setup.sh"
cache=${PINFEED_CACHE:-$HOME/.cache/pinfeed}
data=${PINFEED_FEED_DATA:-$cache/datasets/feed-photo-v1}
sizes=${SIZES:-224 192 160 128} threads=${THREADS:-2 4} parts=${PARTS:-pinfeed dali} repeats=${REPEATS:-2}
python=${PYTHON:-python3}

if [ ! -f "$data/.complete" ] && [ -z "${PINFEED_FEED_DATA:-}" ]; then
  rm -rf "$data"
  "$bin" gen-data --out "$data" --classes 100 --train-per-class 96 --val-per-class 4 --size 500x375 --photo \
    --quality 92 >/dev/null
  touch "$data/.complete"
fi
cd "$repo"
steps_of() { [ "$1" -ge 224 ] && echo "6 20" || echo "10 40"; }  # warm-up and timed steps: about a second timed
feed_row() {  # NAME SIZE THREADS REPEATS WARMUP STEPS [bench options...]
  local name=$1 size=$2 t=$3 n=$4 warmup=$5 steps=$6; shift 6
  "$bin" bench --config configs/bench_resnet50.toml --modes dual_stream,gpu_resident,loader_only --repeats "$n" \
    --warmup "$warmup" --steps "$steps" --out "$out/$name" --decoder nvjpeg "data.root=\"$data\"" \
    "data.image_size=$size" "data.workers=$t" train.batch_size=256 train.channels_last=true train.precision=fp16 \
    train.cuda_graph=true "$@" > "$out/$name.log" 2>&1 || { echo "[bench_feed] $name failed: see $out/$name.log" >&2; return 0; }
  echo "[bench_feed] $name: $(grep -E 'dual_stream' "$out/$name.log" | tail -1)"
}
pinfeed_files=() dali_files=()
for size in $sizes; do
  read -r warmup steps <<<"$(steps_of "$size")"
  if [[ " $parts " == *" pinfeed "* ]]; then
    for t in $threads; do
      feed_row "pinfeed-$size-w$t" "$size" "$t" "$repeats" "$warmup" "$steps"
      if [ -f "$out/pinfeed-$size-w$t/bench.json" ]; then pinfeed_files+=("$out/pinfeed-$size-w$t/bench.json"); fi
    done
  fi
  if [[ " $parts " == *" trace "* ]]; then
    feed_row "trace-$size" "$size" 2 1 10 30 --trace-steps 10-19
    for m in dual_stream gpu_resident; do
      if [ -f "$out/trace-$size/trace.$m.json" ]; then
        "$python" scripts/trace_kernels.py "$out/trace-$size/trace.$m.json" --top 12 > "$out/kernels-$size-$m.txt"
        "$python" scripts/trace_gaps.py "$out/trace-$size/trace.$m.json" > "$out/gaps-$size-$m.txt"
      fi
    done
  fi
  if [[ " $parts " == *" dali "* ]]; then
    if "$python" scripts/reference_dali.py --root "$data" --compile --compile-mode "${COMPILE_MODE:-default}" \
         --precision fp16 --image-size "$size" --sweep \
         --sweep-threads "${threads// /,}" --sweep-decoders mixed --sweep-hw-loads "${HW_LOADS:-0.65,0.99}" --repeats "$repeats" \
         --warmup "$warmup" --steps "$steps" --modes train,gpu_resident --out "$out/dali-$size.json" \
         > "$out/dali-$size.log" 2>&1; then
      dali_files+=("$out/dali-$size.json")
    else
      echo "[bench_feed] DALI at $size px failed: see $out/dali-$size.log" >&2
    fi
  fi
done
loop_files=()
if [[ " $parts " == *" loop "* ]]; then
  s=${sizes// /,} t=${threads// /,}
  if PYTHONPATH="$repo/build/python${PYTHONPATH:+:$PYTHONPATH}" "$python" scripts/bench_python_feed.py --root "$data" \
       --sizes "$s" --threads "$t" --feeds pinfeed,dali --pinfeed-decoders nvjpeg --hw-decoder-loads "${HW_LOADS:-0.65,0.99}" \
       --out "$out/loop.json" > "$out/loop.log" 2>&1; then
    loop_files+=("$out/loop.json")
  else
    echo "[bench_feed] the Python loop failed: see $out/loop.log" >&2
  fi
fi
(( ${#pinfeed_files[@]} )) || { echo "[bench_feed] no pinfeed row ran" >&2; exit 1; }
"$python" scripts/feed_table.py --pinfeed "${pinfeed_files[@]}" ${dali_files:+--dali "${dali_files[@]}"} \
  ${loop_files:+--loop "${loop_files[@]}"} --json "$out/feed.json" | tee "$out/feed.md"
