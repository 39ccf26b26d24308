#!/usr/bin/env bash
# The training step against its Python peers, side by side in one run (docs/training-step.md): ResNet-50 with
# the batch already on the GPU (gpu_resident: the compute ceiling), channels_last, SGD momentum, a CUDA graph for
# pinfeed; pinfeed with its own kernels (fused BatchNorm, at 14x14 and smaller through cuDNN's graph API; stem max
# pool, gradient sums in GEMMs; in fp16 the input padded to 4 channels, model.pad_input, and each conv3 writing its
# BN's statistics), in fp16 without the last, without the graph API, and with ATen's, torchvision eager and
# torchvision + torch.compile, each in bf16 and fp16 (loss scaling). Then the table (scripts/step_table.py) into OUT_DIR/table.md.
#   usage: scripts/bench_step.sh OUT_DIR
#   PINFEED_BIN           pinfeed executable (default: build/app/pinfeed, built by setup.sh if missing)
#   PINFEED_STEP_DATA     ImageFolder (default: generated once, 10 classes x 64 images of 500x375: gpu_resident
#                         reads one batch)
#   BATCH SIZE            batch per step and crop side (default 256, 224)
#   PRECISIONS            default "bf16 fp16"
#   PARTS                 any of: pinfeed small ex_bn unfused eager compile (default: all; small, fp16 only: pinfeed
#                         without conv3 writing its BN's statistics, model.bn_graph small; ex_bn: pinfeed with every
#                         fused BatchNorm by cuDNN's ...Ex calls, model.bn_graph off)
#   COMPILE_MODES         torch.compile's modes, a row each (default "default reduce-overhead": CUDA graphs)
#   REPEATS WARMUP STEPS  per row (default 3, 15, 40); PYTHON (default python3, with torch and torchvision)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/bench_step.sh OUT_DIR}
mkdir -p "$out"
bin=${PINFEED_BIN:-$repo/build/app/pinfeed}
[ -x "$bin" ] || "$repo/scripts/setup.sh"
cache=${PINFEED_CACHE:-$HOME/.cache/pinfeed}
data=${PINFEED_STEP_DATA:-$cache/datasets/step-photo-v1}
batch=${BATCH:-256} size=${SIZE:-224} precisions=${PRECISIONS:-bf16 fp16} parts=${PARTS:-pinfeed small ex_bn unfused eager compile}
compile_modes=${COMPILE_MODES:-default reduce-overhead}
repeats=${REPEATS:-3} warmup=${WARMUP:-15} steps=${STEPS:-40}
python=${PYTHON:-python3}

if [ ! -f "$data/.complete" ] && [ -z "${PINFEED_STEP_DATA:-}" ]; then
  rm -rf "$data"
  "$bin" gen-data --out "$data" --classes 10 --train-per-class 64 --val-per-class 0 --size 500x375 --photo >/dev/null
  touch "$data/.complete"
fi
cd "$repo"
pinfeed_row() {  # NAME OVERRIDES...
  local name=$1; shift
  "$bin" bench --config configs/bench_resnet50.toml --modes gpu_resident --repeats "$repeats" --warmup "$warmup" \
    --steps "$steps" --out "$out/$name" "data.root=\"$data\"" "train.batch_size=$batch" "data.image_size=$size" \
    train.channels_last=true pipeline.transfer_dtype=uint8 train.cuda_graph=true "$@" > "$out/$name.log" 2>&1
}
python_row() {  # NAME FLAGS...
  local name=$1; shift
  "$python" scripts/reference_pytorch.py --data "$data" --modes gpu_resident --batch-size "$batch" \
    --image-size "$size" --channels-last --transfer-dtype uint8 --repeats "$repeats" --warmup "$warmup" \
    --steps "$steps" --out "$out/$name.json" "$@" > "$out/$name.log" 2>&1
}
rows=()
add() {  # LABEL FILE COMMAND...: runs the row; a failed row is named and left out of the table
  local label=$1 file=$2; shift 2
  if "$@"; then rows+=("$label=$file"); else echo "[bench_step] $label failed: see ${file%.json}.log" >&2; fi
}
for p in $precisions; do
  if [[ " $parts " == *" compile "* ]]; then
    for mode in $compile_modes; do
      tag=$([ "$mode" = default ] || echo "-$mode")
      add "torchvision + torch.compile${tag:+ $mode}, $p" "$out/torch-compile$tag-$p.json" python_row "torch-compile$tag-$p" \
        --precision "$p" --compile --compile-mode "$mode"
    done
  fi
  [[ " $parts " == *" eager "* ]] &&
    add "torchvision eager, $p" "$out/torch-eager-$p.json" python_row "torch-eager-$p" --precision "$p"
  [[ " $parts " == *" unfused "* ]] &&
    add "pinfeed, ATen's BatchNorm and max pool, $p" "$out/pinfeed-unfused-$p/bench.json" pinfeed_row "pinfeed-unfused-$p" "train.precision=$p" model.fused_bn=off model.max_pool=aten model.pad_input=off model.fold_grad_add=off
  [[ " $parts " == *" ex_bn "* ]] &&
    add "pinfeed, fused BatchNorm by cuDNN's ...Ex calls only, own max pool, gradient sums in GEMMs$([ "$p" = fp16 ] && echo ', input padded to 4 channels'), $p" "$out/pinfeed-ex-bn-$p/bench.json" \
      pinfeed_row "pinfeed-ex-bn-$p" "train.precision=$p" model.fused_bn=on model.max_pool=pinfeed 'model.bn_graph="off"'
  [[ " $parts " == *" small "* && $p == fp16 ]] &&
    add "pinfeed, without conv3's BN statistics (model.bn_graph small), input padded to 4 channels, $p" "$out/pinfeed-small-$p/bench.json" \
      pinfeed_row "pinfeed-small-$p" "train.precision=$p" model.fused_bn=on model.max_pool=pinfeed 'model.bn_graph="small"'
  [[ " $parts " == *" pinfeed "* ]] &&
    add "pinfeed, fused BatchNorm, own max pool, gradient sums in GEMMs$([ "$p" = fp16 ] && echo ", input padded to 4 channels, conv3 writing its BN's statistics"), $p" "$out/pinfeed-$p/bench.json" \
      pinfeed_row "pinfeed-$p" "train.precision=$p" model.fused_bn=on model.max_pool=pinfeed
done
(( ${#rows[@]} )) || { echo "[bench_step] no row ran" >&2; exit 1; }
base=${rows[0]%%=*}
"$python" scripts/step_table.py --base "$base" --json "$out/table.json" "${rows[@]}" | tee "$out/table.md"
