#!/usr/bin/env bash
# Accuracy against the Python stack (docs/accuracy-parity.md): one recipe trained by `pinfeed train` and by
# scripts/reference_train.py (torchvision's ResNet-50, reading the same TOML file and overrides) on the same
# generated data with the same seeds.
#
#   scripts/time_to_accuracy.sh OUT_DIR [section.key=value ...]    (overrides go to both sides)
#     Time to accuracy: CONFIG trained by both sides, the Python side with torch.compile, channels_last, AMP as the
#     config says, the DataLoader or DALI; the two sides alternate seed by seed; each run under scripts/timed_run.py,
#     which stamps every epoch's line with the seconds since the process's launch; then `scripts/tables.py tta`: wall
#     time to the Python side's mean final top-1, the speed-up, the top-1 gap.
#       CONFIG       default configs/resnet50_ffcv16.toml
#       SEEDS        default "0 1 2 3"
#       LOADER       the Python side's loader: dataloader (default) | dali
#       COMPILE      1 (default): torch.compile; 0: eager
#       COMPILE_MODE torch.compile's mode (default: default; reduce-overhead: CUDA graphs)
#       COMPILE_CACHE cold (default: each Python run compiles into a fresh Inductor/Triton cache, as a first run
#                    does) | warm (caches as a second run finds them: an untimed 2-epoch run of each side first, one
#                    epoch at each end of the ramp)
#       WARMUP       1 (default): with COMPILE_CACHE=warm, run those untimed runs; 0: skip them (an earlier call on
#                    this machine, same config and data, warmed the caches already); only: run them and stop
#       PY_WORKERS   the Python side's DataLoader workers or DALI threads (default: cores - 1)
#       EXTRA        more section.key=value overrides for both sides (e.g. "train.device=cpu data.image_size_min=32")
#       DATA         ImageFolder with train/ and val/ (default: generated once under ~/.cache/pinfeed/datasets:
#                    TTA_CLASSES x (TTA_TRAIN + TTA_VAL) photo-like JPEGs of TTA_SIZE, default 100 x (500 + 50),
#                    500x375)
#     OUT_DIR gets each run's log, pinfeed's run folders, every run's stamped JSON lines (pinfeed-seedN.jsonl,
#     python-seedN.jsonl), tta.md, tta.json and (with matplotlib) tta.png.
#
#   scripts/time_to_accuracy.sh --parity OUT_DIR [section.key=value ...]
#     Accuracy parity: configs/parity_resnet50.toml, both sides, one run after the other, seed by seed, then
#     `scripts/tables.py parity` writes parity.png, parity.md and parity.json and fails (exit 1) when the mean final
#     val top-1 of the two differs by more than PARITY_THRESHOLD points. About 6 minutes for two seeds on one H200.
#       PARITY_RESULTS    where the chart and table go (default: OUT_DIR/results)
#       PARITY_DATA       ImageFolder to use (default: generated once under ~/.cache/pinfeed/datasets)
#       PARITY_CLASSES PARITY_TRAIN PARITY_VAL PARITY_SIZE   the generated data (default 24, 500, 100 per class,
#                         320x256)
#       PARITY_SEEDS      (default "0 1")   PARITY_THRESHOLD (default 1.0 points)   PARITY_CONFIG (default the above)
#       PARITY_OVERRIDES  more section.key=value overrides for both sides (e.g. "train.epochs=2 train.device=cpu")
#       PARITY_WORKERS    DataLoader workers of the reference (default: as pinfeed's decode threads, cores - 3)
#       PARITY_SIDES      which sides run (default "pinfeed torchvision"); a side left out must have its runs'
#                         JSON lines in OUT_DIR already (<side>-seed<N>.jsonl, from an earlier run of the same recipe)
#
#   scripts/time_to_accuracy.sh --project OUT_DIR [section.key=value ...]
#     One recipe's ImageNet-1k time, projected: PROJECT_CONFIG (default configs/resnet18_ffcv16.toml) trained by
#     pinfeed alone once on the time-to-accuracy data above (DATA, TTA_*), under scripts/timed_run.py; then
#     `scripts/tables.py project` puts every epoch's measured rate and evaluation time to 1,281,167 + 50,000 images
#     (plus the run's own overhead) beside REPORTED minutes (REPORTED_LABEL names them). Writes OUT_DIR/project.md,
#     project.json and the run's files. A projection: another dataset's JPEGs decode at other rates.
#
# All: PINFEED_BIN (default: build/app/pinfeed, built by setup.sh if missing); PYTHON, with torch, torchvision
# and matplotlib (default: the venv scripts/setup.sh names in the build folder's .venv_path, else python3).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: scripts/time_to_accuracy.sh [--parity | --project] OUT_DIR [section.key=value ...]"
mode=tta
case ${1:-} in
  --parity) mode=parity; shift ;;
  --project) mode=project; shift ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) echo "error: unknown option $1; $usage" >&2; exit 2 ;;
