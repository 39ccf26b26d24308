# data.gpu_decode_share: a share of each batch decoded by the CPU workers (fewer nvJPEG calls per batch).
source .gpu/common.sh
B=/tmp/build-new/app/pinfeed
timeout 130 bash -c "$(declare -f build); R=$R; build /tmp/build-new ." || { echo build failed; pack; exit 1; }
timeout 30 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
b() {  # b NAME WORKERS SHARE MODES
  timeout 30 $B bench -c configs/bench_resnet50.toml $BS256 --decoder nvjpeg data.workers=$2 data.gpu_decode_share=$3 \
    --modes $4 --repeats 2 --warmup 6 --steps 20 --out $R/$1 > $R/$1.log 2>&1; echo "$1 rc=$?"
  grep -E "^\| pinfeed|nvJPEG:" $R/$1.log | sort -u | head -4; pack
}
b w2s100 2 1.0 dual_stream,gpu_resident
b w2s75 2 0.75 dual_stream
b w4s50 4 0.5 dual_stream
b w2s85 2 0.85 dual_stream
