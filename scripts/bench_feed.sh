#!/usr/bin/env bash
# The feed: training from JPEG files against the step's ceiling, against NVIDIA DALI and against Python's
# DataLoader (docs/gpu-decode.md, docs/resolution-schedule.md, docs/transfer-modes.md, docs/measurement.md).
#
#   scripts/bench_feed.sh OUT_DIR
#     pinfeed's nvJPEG feed (dual_stream, CUDA graph, fp16, batch 256), each point beside its own gpu_resident row
#     (the step's ceiling) and loader_only row (the decode alone: every batch decoded on the GPU, no step), then
#     DALI's `mixed` decoder feeding torchvision's ResNet-50 under torch.compile at the same points
#     (scripts/reference_dali.py). Then the table (scripts/tables.py feed) into OUT_DIR/feed.md. `loop` times DALI
#     (and pinfeed's Python module) in scripts/bench_python_feed.py's loop instead: torch.compile reduce-overhead,
#     the step's stronger mode (docs/python-module.md#in-a-pytorch-loop), after all the sizes.
#       SIZES THREADS   image sizes and CPU threads (default "224 192 160 128", "2 4")
#       PARTS           any of: pinfeed dali loop trace (default "pinfeed dali"); trace: a Kineto trace of 10 steps
#                       of each pinfeed row at 2 threads, summed by scripts/trace_kernels.py (kernel time) and
#                       scripts/trace_gaps.py (where the step's stream waited)
#       REPEATS         per point (default 2); 20 timed steps after 6 warm-up ones at 224 px, 40 after 10 below
#       HW_LOADS        DALI's hw_decoder_load values tried at each point, the better one reported ("0.65,0.99")
#       COMPILE_MODE    torch.compile's mode for the `dali` part (default: default; `loop` is reduce-overhead)
#       PYTHON          Python with torch, torchvision and nvidia-dali-cuda130 (default python3)
#
#   scripts/bench_feed.sh --schedule OUT_DIR [key=value ...]
#     A whole run of a resolution schedule and each of its sides' ceilings: `pinfeed bench --modes gpu_resident`
#     at every training side of CONFIG, then `pinfeed train -c CONFIG` on the same files, then the per-epoch table
#     (scripts/tables.py schedule) into OUT_DIR/schedule.md; the overrides go to both. CONFIG (default
#     configs/resnet50_ffcv16.toml), SIDES (the sides CONFIG's schedule gives, default "160 192"),
#     PINFEED_SCHED_DATA (default: generated once, 100 classes x 384 photo-like JPEGs of 500x375 + 20 val).
#
#   scripts/bench_feed.sh --curve CONFIG OUT_DIR [key=value ...]
#     The decoder curve: samples/s against CPU threads for pinfeed's CPU decoder, pinfeed's GPU decoder (nvJPEG) and
#     DALI (mixed and cpu decoders, reference_dali.py --sweep), same files, one after the other; writes
#     OUT_DIR/pinfeed-{cpu,nvjpeg}-wN/bench.json, OUT_DIR/resident/bench.json, OUT_DIR/dali.json and
#     OUT_DIR/curve.png. THREADS ("1 2 4 8 13"), REPEATS (2), WARMUP (10), STEPS (40), DALI (1; 0: pinfeed only).
#     DALI trains at its defaults, batch 256, bf16, channels_last: give pinfeed the same (train.batch_size=256
#     train.precision=bf16 train.channels_last=true pipeline.transfer_dtype=uint8).
#
#   scripts/bench_feed.sh --modes OUT_DIR
#     Every transfer mode (`pinfeed bench`) for three configurations on photo-like JPEGs, the same in Python
#     PyTorch (scripts/reference_pytorch.py), then the tables (scripts/tables.py modes) into OUT_DIR/results.md.
#       BENCH_PARTS           any of: pinfeed uint8 graph reference (default: all)
#       BENCH_CONFIGS         any of: bs64-tf32 bs64-bf16-cl bs256-bf16-cl (default: all)
#       REPEATS WARMUP STEPS  per mode and repeat (default 3, 20, 100)
#       PINFEED_BENCH_DATA    default: generated once, 100 classes x 128 images of 500x375
#       PYTHON                default: the venv scripts/setup.sh made (build/.venv_path), else python3
#
#   scripts/bench_feed.sh --trace-check OUT_DIR [DATA_ROOT]
#     The StepMeter's GPU idle against an independent trace (CUPTI's kernel times, via Kineto): pinfeed with tracing
#     on in loader-bound, half-fed and compute-bound set-ups, each compared by scripts/trace_idle.py for the same
#     steps (docs/measurement.md#the-trace-cross-check). Exit 0 when every run agrees within MAX_DIFF points
#     (default 1), 1 otherwise. CONFIG (default configs/bench_resnet50.toml); DATA_ROOT (default OUT_DIR/data,
#     generated once: 20 classes x 128 photo-like 500x375 JPEGs). About 3-4 minutes on one H200 with 16 cores.
#
# Every mode: PINFEED_BIN (default: build/app/pinfeed, built by setup.sh if missing). PINFEED_FEED_DATA: the
# first mode's ImageFolder (default: generated once, 100 classes x 96 photo-like JPEGs of 500x375 + 4 val).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: scripts/bench_feed.sh [--schedule | --curve CONFIG | --modes | --trace-check] OUT_DIR ..."
bin=${PINFEED_BIN:-$repo/build/app/pinfeed}
cache=${PINFEED_CACHE:-$HOME/.cache/pinfeed}
python=${PYTHON:-python3}
log() { echo "[bench_feed $(date +%H:%M:%S)] $*" >&2; }