esac
out=${1:?$usage}
shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=${PINFEED_BIN:-$repo/build/app/pinfeed}
[ -x "$bin" ] || "$repo/scripts/setup.sh"
[ -x "$bin" ] || { echo "error: $bin is not an executable" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
export PINFEED_BIN=$bin  # reference_train.py asks it for every config key's default
python=${PYTHON:-}
for venv_path in "$(dirname "$bin")/../.venv_path" "$repo/build/.venv_path"; do
  if [ -z "$python" ] && [ -f "$venv_path" ]; then python="$(cat "$venv_path")/bin/python"; fi
done
python=${python:-python3}
cache=${PINFEED_CACHE:-$HOME/.cache/pinfeed}

parity() {  # [overrides...]
  local config=${PARITY_CONFIG:-$repo/configs/parity_resnet50.toml}
  local results=${PARITY_RESULTS:-$out/results} threshold=${PARITY_THRESHOLD:-1.0}
  local classes=${PARITY_CLASSES:-24} train_n=${PARITY_TRAIN:-500} val_n=${PARITY_VAL:-100} size=${PARITY_SIZE:-320x256}
  local seeds overrides seed run_dir run_folders t0 start gpu note status=0
  read -r -a seeds <<<"${PARITY_SEEDS:-0 1}"
  read -r -a overrides <<<"${PARITY_OVERRIDES:-}"
  overrides+=("$@")
  local sides=" ${PARITY_SIDES:-pinfeed torchvision} "
  local data=${PARITY_DATA:-$cache/datasets/parity-c$classes-t$train_n-v$val_n-$size-photo}
  log() { echo "[parity $(date +%H:%M:%S)] $*" >&2; }
  "$python" -c 'import torch, torchvision' || { echo "error: $python cannot import torch and torchvision" >&2; exit 2; }
  "$python" -c 'import matplotlib' 2>/dev/null ||
    { echo "error: $python cannot import matplotlib for parity.png (scripts/setup.sh installs it into its venv)" >&2
      exit 2; }
  start=$(date +%s)
  if [ -z "${PARITY_DATA:-}" ] && [ ! -f "$data/.complete" ]; then
    log "generating $classes classes x ($train_n train + $val_n val) photo-like ${size} JPEGs in $data"
    rm -rf "$data"
    "$bin" gen-data --out "$data" --classes "$classes" --train-per-class "$train_n" --val-per-class "$val_n" \
      --size "$size" --photo --quality 90 --seed 12
    touch "$data/.complete"
  fi
  local pinfeed_files=() reference_files=()
  for seed in "${seeds[@]}"; do
    if [[ $sides != *" pinfeed "* ]]; then
      log "pinfeed, seed $seed: earlier run $out/pinfeed-seed$seed.jsonl"
      pinfeed_files+=("$out/pinfeed-seed$seed.jsonl")
      continue
    fi
    run_dir=$out/pinfeed-seed$seed
    rm -rf "$run_dir"
    log "pinfeed, seed $seed"
    t0=$(date +%s)
    "$bin" train --config "$config" "data.root=\"$data\"" "train.seed=$seed" "run.dir=\"$run_dir\"" \
      "run.name=parity-seed$seed" "${overrides[@]}" 2>&1 | tee "$out/pinfeed-seed$seed.log"
    run_folders=("$run_dir"/*/)  # the one run folder pinfeed made there
    cp "${run_folders[-1]}metrics.jsonl" "$out/pinfeed-seed$seed.jsonl"
    pinfeed_files+=("$out/pinfeed-seed$seed.jsonl")
    log "pinfeed, seed $seed: $(($(date +%s) - t0)) s"
  done
  for seed in "${seeds[@]}"; do
    if [[ $sides != *" torchvision "* ]]; then
      log "torchvision reference, seed $seed: earlier run $out/torchvision-seed$seed.jsonl"
      reference_files+=("$out/torchvision-seed$seed.jsonl")
      continue
    fi
    log "torchvision reference, seed $seed"
    t0=$(date +%s)
    PYTHONUNBUFFERED=1 "$python" "$repo/scripts/reference_train.py" --config "$config" "data.root=\"$data\"" \
      "train.seed=$seed" "${overrides[@]}" ${PARITY_WORKERS:+--workers "$PARITY_WORKERS"} \
      --out "$out/torchvision-seed$seed.jsonl" 2>&1 | tee "$out/torchvision-seed$seed.log"
    reference_files+=("$out/torchvision-seed$seed.jsonl")
    log "torchvision reference, seed $seed: $(($(date +%s) - t0)) s"
  done
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)
  note="$(date -u +'%Y-%m-%d %H:%M UTC'), ${gpu:-no GPU}, $(nproc) cores; $(basename "$config")${overrides[*]:+ with ${overrides[*]}}; data $(basename "$data") ($(find "$data/train" -type f | wc -l) train, $(find "$data/val" -type f 2>/dev/null | wc -l) val images); torch $("$python" -c 'import torch, torchvision; print(torch.__version__ + ", torchvision " + torchvision.__version__)'); scripts/time_to_accuracy.sh --parity, $(($(date +%s) - start)) s for all runs${PARITY_SIDES:+ (run now: $PARITY_SIDES; the other side: earlier runs)}."
  log "all runs done in $(($(date +%s) - start)) s"
  "$python" "$repo/scripts/tables.py" parity --pinfeed "${pinfeed_files[@]}" --reference "${reference_files[@]}" \
    --seeds "${seeds[@]}" --out-dir "$results" --threshold "$threshold" --note "$note" || status=$?
  log "chart and table in $results (parity.png, parity.md, parity.json); exit $status"
  exit $status
}
[ "$mode" = parity ] && parity "$@"

config=${CONFIG:-$repo/configs/resnet50_ffcv16.toml}
read -r -a seeds <<<"${SEEDS:-0 1 2 3}"
loader=${LOADER:-dataloader}
compile=${COMPILE:-1}
cache_mode=${COMPILE_CACHE:-cold}
workers=${PY_WORKERS:-$(($(nproc) > 1 ? $(nproc) - 1 : 1))}
read -r -a extra <<<"${EXTRA:-}"
classes=${TTA_CLASSES:-100} train_n=${TTA_TRAIN:-500} val_n=${TTA_VAL:-50} size=${TTA_SIZE:-500x375}
data=${DATA:-$cache/datasets/tta-c$classes-t$train_n-v$val_n-$size-photo}
log() { echo "[tta $(date +%H:%M:%S)] $*" >&2; }
case $loader in dataloader | dali) ;; *) echo "error: LOADER must be dataloader or dali, got '$loader'" >&2; exit 2 ;; esac
case $cache_mode in cold | warm) ;; *) echo "error: COMPILE_CACHE must be cold or warm, got '$cache_mode'" >&2; exit 2 ;; esac
"$python" -c 'import torch, torchvision' || { echo "error: $python cannot import torch and torchvision" >&2; exit 2; }

if [ -z "${DATA:-}" ] && [ ! -f "$data/.complete" ]; then
  log "generating $classes classes x ($train_n train + $val_n val) photo-like $size JPEGs in $data"
  rm -rf "$data"
  "$bin" gen-data --out "$data" --classes "$classes" --train-per-class "$train_n" --val-per-class "$val_n" \
    --size "$size" --photo --quality 90 --seed 12 >/dev/null
  touch "$data/.complete"
fi
n_classes=$(find "$data/train" -mindepth 1 -maxdepth 1 -type d | wc -l)
n_val=$(find "$data/val" -type f | wc -l)
n_train=$(find "$data/train" -type f | wc -l)
if [ "$n_classes" -lt 100 ] || [ "$n_val" -lt 5000 ] || [ "${#seeds[@]}" -lt 4 ]; then
  log "note: $n_classes classes, $n_val val images, ${#seeds[@]} seed(s): a smoke run, below what the comparison asks (>= 100, >= 5,000, >= 4)"
fi
if [ "$mode" = project ]; then
  config=${PROJECT_CONFIG:-$repo/configs/resnet18_ffcv16.toml}
  rm -rf "$out/project-run"
  log "pinfeed, $(basename "$config")"
  "$python" "$repo/scripts/timed_run.py" --metrics "$out/project-run/*/metrics.jsonl" --out "$out/project.jsonl" -- \
    "$bin" train --config "$config" "data.root=\"$data\"" "${extra[@]}" "$@" "run.dir=\"$out/project-run\"" \
    >"$out/project.log" 2>&1 ||
    { echo "error: the run failed: see $out/project.log" >&2; tail -5 "$out/project.log" >&2; exit 1; }
  "$python" "$repo/scripts/tables.py" project --images "$n_train" "$n_val" --project 1281167 50000 \
    ${REPORTED:+--reported "$REPORTED" --reported-label "${REPORTED_LABEL:-reported}"} --json "$out/project.json" \
    "$out/project.jsonl" | tee "$out/project.md"
  exit 0
fi
# Every file read once before the first run: no run pays the disk that the next one finds in the page cache.
find "$data" -type f -name '*.*' -print0 | xargs -0 cat >/dev/null

overrides=("data.root=\"$data\"" "${extra[@]}" "$@")
compile_flag=()
[ "$compile" = 1 ] && compile_flag=(--compile --compile-mode "${COMPILE_MODE:-default}")
case ${WARMUP:-1} in 0 | 1 | only) ;; *) echo "error: WARMUP must be 0, 1 or only, got '$WARMUP'" >&2; exit 2 ;; esac
if [ "${WARMUP:-1}" = only ] && [ "$cache_mode" != warm ]; then
  echo "error: WARMUP=only warms the caches for COMPILE_CACHE=warm runs; set COMPILE_CACHE=warm" >&2; exit 2
fi
if [ "$cache_mode" = warm ] && [ "${WARMUP:-1}" != 0 ]; then
  # Untimed runs of 2 epochs, one at each end of the ramp, with the evaluation: Python's Inductor and Triton caches
  # and the driver's cache of the kernels cuDNN compiles for pinfeed are then as a second run finds them.
  short=(train.epochs=2 train.warmup_epochs=1 data.ramp_start=0 data.ramp_end=1)
  log "warm-up runs (untimed): pinfeed, then Python"
  "$bin" train --config "$config" "${overrides[@]}" "${short[@]}" "run.dir=\"$out/warmup\"" "run.name=\"warmup\"" \
    >"$out/pinfeed-warmup.log" 2>&1 ||
    { echo "error: the pinfeed warm-up run failed: see $out/pinfeed-warmup.log" >&2; tail -5 "$out/pinfeed-warmup.log" >&2; exit 1; }
  "$python" "$repo/scripts/reference_train.py" --config "$config" "${overrides[@]}" "${short[@]}" \
    --out "$out/python-warmup.metrics.jsonl" --loader "$loader" --workers "$workers" "${compile_flag[@]}" \
    >"$out/python-warmup.log" 2>&1 ||
    { echo "error: the Python warm-up run failed: see $out/python-warmup.log" >&2; tail -5 "$out/python-warmup.log" >&2; exit 1; }
  rm -rf "$out/warmup"
  if [ "${WARMUP:-1}" = only ]; then log "caches warm; no timed run (WARMUP=only)"; exit 0; fi
fi
start=$(date +%s)
pinfeed_files=() python_files=()
for seed in "${seeds[@]}"; do
  run_dir=$out/pinfeed-seed$seed
  rm -rf "$run_dir"
  log "pinfeed, seed $seed"
  "$python" "$repo/scripts/timed_run.py" --metrics "$run_dir/*/metrics.jsonl" --out "$out/pinfeed-seed$seed.jsonl" -- \
    "$bin" train --config "$config" "${overrides[@]}" "train.seed=$seed" "run.dir=\"$run_dir\"" \
    "run.name=\"tta-seed$seed\"" >"$out/pinfeed-seed$seed.log" 2>&1 ||
    { echo "error: pinfeed, seed $seed failed: see $out/pinfeed-seed$seed.log" >&2; tail -5 "$out/pinfeed-seed$seed.log" >&2; exit 1; }
  tail -1 "$out/pinfeed-seed$seed.log" >&2
  pinfeed_files+=("$out/pinfeed-seed$seed.jsonl")

  raw=$out/python-seed$seed.metrics.jsonl
  rm -f "$raw"  # timed_run.py follows the file from its first line: no earlier run's lines
  caches=()
  if [ "$cache_mode" = cold ]; then
    rm -rf "$out/compile-cache-seed$seed"
    caches=("TORCHINDUCTOR_CACHE_DIR=$out/compile-cache-seed$seed/inductor" "TRITON_CACHE_DIR=$out/compile-cache-seed$seed/triton")
  fi
  log "Python ($loader${compile_flag:+, torch.compile}), seed $seed"
  env "${caches[@]}" PYTHONUNBUFFERED=1 "$python" "$repo/scripts/timed_run.py" --metrics "$raw" \
    --out "$out/python-seed$seed.jsonl" -- "$python" "$repo/scripts/reference_train.py" --config "$config" \
    "${overrides[@]}" "train.seed=$seed" --out "$raw" --loader "$loader" --workers "$workers" "${compile_flag[@]}" \
    >"$out/python-seed$seed.log" 2>&1 ||
    { echo "error: Python, seed $seed failed: see $out/python-seed$seed.log" >&2; tail -5 "$out/python-seed$seed.log" >&2; exit 1; }
  tail -1 "$out/python-seed$seed.log" >&2
  python_files+=("$out/python-seed$seed.jsonl")
done

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)
note="${gpu:-no GPU}, $(nproc) cores; $(basename "$config")${EXTRA:+ with $EXTRA}${*:+ $*}; data $(basename "$data") ($n_train train, $n_val val images, $n_classes classes); Python: reference_train.py --loader $loader --workers $workers${compile_flag:+ --compile --compile-mode ${COMPILE_MODE:-default} (compile cache $cache_mode)}, torch $("$python" -c 'import torch, torchvision; print(torch.__version__ + ", torchvision " + torchvision.__version__)'); scripts/time_to_accuracy.sh, $(($(date +%s) - start)) s for all runs."
png=()
"$python" -c 'import matplotlib' 2>/dev/null && png=(--png "$out/tta.png")
"$python" "$repo/scripts/tables.py" tta --pinfeed "${pinfeed_files[@]}" --python "${python_files[@]}" \
  --seeds "${seeds[@]}" --md "$out/tta.md" --json "$out/tta.json" "${png[@]}" --note "$note" \
  --images "$n_train" "$n_val" --project 1281167 50000  # ImageNet-1k's train and val images
log "table in $out/tta.md and $out/tta.json${png:+, curves in $out/tta.png}"
