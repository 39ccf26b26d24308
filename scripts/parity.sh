#!/usr/bin/env bash
# Accuracy parity: trains pinfeed and the torchvision reference (scripts/reference_train.py) with one
# recipe, configs/parity_resnet50.toml, on one generated dataset, two seeds each, one run after the other; then
# scripts/plot_parity.py writes parity.png, parity.md and parity.json and fails (exit 1) when the mean final
# val top-1 of the two differs by more than PARITY_THRESHOLD points. About 6 minutes on one H200.
#   usage: scripts/parity.sh PINFEED_BIN OUT_DIR
#   OUT_DIR gets each run's log, pinfeed's run folders and every run's per-epoch JSON lines.
#   PARITY_RESULTS    where the chart and table go (default: OUT_DIR/results)
#   PARITY_DATA       ImageFolder to use (default: generated once under ~/.cache/pinfeed/datasets, see below)
#   PARITY_CLASSES PARITY_TRAIN PARITY_VAL PARITY_SIZE   the generated data (default 24, 500, 100 per class, 320x256)
#   PARITY_SEEDS      (default "0 1")   PARITY_THRESHOLD (default 1.0 points)   PARITY_CONFIG (default the above)
#   PARITY_OVERRIDES  section.key=value overrides given to both sides (e.g. "train.epochs=2 train.device=cpu")
#   PARITY_WORKERS    DataLoader workers of the reference (default: as pinfeed's decode threads, cores - 3)
#   PARITY_SIDES      which sides run (default "pinfeed torchvision"); a side left out must have its runs'
#                     JSON lines in OUT_DIR already (<side>-seed<N>.jsonl, from an earlier run of the same recipe)
#   PYTHON            Python with torch, torchvision and matplotlib (default: the venv scripts/setup.sh made,
#                     named in the build folder's .venv_path beside PINFEED_BIN, else python3)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:?usage: scripts/parity.sh PINFEED_BIN OUT_DIR}
out=${2:?usage: scripts/parity.sh PINFEED_BIN OUT_DIR}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
[ -x "$bin" ] || { echo "error: $bin is not an executable" >&2; exit 2; }
export PINFEED_BIN=$bin  # reference_train.py asks it for every config key's default
mkdir -p "$out"
out=$(cd "$out" && pwd)
venv_path=$(dirname "$bin")/../.venv_path
python=${PYTHON:-$([ -f "$venv_path" ] && echo "$(cat "$venv_path")/bin/python" || echo python3)}
config=${PARITY_CONFIG:-$repo/configs/parity_resnet50.toml}
results=${PARITY_RESULTS:-$out/results}
read -r -a seeds <<<"${PARITY_SEEDS:-0 1}"
threshold=${PARITY_THRESHOLD:-1.0}
classes=${PARITY_CLASSES:-24} train_n=${PARITY_TRAIN:-500} val_n=${PARITY_VAL:-100} size=${PARITY_SIZE:-320x256}
read -r -a overrides <<<"${PARITY_OVERRIDES:-}"
sides=" ${PARITY_SIDES:-pinfeed torchvision} "
cache=${PINFEED_CACHE:-$HOME/.cache/pinfeed}
data=${PARITY_DATA:-$cache/datasets/parity-c$classes-t$train_n-v$val_n-$size-photo}
log() { echo "[parity $(date +%H:%M:%S)] $*" >&2; }

"$python" -c 'import torch, torchvision' || { echo "error: $python cannot import torch and torchvision" >&2; exit 2; }
"$python" -c 'import matplotlib' 2>/dev/null ||
  { echo "error: $python cannot import matplotlib for parity.png (scripts/setup.sh installs it into its venv)" >&2; exit 2; }
start=$(date +%s)
if [ -z "${PARITY_DATA:-}" ] && [ ! -f "$data/.complete" ]; then
  log "generating $classes classes x ($train_n train + $val_n val) photo-like ${size} JPEGs in $data"
  rm -rf "$data"
  "$bin" gen-data --out "$data" --classes "$classes" --train-per-class "$train_n" --val-per-class "$val_n" \
    --size "$size" --photo --quality 90 --seed 12
  touch "$data/.complete"
fi

pinfeed_files=() reference_files=()
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
note="$(date -u +'%Y-%m-%d %H:%M UTC'), ${gpu:-no GPU}, $(nproc) cores; $(basename "$config")${PARITY_OVERRIDES:+ with $PARITY_OVERRIDES}; data $(basename "$data") ($(find "$data/train" -type f | wc -l) train, $(find "$data/val" -type f 2>/dev/null | wc -l) val images); torch $("$python" -c 'import torch, torchvision; print(torch.__version__ + ", torchvision " + torchvision.__version__)'); scripts/parity.sh, $(($(date +%s) - start)) s for all runs${PARITY_SIDES:+ (run now: $PARITY_SIDES; the other side: earlier runs)}."
log "all runs done in $(($(date +%s) - start)) s"
status=0
"$python" "$repo/scripts/plot_parity.py" --pinfeed "${pinfeed_files[@]}" --reference "${reference_files[@]}" \
  --seeds "${seeds[@]}" --out-dir "$results" --threshold "$threshold" --note "$note" || status=$?
log "chart and table in $results (parity.png, parity.md, parity.json); exit $status"
exit $status
