#!/usr/bin/env bash
# Reproduces the comparison table (docs/transfer-modes.md): `pinfeed bench` for three configurations on
# photo-like JPEGs, the same configurations in Python PyTorch (scripts/reference_pytorch.py), then the
# combined tables and charts (scripts/plot_bench.py).
#   usage: scripts/bench.sh OUT_DIR
#   PINFEED_BIN           pinfeed executable (default: build/app/pinfeed, built by setup.sh if missing)
#   PINFEED_BENCH_DATA    ImageFolder to use (default: generated once, 100 classes x 128 images of 500x375)
#   BENCH_PARTS           any of: pinfeed uint8 graph reference plot (default: all)
#   BENCH_CONFIGS         any of: bs64-tf32 bs64-bf16-cl bs256-bf16-cl (default: all)
#   REPEATS WARMUP STEPS  per mode and repeat (default 3, 20, 100)
#   PYTHON                Python with torch and matplotlib (default: the venv scripts/setup.sh made, named in the
#                         build folder's .venv_path beside PINFEED_BIN, else python3)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/bench.sh OUT_DIR}
mkdir -p "$out"
bin=${PINFEED_BIN:-$repo/build/app/pinfeed}
[ -x "$bin" ] || "$repo/scripts/setup.sh"
cache=${PINFEED_CACHE:-$HOME/.cache/pinfeed}
data=${PINFEED_BENCH_DATA:-$cache/datasets/bench-photo-v1}
parts=${BENCH_PARTS:-pinfeed uint8 graph reference plot}
configs=${BENCH_CONFIGS:-bs64-tf32 bs64-bf16-cl bs256-bf16-cl}
repeats=${REPEATS:-3} warmup=${WARMUP:-20} steps=${STEPS:-100}
venv_path=$(dirname "$bin")/../.venv_path
python=${PYTHON:-$([ -f "$venv_path" ] && echo "$(cat "$venv_path")/bin/python" || echo python3)}
# The charts come last: find out now, not after the runs, that they cannot be drawn.
if [[ " $parts " == *" plot "* ]] && ! "$python" -c 'import matplotlib' 2>/dev/null; then
  echo "error: $python cannot import matplotlib for the charts (scripts/setup.sh installs it into its venv;" \
    "PYTHON=that venv's python), or leave \"plot\" out of BENCH_PARTS" >&2
  exit 3
fi

if [ ! -f "$data/.complete" ] && [ -z "${PINFEED_BENCH_DATA:-}" ]; then
  echo "[bench] generating photo-like JPEGs in $data" >&2
  rm -rf "$data"
  "$bin" gen-data --out "$data" --classes 100 --train-per-class 128 --val-per-class 0 --size 500x375 --photo --quality 92
  touch "$data/.complete"
fi

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
  if [[ " $parts " == *" uint8 "* ]]; then  # raw pixels over PCIe, normalised on the GPU
    "$bin" bench --config configs/bench_resnet50.toml --repeats "$repeats" --warmup "$warmup" --steps "$steps" \
      --modes dual_stream,gpu_resident,loader_only --out "$out/$c-uint8" "data.root=\"$data\"" \
      pipeline.transfer_dtype=uint8 $(overrides_for "$c")
  fi
  if [[ " $parts " == *" graph "* ]]; then  # uint8 + the training step replayed as a CUDA graph
    "$bin" bench --config configs/bench_resnet50.toml --repeats "$repeats" --warmup "$warmup" --steps "$steps" \
      --modes dual_stream,gpu_resident --out "$out/$c-graph" "data.root=\"$data\"" \
      pipeline.transfer_dtype=uint8 train.cuda_graph=true $(overrides_for "$c")
  fi
  if [[ " $parts " == *" reference "* ]]; then
    "$python" scripts/reference_pytorch.py --data "$data" $(ref_flags_for "$c") --repeats "$repeats" \
      --warmup "$warmup" --steps "$steps" --out "$out/$c/reference.json"
  fi
done
if [[ " $parts " == *" plot "* ]]; then
  "$python" scripts/plot_bench.py "$out" $configs
fi
