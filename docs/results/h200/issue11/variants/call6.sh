# nvJPEG hardware engines reading the files from device memory (one pinned upload per batch) vs host input.
source .gpu/common.sh
B=/tmp/build-new/app/pinfeed
timeout 200 bash -c "$(declare -f build); R=$R; build /tmp/build-new ." || { echo build failed; pack; exit 1; }
timeout 60 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
timeout 90 ctest --test-dir /tmp/build-new -L gpu -R "GpuDecode" --timeout 60 --output-on-failure > $R/ctest_gpu.log 2>&1; echo "ctest rc=$?"
grep -E "tests passed|Failed|\*\*\*" $R/ctest_gpu.log | head -20
b() {  # b NAME SIZE GRAPH MODES [ENV...]
  local n=$1 s=$2 g=$3 m=$4; shift 4
  env "$@" timeout 45 $B bench -c configs/bench_resnet50.toml $BS256 data.image_size=$s --decoder nvjpeg data.workers=2 train.cuda_graph=$g \
    --modes $m --repeats 2 --warmup 6 --steps 20 --out $R/$n > $R/$n.log 2>&1; echo "$n rc=$?"
  grep -E "^\| pinfeed|nvJPEG|rror" $R/$n.log | sort -u | head -5
}
b dev224 224 false dual_stream,gpu_resident X=1
b devhi224 224 false dual_stream PINFEED_COPY_HIGH=1
b host224 224 false dual_stream PINFEED_NVJPEG_HOSTIN=1
b dev160 160 false dual_stream,gpu_resident,loader_only X=1
b devhi160 160 false dual_stream PINFEED_COPY_HIGH=1
b host160 160 false dual_stream PINFEED_NVJPEG_HOSTIN=1
b gdevhi224 224 true dual_stream,gpu_resident PINFEED_COPY_HIGH=1
b gdev224 224 true dual_stream X=1
b gdevhi160 160 true dual_stream,gpu_resident PINFEED_COPY_HIGH=1
env X=1 timeout 60 $B bench -c configs/bench_resnet50.toml $BS256 data.image_size=160 --decoder nvjpeg data.workers=2 \
  --modes dual_stream --repeats 1 --warmup 10 --steps 12 --trace-steps 2-10 --out $R/trace160 > $R/trace160.log 2>&1; echo "trace rc=$?"
gzip -f $R/trace160/trace.*.json 2>/dev/null; ls -la $R/trace160
pack
