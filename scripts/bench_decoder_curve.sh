#!/usr/bin/env bash
# The decoder curve: samples/s against CPU threads for pinfeed's CPU decoder, pinfeed's GPU decoder
# (nvJPEG) and NVIDIA DALI (mixed and cpu decoders), same files, one machine, one after the other; then the chart.
#   usage: scripts/bench_decoder_curve.sh CONFIG OUT_DIR [section.key=value ...]   (overrides go to pinfeed)
#   THREADS (default "1 2 4 8 13"), REPEATS (2), WARMUP (10), STEPS (40), PINFEED_BIN (build/app/pinfeed),
#   DALI (default 1: also run scripts/reference_dali.py --sweep; 0: pinfeed only), PYTHON (python3)
# DALI needs nvidia-dali-cuda130 importable (on the GPU machine: ../shared/gpu/carry-wheels.sh, PYTHONPATH). It
# trains at its defaults, batch 256, bf16, channels_last: give pinfeed the same, e.g.
#   scripts/bench_decoder_curve.sh configs/bench_resnet50.toml out/curve train.batch_size=256 \
#     train.precision=bf16 train.channels_last=true pipeline.transfer_dtype=uint8
# Writes OUT_DIR/pinfeed-{cpu,nvjpeg}-wN/bench.json, OUT_DIR/resident/bench.json, OUT_DIR/dali.json and
# OUT_DIR/curve.png.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
config=${1:?usage: scripts/bench_decoder_curve.sh CONFIG OUT_DIR [overrides]} out=${2:?OUT_DIR}
shift 2
bin=${PINFEED_BIN:-$repo/build/app/pinfeed}
python=${PYTHON:-python3}
read -r -a threads <<<"${THREADS:-1 2 4 8 13}"
common=(--repeats "${REPEATS:-2}" --warmup "${WARMUP:-10}" --steps "${STEPS:-40}")
mkdir -p "$out"
log() { echo "[decoder_curve $(date +%H:%M:%S)] $*" >&2; }

log "pinfeed gpu_resident (the compute ceiling)"
"$bin" bench -c "$config" --modes gpu_resident "${common[@]}" --out "$out/resident" "$@"
benches=()
for w in "${threads[@]}"; do  # decoders interleaved per thread count: drift hits both alike
  for decoder in cpu nvjpeg; do
    log "pinfeed, decoder $decoder, $w decode threads"
    "$bin" bench -c "$config" --modes dual_stream --decoder "$decoder" "${common[@]}" --out "$out/pinfeed-$decoder-w$w" \
      "$@" data.workers="$w"
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