# gen_data DIR CLASSES TRAIN VAL [flags]: a generated ImageFolder of photo-like 500x375 JPEGs, made once.
gen_data() {
  local dir=$1 classes=$2 train=$3 val=$4
  shift 4
  [ -f "$dir/.complete" ] && return 0
  log "generating $classes classes x ($train + $val) photo-like JPEGs in $dir"
  rm -rf "$dir"
  "$bin" gen-data --out "$dir" --classes "$classes" --train-per-class "$train" --val-per-class "$val" \
    --size 500x375 --photo "$@" >/dev/null
  touch "$dir/.complete"
}

feed() {  # OUT_DIR
  local out=${1:?$usage}
  mkdir -p "$out"
  local data=${PINFEED_FEED_DATA:-$cache/datasets/feed-photo-v1}
  local sizes=${SIZES:-224 192 160 128} threads=${THREADS:-2 4} parts=${PARTS:-pinfeed dali} repeats=${REPEATS:-2}
  [ -n "${PINFEED_FEED_DATA:-}" ] || gen_data "$data" 100 96 4 --quality 92
  cd "$repo"
  steps_of() { [ "$1" -ge 224 ] && echo "6 20" || echo "10 40"; }  # warm-up and timed steps: about a second timed
  feed_row() {  # NAME SIZE THREADS REPEATS WARMUP STEPS [bench options...]
    local name=$1 size=$2 t=$3 n=$4 warmup=$5 steps=$6; shift 6
    "$bin" bench --config configs/bench_resnet50.toml --modes dual_stream,gpu_resident,loader_only --repeats "$n" \
      --warmup "$warmup" --steps "$steps" --out "$out/$name" --decoder nvjpeg "data.root=\"$data\"" \
      "data.image_size=$size" "data.workers=$t" train.batch_size=256 train.channels_last=true train.precision=fp16 \
      train.cuda_graph=true "$@" > "$out/$name.log" 2>&1 ||
      { echo "[bench_feed] $name failed: see $out/$name.log" >&2; return 0; }
    echo "[bench_feed] $name: $(grep -E 'dual_stream' "$out/$name.log" | tail -1)"
  }
  local pinfeed_files=() dali_files=() loop_files=() size t m warmup steps
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
           --precision fp16 --image-size "$size" --sweep --sweep-threads "${threads// /,}" --sweep-decoders mixed \
           --sweep-hw-loads "${HW_LOADS:-0.65,0.99}" --repeats "$repeats" --warmup "$warmup" --steps "$steps" \
           --modes train,gpu_resident --out "$out/dali-$size.json" > "$out/dali-$size.log" 2>&1; then
        dali_files+=("$out/dali-$size.json")
      else
        echo "[bench_feed] DALI at $size px failed: see $out/dali-$size.log" >&2
      fi
    fi
  done
  if [[ " $parts " == *" loop "* ]]; then
    if PYTHONPATH="$repo/build/python${PYTHONPATH:+:$PYTHONPATH}" "$python" scripts/bench_python_feed.py \
         --root "$data" --sizes "${sizes// /,}" --threads "${threads// /,}" --feeds pinfeed,dali \
         --pinfeed-decoders nvjpeg --hw-decoder-loads "${HW_LOADS:-0.65,0.99}" --out "$out/loop.json" \
         > "$out/loop.log" 2>&1; then
      loop_files+=("$out/loop.json")
    else
      echo "[bench_feed] the Python loop failed: see $out/loop.log" >&2
    fi
  fi
  (( ${#pinfeed_files[@]} )) || { echo "[bench_feed] no pinfeed row ran" >&2; exit 1; }
  "$python" scripts/tables.py feed --pinfeed "${pinfeed_files[@]}" ${dali_files:+--dali "${dali_files[@]}"} \
    ${loop_files:+--loop "${loop_files[@]}"} --json "$out/feed.json" | tee "$out/feed.md"
}

schedule() {  # OUT_DIR [overrides...]
  local out=${1:?$usage}
  shift
  mkdir -p "$out"
  local config=${CONFIG:-$repo/configs/resnet50_ffcv16.toml}
  local data=${PINFEED_SCHED_DATA:-$cache/datasets/schedule-photo-v1} side start wall run
  [ -n "${PINFEED_SCHED_DATA:-}" ] || gen_data "$data" 100 384 20 --quality 92
  cd "$repo"
  local overrides=("data.root=\"$data\"" "$@")
  for side in ${SIDES:-160 192}; do
    "$bin" bench -c "$config" --modes gpu_resident --repeats 2 --warmup 10 --steps 40 --out "$out/ceiling-$side" \
      "${overrides[@]}" "data.image_size=$side" > "$out/ceiling-$side.log" 2>&1 ||
      { echo "[bench_feed] ceiling at $side px failed: see $out/ceiling-$side.log" >&2; exit 1; }
    echo "[bench_feed] ceiling at $side px: $(grep -E 'gpu_resident' "$out/ceiling-$side.log" | tail -1)"
  done
  start=$(date +%s.%N)
  "$bin" train -c "$config" "${overrides[@]}" "run.dir=\"$out/runs\"" > "$out/train.log" 2>&1 ||
    { echo "[bench_feed] the run failed: see $out/train.log" >&2; tail -5 "$out/train.log" >&2; exit 1; }
  wall=$("$python" -c "import time; print(time.time() - $start)")
  run=$(ls -d "$out"/runs/*/ | tail -1)
  "$python" scripts/tables.py schedule --metrics "$run/metrics.jsonl" --ceilings "$out"/ceiling-*/bench.json \
    --train-images "$(find "$data/train" -type f | wc -l)" \
    --wall-s "$wall" --json "$out/schedule.json" | tee "$out/schedule.md"
}

curve() {  # CONFIG OUT_DIR [overrides...]
  local config=${1:?$usage} out=${2:?$usage}
  shift 2
  local threads w decoder root size o benches=()
  read -r -a threads <<<"${THREADS:-1 2 4 8 13}"
  local common=(--repeats "${REPEATS:-2}" --warmup "${WARMUP:-10}" --steps "${STEPS:-40}")
  mkdir -p "$out"
  log "pinfeed gpu_resident (the compute ceiling)"
  "$bin" bench -c "$config" --modes gpu_resident "${common[@]}" --out "$out/resident" "$@"
  for w in "${threads[@]}"; do  # decoders interleaved per thread count: drift hits both alike
    for decoder in cpu nvjpeg; do
      log "pinfeed, decoder $decoder, $w decode threads"
      "$bin" bench -c "$config" --modes dual_stream --decoder "$decoder" "${common[@]}" \
        --out "$out/pinfeed-$decoder-w$w" "$@" data.workers="$w"
      benches+=("$out/pinfeed-$decoder-w$w/bench.json")
    done
  done
  if [ "${DALI:-1}" = 1 ]; then
    root=$(grep -E '^root *=' "$config" | head -1 | sed -E 's/^root *= *"(.*)".*/\1/')
    for o in "$@"; do case $o in data.root=*) root=${o#data.root=}; root=${root//\"/};; esac; done
    root=${root/#\~/$HOME}
    size=$(grep -E '^image_size *=' "$config" | head -1 | sed -E 's/[^0-9]//g')
    for o in "$@"; do case $o in data.image_size=*) size=${o#data.image_size=};; esac; done
    log "DALI sweep over ${threads[*]} threads (root $root, ${size:-224} px)"
    "$python" "$repo/scripts/reference_dali.py" --root "$root" --image-size "${size:-224}" --sweep \
      --sweep-threads "$(IFS=,; echo "${threads[*]}")" --repeats "${REPEATS:-2}" --warmup "${WARMUP:-10}" \
      --steps "${STEPS:-40}" --out "$out/dali.json" \
      --plot "$out/curve.png" --pinfeed-bench "${benches[@]}"
  else
    log "DALI skipped (DALI=0); pinfeed's curves are in $out/pinfeed-*/bench.json"
  fi
  log "done: $out"
}

modes() {  # OUT_DIR
  local out=${1:?$usage}
  mkdir -p "$out"
  local data=${PINFEED_BENCH_DATA:-$cache/datasets/bench-photo-v1}
  local parts=${BENCH_PARTS:-pinfeed uint8 graph reference}
  local configs=${BENCH_CONFIGS:-bs64-tf32 bs64-bf16-cl bs256-bf16-cl}
  local repeats=${REPEATS:-3} warmup=${WARMUP:-20} steps=${STEPS:-100} c
  local venv_path
  venv_path=$(dirname "$bin")/../.venv_path
  [ -n "${PYTHON:-}" ] || python=$([ -f "$venv_path" ] && echo "$(cat "$venv_path")/bin/python" || echo python3)
  [ -n "${PINFEED_BENCH_DATA:-}" ] || gen_data "$data" 100 128 0 --quality 92
  # One table of the configurations: name -> batch size, precision, channels_last; both spellings derive from it.
  settings_for() {
    case $1 in
      bs64-tf32) echo '64 tf32 false' ;;
      bs64-bf16-cl) echo '64 bf16 true' ;;
      bs256-bf16-cl) echo '256 bf16 true' ;;
      *) echo "unknown config $1" >&2; exit 2 ;;
    esac
  }
  overrides_for() {  # pinfeed config overrides
    read -r bs prec cl <<<"$(settings_for "$1")"
    echo "train.batch_size=$bs train.precision=$prec train.channels_last=$cl"
  }
  ref_flags_for() {  # scripts/reference_pytorch.py flags
    read -r bs prec cl <<<"$(settings_for "$1")"
    echo "--batch-size $bs --precision $prec$([ "$cl" = true ] && echo ' --channels-last')"
  }
  cd "$repo"
  for c in $configs; do settings_for "$c" >/dev/null; done  # an unknown name stops here, before any run
  for c in $configs; do
    mkdir -p "$out/$c"
    # shellcheck disable=SC2046
    if [[ " $parts " == *" pinfeed "* ]]; then
      "$bin" bench --config configs/bench_resnet50.toml --repeats "$repeats" --warmup "$warmup" --steps "$steps" \
        --out "$out/$c" "data.root=\"$data\"" $(overrides_for "$c")
    fi
    # shellcheck disable=SC2046
    if [[ " $parts " == *" uint8 "* ]]; then  # raw pixels over PCIe, normalised on the GPU
      "$bin" bench --config configs/bench_resnet50.toml --repeats "$repeats" --warmup "$warmup" --steps "$steps" \
        --modes dual_stream,gpu_resident,loader_only --out "$out/$c-uint8" "data.root=\"$data\"" \
        pipeline.transfer_dtype=uint8 $(overrides_for "$c")
    fi
    # shellcheck disable=SC2046
    if [[ " $parts " == *" graph "* ]]; then  # uint8 + the training step replayed as a CUDA graph
      "$bin" bench --config configs/bench_resnet50.toml --repeats "$repeats" --warmup "$warmup" --steps "$steps" \
        --modes dual_stream,gpu_resident --out "$out/$c-graph" "data.root=\"$data\"" \
        pipeline.transfer_dtype=uint8 train.cuda_graph=true $(overrides_for "$c")
    fi
    # shellcheck disable=SC2046
    if [[ " $parts " == *" reference "* ]]; then
      "$python" scripts/reference_pytorch.py --data "$data" $(ref_flags_for "$c") --repeats "$repeats" \
        --warmup "$warmup" --steps "$steps" --out "$out/$c/reference.json"
    fi
  done
  # shellcheck disable=SC2086
  "$python" scripts/tables.py modes "$out" $configs
}

trace_check() {  # OUT_DIR [DATA_ROOT]
  local out=${1:?$usage}
  local data=${2:-$out/data} max_diff=${MAX_DIFF:-1} config=${CONFIG:-$repo/configs/bench_resnet50.toml} t
  mkdir -p "$out"
  out=$(realpath "$out")
  bin=$(realpath "$bin")
  if [ ! -d "$data/train" ]; then
    log "generating $data"
    "$bin" gen-data --out "$data" --photo --size 500x375 --classes 20 --train-per-class 128 --val-per-class 4
  fi
  # Runs, each tracing 20 steps after its warm-up:
  #   bench-w1/trace.dual_stream.json     data.workers=1: loader-bound, the GPU idle most of the time
  #   bench-w1/trace.gpu_resident.json    the batch already on the GPU: compute-bound
  #   bench-w4/trace.dual_stream.json     data.workers=4: about half fed
  #   bench-w4/trace.pageable.json        the same, the copy on the compute stream (idle for both measures)
  #   train/trace_steps_10-29.json        pinfeed train, default workers, dual_stream
  # The kernel idle and the launch-bound figure are printed beside it: the StepMeter cannot see gaps between the
  # kernels of a step (docs/measurement.md#the-stepmeters-blind-spot).
  local common=(data.root="$data")
  log "bench, 1 decode thread: dual_stream (loader-bound), gpu_resident (compute-bound)"
  "$bin" bench -c "$config" --modes dual_stream,gpu_resident --repeats 1 --warmup 10 --steps 30 --trace-steps 0-19 \
    --out "$out/bench-w1" "${common[@]}" data.workers=1
  log "bench, 4 decode threads: dual_stream and pageable, about half fed"
  "$bin" bench -c "$config" --modes dual_stream,pageable --repeats 1 --warmup 10 --steps 30 --trace-steps 0-19 \
    --out "$out/bench-w4" "${common[@]}" data.workers=4
  log "train, default decode threads, dual_stream"
  rm -rf "$out/train-runs"
  "$bin" train -c "$config" --mode dual_stream "${common[@]}" train.epochs=1 train.eval=false \
    train.max_steps_per_epoch=35 pipeline.warmup_steps=5 run.trace_steps=10-29 run.dir="$out/train-runs" run.name=check
  mkdir -p "$out/train"
  cp "$out"/train-runs/*-check/trace_steps_10-29.json "$out/train/"
  local status=0 results=()
  for t in bench-w1/trace.dual_stream bench-w1/trace.gpu_resident bench-w4/trace.dual_stream bench-w4/trace.pageable \
           train/trace_steps_10-29; do
    python3 "$repo/scripts/trace_idle.py" "$out/$t.json" --max-diff "$max_diff" > "$out/$t.idle.json" || status=1
    results+=("$out/$t.idle.json")
  done
  python3 - "$max_diff" "${results[@]}" <<'PY'
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
PY
  exit $status
}

case ${1:-} in
  --schedule | --curve | --modes | --trace-check) mode=${1#--}; shift ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) echo "error: unknown option $1; $usage" >&2; exit 2 ;;
  "") echo "$usage" >&2; exit 2 ;;
  *) mode=feed ;;
esac
[ -x "$bin" ] || "$repo/scripts/setup.sh"
"${mode//-/_}" "$@"
