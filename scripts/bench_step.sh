#!/usr/bin/env bash
# The training step (docs/training-step.md, docs/multi-gpu.md): ResNet-50 with the batch already on the GPU
# (gpu_resident: the compute ceiling), channels_last, SGD momentum, each row in its own process, one after the
# other in one run.
#
#   scripts/bench_step.sh OUT_DIR
#     pinfeed against its Python peers: pinfeed with its own kernels (fused BatchNorm, at 14x14 and smaller through
#     cuDNN's graph API; stem max pool, gradient sums in GEMMs; in fp16 the input padded to 4 channels,
#     model.pad_input, and each conv3 writing its BN's statistics), a CUDA graph; in fp16 without the last, without
#     the graph API, with ATen's kernels; torchvision eager and torchvision + torch.compile; each in bf16 and fp16
#     (loss scaling). Then the table (scripts/tables.py step) into OUT_DIR/table.md.
#       BATCH SIZE            batch per step and crop side (default 256, 224)
#       ARCH                  model.arch and the same torchvision model (default resnet50)
#       PRECISIONS            default "bf16 fp16"
#       PARTS                 any of: pinfeed small ex_bn unfused eager compile (default: all; small, fp16 only:
#                             pinfeed without conv3 writing its BN's statistics, model.bn_graph small; ex_bn: pinfeed
#                             with every fused BatchNorm by cuDNN's ...Ex calls, model.bn_graph off)
#       COMPILE_MODES         torch.compile's modes, a row each (default "default reduce-overhead": CUDA graphs)
#       REPEATS WARMUP STEPS  per row (default 3, 15, 40); PYTHON (default python3, with torch and torchvision)
#
#   scripts/bench_step.sh --archs OUT_DIR
#     The ResNet family: for each of ARCHS (default: every model.arch, torchvision's order), pinfeed's step beside
#     torchvision's same model under torch.compile reduce-overhead, PRECISIONS (default fp16), one arch after the
#     other (OUT_DIR/ARCH/ holds each arch's rows, as the first form writes them); then the table of every arch
#     (scripts/tables.py archs) into OUT_DIR/archs.md and archs.json. BATCH SIZE REPEATS WARMUP STEPS as above.
#
#   scripts/bench_step.sh --ab BIN_A BIN_B OUT_DIR [key=value ...]
#     Two pinfeed builds' fp16 step side by side, interleaved A B A B (a change that must not cost speed: "before"
#     against "after"); prints each side's median over every repeat. PRECISION (fp16), BATCH, SIZE, ROUNDS (2),
#     REPEATS, WARMUP, STEPS as above; A_KEYS, B_KEYS: key=value overrides of one side only (one build twice,
#     B_KEYS=dist.one_rank_group=true: the step through a 1-rank group against the same step without one).
#
#   scripts/bench_step.sh --defaults OUT_DIR [key=value ...]
#     A new user's config (data.root alone) against configs/resnet50_imagenet.toml, trained on the same JPEG files:
#     the minimal config in its default precision (tf32) and in fp16, the shipped config at tf32 and at its own
#     fp16, and the defaults before they were "auto" (CPU decoder, contiguous, eager, pageable). Each run: EPOCHS
#     (default 3) epochs without evaluation, samples/s the mean over the epochs after the first. Writes
#     OUT_DIR/defaults.json and prints the table. DATA: an ImageFolder (default: generated once, 100 classes x 96
#     photo-like JPEGs of 500x375 + 4 val).
#
#   scripts/bench_step.sh --fusion OUT_DIR
#     Whether NVIDIA's MLPerf form of the convolution + BatchNorm fusions would pay over pinfeed's fp16 step
#     (docs/training-step.md#the-cudnn-frontend-fusions): builds benchmarks/bench_conv_bn_fusion.cu against the
#     cuDNN frontend's headers and runs it. Writes OUT_DIR/fusion.json (every layer's times), OUT_DIR/fusion.txt
#     (the program's table) and OUT_DIR/fusion.md (scripts/tables.py fusion). BATCH (256), PLANS (plans tried per
#     graph, 8), PINFEED_BUILD_DIR (default <repo>/build), PINFEED_CUDNN_FRONTEND_INCLUDE (default: the one the
#     build found, the nvidia-cudnn-frontend wheel's that scripts/setup.sh installs).
#
#   scripts/bench_step.sh --multi-gpu CONFIG OUT_DIR N [key=value ...]
#     Scaling on one machine: `pinfeed bench -c CONFIG` on 1 rank, on N ranks under torchrun (gradient all-reduce
#     overlapped with backward) and on N ranks with the overlap off, ROUNDS (2) times in that order. TORCHRUN
#     (default: torchrun on PATH, else the setup.sh venv's), MODES (dual_stream,gpu_resident), REPEATS (2),
#     WARMUP (15), STEPS (50).
#
# Every mode: PINFEED_BIN (default: build/app/pinfeed, built by setup.sh if missing); PINFEED_STEP_DATA, the
# ImageFolder of the first two (default: generated once, 10 classes x 64 photo-like JPEGs of 500x375: gpu_resident
# reads one batch).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: scripts/bench_step.sh [--archs | --ab BIN_A BIN_B | --defaults | --fusion | --multi-gpu CONFIG] OUT_DIR ..."
bin=${PINFEED_BIN:-$repo/build/app/pinfeed}
cache=${PINFEED_CACHE:-$HOME/.cache/pinfeed}
python=${PYTHON:-python3}
batch=${BATCH:-256} size=${SIZE:-224} repeats=${REPEATS:-3} warmup=${WARMUP:-15} steps=${STEPS:-40}

