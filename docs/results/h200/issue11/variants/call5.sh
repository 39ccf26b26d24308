# Screening of nvJPEG variants (env switches): YCbCr planes vs RGBI, high-priority copy stream, no HW pipelining.
source .gpu/common.sh
B=/tmp/build-new/app/pinfeed
timeout 200 bash -c "$(declare -f build); R=$R; build /tmp/build-new ." || { echo build failed; pack; exit 1; }
timeout 60 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
timeout 90 ctest --test-dir /tmp/build-new -L gpu -R "GpuDecode" --timeout 60 --output-on-failure > $R/ctest_gpu.log 2>&1; echo "ctest rc=$?"
grep -E "tests passed|Failed|\*\*\*|mean abs|MAD|mad" $R/ctest_gpu.log | head -20
b() {  # b NAME SIZE GRAPH MODES [ENV...]
  local n=$1 s=$2 g=$3 m=$4; shift 4
  env "$@" timeout 45 $B bench -c configs/bench_resnet50.toml $BS256 data.image_size=$s --decoder nvjpeg data.workers=2 train.cuda_graph=$g \
    --modes $m --repeats 2 --warmup 6 --steps 20 --out $R/$n > $R/$n.log 2>&1; echo "$n rc=$?"
  grep -E "^\| pinfeed|nvJPEG:" $R/$n.log | sort -u | head -4
}
b rgbi224 224 false dual_stream,gpu_resident PINFEED_NVJPEG_RGBI=1
b yuv224 224 false dual_stream X=1
b yuvhi224 224 false dual_stream PINFEED_COPY_HIGH=1
b yuvnp224 224 false dual_stream PINFEED_NVJPEG_NOPIPE=1
b yuvhinp224 224 false dual_stream PINFEED_COPY_HIGH=1 PINFEED_NVJPEG_NOPIPE=1
b rgbihi224 224 false dual_stream PINFEED_NVJPEG_RGBI=1 PINFEED_COPY_HIGH=1
b rgbi160 160 false dual_stream,gpu_resident PINFEED_NVJPEG_RGBI=1
b yuv160 160 false dual_stream X=1
b yuvhi160 160 false dual_stream PINFEED_COPY_HIGH=1
b yuvhinp160 160 false dual_stream PINFEED_COPY_HIGH=1 PINFEED_NVJPEG_NOPIPE=1
b gyuvhi224 224 true dual_stream,gpu_resident PINFEED_COPY_HIGH=1
pack