# gen_data DIR CLASSES TRAIN VAL [flags]: a generated ImageFolder of photo-like 500x375 JPEGs, made once.
gen_data() {
  local dir=$1 classes=$2 train=$3 val=$4
  shift 4
  [ -f "$dir/.complete" ] && return 0
  rm -rf "$dir"
  "$bin" gen-data --out "$dir" --classes "$classes" --train-per-class "$train" --val-per-class "$val" \
    --size 500x375 --photo "$@" >/dev/null
  touch "$dir/.complete"
}
step_data() {  # the one small folder gpu_resident rows read
  data=${PINFEED_STEP_DATA:-$cache/datasets/step-photo-v1}
  [ -n "${PINFEED_STEP_DATA:-}" ] || gen_data "$data" 10 64 0
}

table() {  # OUT_DIR
  local out=${1:?$usage}
  mkdir -p "$out"
  local precisions=${PRECISIONS:-bf16 fp16} parts=${PARTS:-pinfeed small ex_bn unfused eager compile}
  local compile_modes=${COMPILE_MODES:-default reduce-overhead} arch=${ARCH:-resnet50} gemm_sums=", gradient sums in GEMMs"
  local conv3=", conv3 writing its BN's statistics"
  case $arch in resnet18 | resnet34) gemm_sums="" conv3="" ;; esac  # BasicBlock: no 1x1 convs, the plain route
  step_data
  cd "$repo"
  pinfeed_row() {  # NAME OVERRIDES...
    local name=$1; shift
    "$bin" bench --config configs/bench_resnet50.toml --modes gpu_resident --repeats "$repeats" --warmup "$warmup" \
      --steps "$steps" --out "$out/$name" "data.root=\"$data\"" "train.batch_size=$batch" "data.image_size=$size" \
      train.channels_last=true pipeline.transfer_dtype=uint8 train.cuda_graph=true "model.arch=$arch" "$@" \
      > "$out/$name.log" 2>&1
  }
  python_row() {  # NAME FLAGS...
    local name=$1; shift
    "$python" scripts/reference_pytorch.py --data "$data" --modes gpu_resident --batch-size "$batch" \
      --image-size "$size" --channels-last --transfer-dtype uint8 --repeats "$repeats" --warmup "$warmup" \
      --steps "$steps" --arch "$arch" --out "$out/$name.json" "$@" > "$out/$name.log" 2>&1
  }
  rows=()
  add() {  # LABEL FILE COMMAND...: runs the row; a failed row is named and left out of the table
    local label=$1 file=$2; shift 2
    if "$@"; then rows+=("$label=$file"); else echo "[bench_step] $label failed: see ${file%.json}.log" >&2; fi
  }
  local p mode tag
  for p in $precisions; do
    if [[ " $parts " == *" compile "* ]]; then
      for mode in $compile_modes; do
        tag=$([ "$mode" = default ] || echo "-$mode")
        add "torchvision + torch.compile${tag:+ $mode}, $p" "$out/torch-compile$tag-$p.json" \
          python_row "torch-compile$tag-$p" --precision "$p" --compile --compile-mode "$mode"
      done
    fi
    [[ " $parts " == *" eager "* ]] &&
      add "torchvision eager, $p" "$out/torch-eager-$p.json" python_row "torch-eager-$p" --precision "$p"
    [[ " $parts " == *" unfused "* ]] &&
      add "pinfeed, ATen's BatchNorm and max pool, $p" "$out/pinfeed-unfused-$p/bench.json" \
        pinfeed_row "pinfeed-unfused-$p" "train.precision=$p" model.fused_bn=off model.max_pool=aten \
        model.pad_input=off model.fold_grad_add=off
    [[ " $parts " == *" ex_bn "* ]] &&
      add "pinfeed, fused BatchNorm by cuDNN's ...Ex calls only, own max pool$gemm_sums$([ "$p" = fp16 ] && echo ', input padded to 4 channels'), $p" \
        "$out/pinfeed-ex-bn-$p/bench.json" \
        pinfeed_row "pinfeed-ex-bn-$p" "train.precision=$p" model.fused_bn=on model.max_pool=pinfeed 'model.bn_graph="off"'
    [[ " $parts " == *" small "* && $p == fp16 ]] &&
      add "pinfeed, without conv3's BN statistics (model.bn_graph small), input padded to 4 channels, $p" \
        "$out/pinfeed-small-$p/bench.json" \
        pinfeed_row "pinfeed-small-$p" "train.precision=$p" model.fused_bn=on model.max_pool=pinfeed 'model.bn_graph="small"'
    [[ " $parts " == *" pinfeed "* ]] &&
      add "pinfeed, fused BatchNorm, own max pool$gemm_sums$([ "$p" = fp16 ] && echo ", input padded to 4 channels$conv3"), $p" \
        "$out/pinfeed-$p/bench.json" \
        pinfeed_row "pinfeed-$p" "train.precision=$p" model.fused_bn=on model.max_pool=pinfeed
  done
  (( ${#rows[@]} )) || { echo "[bench_step] no row ran" >&2; exit 1; }
  "$python" scripts/tables.py step --base "${rows[0]%%=*}" --json "$out/table.json" "${rows[@]}" | tee "$out/table.md"
}

archs() {  # OUT_DIR
  local out=${1:?$usage} a
  mkdir -p "$out"
  local all=(resnet18 resnet34 resnet50 resnet101 resnet152 wide_resnet50_2 wide_resnet101_2 resnext50_32x4d
             resnext101_32x8d)
  local done=()
  for a in ${ARCHS:-${all[*]}}; do
    echo "[bench_step] $a" >&2
    if (ARCH=$a PARTS="compile pinfeed" PRECISIONS=${PRECISIONS:-fp16} COMPILE_MODES=reduce-overhead table "$out/$a" \
          > /dev/null); then
      done+=("$out/$a/table.json")
    else
      echo "[bench_step] $a: no table (see $out/$a/*.log)" >&2
    fi
  done
  (( ${#done[@]} )) || { echo "[bench_step] no arch ran" >&2; exit 1; }
  "$python" "$repo/scripts/tables.py" archs --json "$out/archs.json" "${done[@]}" | tee "$out/archs.md"
}

ab() {  # BIN_A BIN_B OUT_DIR [overrides...]
  local a=${1:?$usage} b=${2:?$usage} out=${3:?$usage}
  shift 3
  mkdir -p "$out"
  local precision=${PRECISION:-fp16} rounds=${ROUNDS:-2} r side run_bin side_keys
  bin=$b step_data
  cd "$repo"
  for r in $(seq 1 "$rounds"); do
    for side in a b; do
      run_bin=$a side_keys=${A_KEYS:-}
      [ $side = b ] && run_bin=$b side_keys=${B_KEYS:-}
      "$run_bin" bench --config configs/bench_resnet50.toml --modes gpu_resident --repeats "$repeats" \
        --warmup "$warmup" --steps "$steps" --out "$out/$side-$r" "data.root=\"$data\"" "train.batch_size=$batch" \
        "data.image_size=$size" train.channels_last=true pipeline.transfer_dtype=uint8 train.cuda_graph=true \
        "train.precision=$precision" model.fused_bn=on model.max_pool=pinfeed "$@" $side_keys > "$out/$side-$r.log" 2>&1
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
}

defaults() {  # OUT_DIR [overrides...]
  local out=${1:?$usage}
  shift
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  local data=${DATA:-$cache/datasets/feed-photo-v1}  # bench_feed.sh's files
  [ -n "${DATA:-}" ] || gen_data "$data" 100 96 4 --quality 92
  printf '[data]\nroot = "%s"\n' "$data" > "$out/minimal.toml"
  local common=("train.epochs=${EPOCHS:-3}" "train.eval=false" "$@")
  local shipped=("$repo/configs/resnet50_imagenet.toml" "data.root=\"$data\"" "model.num_classes=0")
  run() {  # name config overrides...
    local name=$1 config=$2
    shift 2
    "$bin" train -c "$config" "$@" "${common[@]}" "run.dir=\"$out/runs-$name\"" > "$out/$name.log" 2>&1 ||
      { echo "[bench_step] $name failed: see $out/$name.log" >&2; tail -5 "$out/$name.log" >&2; exit 1; }
    echo "[bench_step] $name: $(grep -m1 'start-up took' "$out/$name.log" || true)"
  }
  run minimal-tf32 "$out/minimal.toml"
  run shipped-tf32 "${shipped[@]}" 'train.precision="tf32"'
  run minimal-fp16 "$out/minimal.toml" 'train.precision="fp16"'
  run shipped-fp16 "${shipped[@]}"
  run old-defaults-tf32 "$out/minimal.toml" 'data.decoder="cpu"' train.channels_last=false train.cuda_graph=false \
    'pipeline.mode="pageable"'
  python3 - "$out" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
rows = []
for name in ["minimal-tf32", "shipped-tf32", "minimal-fp16", "shipped-fp16", "old-defaults-tf32"]:
    metrics = sorted(glob.glob(f"{out}/runs-{name}/*/metrics.jsonl"))[-1]
    epochs = [json.loads(line) for line in open(metrics)]
    later = [e["samples_per_s"] for e in epochs[1:]]
    rows.append({"run": name, "samples_per_s": statistics.mean(later), "min": min(later), "max": max(later),
                 "first_epoch_s": epochs[0]["epoch_s"], "mode": epochs[-1]["mode"], "epochs": epochs})
json.dump(rows, open(f"{out}/defaults.json", "w"), indent=1)
by = {r["run"]: r for r in rows}
print("| run | samples/s (epochs 2+) [min-max] | against the shipped config | first epoch s | mode |")
print("| --- | --- | --- | --- | --- |")
for r in rows:
    prec = r["run"].rsplit("-", 1)[1]
    ratio = r["samples_per_s"] / by[f"shipped-{prec}"]["samples_per_s"]
    print(f"| {r['run']} | {r['samples_per_s']:,.0f} [{r['min']:,.0f}-{r['max']:,.0f}] | {ratio:.3f} | "
          f"{r['first_epoch_s']:.1f} | {r['mode']} |")
PY
}

fusion() {  # OUT_DIR
  local out=${1:?$usage}
  mkdir -p "$out"
  local build=${PINFEED_BUILD_DIR:-$repo/build}
  [ -f "$build/build.ninja" ] || "$repo/scripts/setup.sh"
  local include=${PINFEED_CUDNN_FRONTEND_INCLUDE:-$(sed -n 's/^PINFEED_CUDNN_FRONTEND_INCLUDE:PATH=//p' "$build/CMakeCache.txt")}
  [ -f "$include/cudnn_frontend.h" ] || {
    echo "[bench_step] no cudnn_frontend.h in '$include': run scripts/setup.sh (it installs nvidia-cudnn-frontend)," \
      "then cmake -S . -B $build -U PINFEED_CUDNN_FRONTEND_INCLUDE, or set PINFEED_CUDNN_FRONTEND_INCLUDE" >&2
    exit 1
  }
  [ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
  cmake -S "$repo" -B "$build" -DPINFEED_CUDNN_FRONTEND_INCLUDE="$include" -DPINFEED_BUILD_FUSION_BENCH=ON >/dev/null
  cmake --build "$build" --target bench_conv_bn_fusion
  # The folder's later builds leave the benchmark out again (a minute or two to compile); its executable stays.
  cmake -S "$repo" -B "$build" -DPINFEED_BUILD_FUSION_BENCH=OFF >/dev/null
  "$build/benchmarks/bench_conv_bn_fusion" --batch "$batch" --plans "${PLANS:-8}" --json "$out/fusion.json" |
    tee "$out/fusion.txt"
  python3 "$repo/scripts/tables.py" fusion "$out/fusion.json" | tee "$out/fusion.md"
}

multi_gpu() {  # CONFIG OUT_DIR N [overrides...]
  local config=${1:?$usage} out=${2:?$usage} n=${3:?$usage}
  shift 3
  local torchrun=${TORCHRUN:-$(command -v torchrun || echo "$(cat "$repo/build/.venv_path")/bin/torchrun")}
  local common=(--repeats "${REPEATS:-2}" --warmup "${WARMUP:-15}" --steps "${STEPS:-50}") r
  launch() { "$torchrun" --standalone --nproc-per-node="$n" --no-python "$bin" "$@"; }
  mkdir -p "$out"
  for r in $(seq 1 "${ROUNDS:-2}"); do
    echo "[bench_step] round $r: 1 rank" >&2
    "$bin" bench -c "$config" --modes "${MODES:-dual_stream,gpu_resident}" "${common[@]}" --out "$out/r$r-1rank" "$@"
    echo "[bench_step] round $r: $n ranks" >&2
    launch bench -c "$config" --modes "${MODES:-dual_stream,gpu_resident}" "${common[@]}" --out "$out/r$r-${n}ranks" "$@"
    echo "[bench_step] round $r: $n ranks, all-reduce after backward" >&2
    launch bench -c "$config" --modes gpu_resident "${common[@]}" --out "$out/r$r-${n}ranks-no-overlap" "$@" \
      dist.overlap=false
  done
}

case ${1:-} in
  --archs | --ab | --defaults | --fusion | --multi-gpu) mode=${1#--}; shift ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) echo "error: unknown option $1; $usage" >&2; exit 2 ;;
  "") echo "$usage" >&2; exit 2 ;;
  *) mode=table ;;
esac
[ "$mode" = fusion ] || [ "$mode" = ab ] || [ -x "$bin" ] || "$repo/scripts/setup.sh"
"${mode//-/_}" "$@"
